"""Generation with the torch twin: one prefill pass over the prompt, then one decode step per
new token, each reading the KV cache instead of recomputing the past.

Read it beside `lib/numpy_twin/generate.py`: same functions, same names, same order. Two
differences. The next token is chosen on the model's device (`lib/torch_twin/sampling.py`,
lib.sampling's steps in torch), so a GPU never waits for the host between tokens (with a
`stop_token`, `generate` asks whether every row has stopped once every `STOP_CHECK_EVERY`
steps); `sample_on_device=False` uses the shared sampler on the host instead. And on the
CPU, cached decoding multiplies through a second layout of the weights
(`lib/torch_twin/cpu_decode.py`: torch's one-row product uses one thread; numpy's BLAS needs no
such help).

Context: like nanoGPT, generation conditions on at most the last `n_ctx` tokens. A longer
prompt is cropped to its last `n_ctx` tokens (the stream reports how many it dropped in
`cropped`). Without the cache every step runs the model on the last `n_ctx` tokens. With it,
when the cache is full the last `refill_length(n_ctx)` tokens are prefilled again into an
emptied cache (counted in `refills`); see `lib.sampling.refill_length` for why.

A sliding-window model (config.sliding_window = W) decodes with a `RollingKVCache`, which keeps
the last W positions only. With positions that are a formula (sinusoidal, RoPE, ALiBi) it never
fills: the positions go on past n_ctx (the model extrapolates), each new token seeing the
previous W - 1 through the window, as a forward over the whole sequence with the window mask
would. With learned positions it refills at n_ctx as the plain cache does.
"""
from __future__ import annotations

import contextlib

import numpy as np
import torch

from ..dropout import eval_mode
from ..sampling import Sampling, check_generation, refill_length
from .cpu_decode import cpu_decode_layout
from .model import KVCache, RollingKVCache
from .sampling import DeviceSampler, HostSampler

# generate() reads "has every row produced stop_token?" once every this many steps, not every
# step: each read makes a GPU wait for the host. The extra steps only repeat stop_token, and
# generate trims them (`stop_length`), so its tokens are those of a check every step.
STOP_CHECK_EVERY = 16


class Stream:
    """An iterator over the new tokens, one (B,) tensor of ids (on the model's device) per step.

    Attributes: `prompt` (B, T), the prompt as given; `cropped`, how many of its first tokens
    the model never sees (T - n_ctx when T > n_ctx, else 0); `refills`, how many times a full
    cache has been refilled so far; `extrapolate`, whether the positions go on past n_ctx (a
    sliding-window model's rolling cache with positions other than learned ones). Rows that have
    produced `stop_token` keep producing it until every row has, and then the stream ends: at
    once, or, with check_every=k, at the next multiple of k steps (the check reads the device).
    """

    def __init__(self, model, idx, max_new_tokens, sampling=Sampling(), use_cache=True, stop_token=None,
                 sample_on_device=True, check_every=1):
        config, weight = model.config, model.wte.weight
        check_generation(np.asarray(idx.cpu() if torch.is_tensor(idx) else idx), config.vocab_size,
                         max_new_tokens, use_cache, stop_token)
        self.prompt = torch.as_tensor(idx, device=weight.device).long()
        B, T = self.prompt.shape
        self.model, self.n_ctx, self.stop_token = model, config.n_ctx, stop_token
        if sample_on_device:
            self.sampler = DeviceSampler(config.vocab_size, B, max_new_tokens, sampling, weight.device)
        else:
            self.sampler = HostSampler(config.vocab_size, B, sampling)
        self.sampler.observe(self.prompt)
        self.cropped, self.refills, self.remaining = max(0, T - self.n_ctx), 0, max_new_tokens
        self.window = self.prompt[:, -self.n_ctx:]           # (B, <= n_ctx): what the model sees
        rolling = use_cache and config.sliding_window is not None   # a sliding-window model keeps the last W
        self.cache = (RollingKVCache if rolling else KVCache)(config, B, weight.dtype, weight.device) \
            if use_cache else None
        self.extrapolate = rolling and config.position != "learned"  # the cache never fills
        self.pending = self.window                           # (B, t): ids not yet in the cache
        self.done = torch.zeros(B, dtype=torch.bool, device=weight.device)  # rows past stop_token
        self.check_every, self.produced = check_every, 0

    def __iter__(self):
        return self

    def __next__(self):                                      # -> (B,) new ids
        checking = self.stop_token is not None and self.produced % self.check_every == 0
        if self.remaining == 0 or checking and bool(self.done.all()):
            raise StopIteration
        self.remaining -= 1
        self.produced += 1
        return self.step()

    @torch.inference_mode()
    def step(self):                                          # -> (B,) new ids
        # no dropout while generating; a model without any is left in its mode (switching visits every layer)
        with eval_mode(self.model) if self.model.config.dropout else contextlib.nullcontext():
            logits = self.next_logits()                      # (B, V)
        ids = self.sampler(logits)                           # (B,)
        if self.stop_token is not None:
            ids = ids.masked_fill(self.done, self.stop_token)
            self.done |= ids == self.stop_token
        self.window = torch.cat([self.window, ids[:, None]], dim=1)[:, -self.n_ctx:]  # (B, <= n_ctx)
        self.pending = ids[:, None]                          # (B, 1)
        return ids

    def next_logits(self):                                   # -> (B, V), last position only
        if self.cache is None:
            return self.model.forward(self.window)[:, -1]
        if not self.extrapolate and self.cache.length + self.pending.shape[1] > self.n_ctx:  # full: refill
            self.cache.length = 0
            self.pending = self.window[:, -refill_length(self.n_ctx):]
            self.refills += 1
        layout = cpu_decode_layout(self.model) if self.cache.k[0].device.type == "cpu" else contextlib.nullcontext()
        with layout:
            return self.model.forward(self.pending, kv_cache=self.cache, extrapolate=self.extrapolate)[:, -1]


def stream(model, idx, max_new_tokens, use_cache=True, stop_token=None, sample_on_device=True,
           **sampling) -> Stream:
    """The new tokens one step at a time, as a `Stream` (same options as `generate`)."""
    return Stream(model, idx, max_new_tokens, Sampling(**sampling), use_cache, stop_token, sample_on_device)


def generate(model, idx, max_new_tokens, use_cache=True, stop_token=None, sample_on_device=True, **sampling):
    """idx: (B, T) equal-length prompts -> (B, T + n): each prompt, whole, then its n new tokens
    (n = max_new_tokens, or fewer once every row has produced `stop_token`).

    `sampling` are the fields of a lib.sampling.Sampling: temperature (0 is greedy), top_k, top_p,
    repetition_penalty, and a seed, which reproduces a sample. use_cache=False recomputes the
    whole window for every token.
    """
    s = Stream(model, idx, max_new_tokens, Sampling(**sampling), use_cache, stop_token, sample_on_device,
               check_every=STOP_CHECK_EVERY)
    out = torch.cat([s.prompt, *(ids[:, None] for ids in s)], dim=1)  # (B, T + n'), n' >= n
    T = s.prompt.shape[1]
    return out[:, :T + stop_length(out[:, T:], stop_token)]  # (B, T + n)


def stop_length(new, stop_token):
    """How many of the new tokens (B, n) a stream checking every step gives: up to the step
    where the last row produced stop_token, or all n. One read of the device, after the loop."""
    if stop_token is None:
        return new.shape[1]
    all_stopped = ((new == stop_token).cumsum(dim=1) > 0).all(dim=0)  # (n,)
    first = all_stopped.nonzero()                                     # (steps, 1)
    return int(first[0]) + 1 if len(first) else new.shape[1]
