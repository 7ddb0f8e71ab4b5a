"""Generation with the numpy twin: one prefill pass over the prompt, then one decode step per
new token, each reading the KV cache instead of recomputing the past.

Read it beside `lib/torch_twin/generate.py`: same functions, same names. Sampling is
`lib.sampling` (shared by both twins; its docstring gives the order of the steps).

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

from ..dropout import eval_mode
from ..sampling import Sampler, Sampling, check_generation, refill_length
from .model import KVCache, RollingKVCache


class Stream:
    """An iterator over the new tokens, one (B,) array of ids per decode step.

    Attributes: `prompt` (B, T), the prompt as given; `cropped`, how many of its first tokens
    the model never sees (T - n_ctx when T > n_ctx, else 0); `refills`, how many times a full
    cache has been refilled so far; `extrapolate`, whether the positions go on past n_ctx (a
    sliding-window model's rolling cache with positions other than learned ones). Rows that have
    produced `stop_token` keep producing it until every row has, and then the stream ends.
    """

    def __init__(self, model, idx, max_new_tokens, sampling=Sampling(), use_cache=True, stop_token=None):
        config = model.config
        self.prompt = np.asarray(idx)
        check_generation(self.prompt, config.vocab_size, max_new_tokens, use_cache, stop_token)
        B, T = self.prompt.shape
        self.model, self.n_ctx, self.stop_token = model, config.n_ctx, stop_token
        self.sampler = Sampler(config.vocab_size, B, sampling)
        self.sampler.observe(self.prompt)
        self.cropped, self.refills, self.remaining = max(0, T - self.n_ctx), 0, max_new_tokens
        self.window = self.prompt[:, -self.n_ctx:]           # (B, <= n_ctx): what the model sees
        rolling = use_cache and config.sliding_window is not None   # a sliding-window model keeps the last W
        self.cache = (RollingKVCache if rolling else KVCache)(config, B, model.wte.weight.dtype) \
            if use_cache else None
        self.extrapolate = rolling and config.position != "learned"  # the cache never fills
        self.pending = self.window                           # (B, t): ids not yet in the cache
        self.done = np.zeros(B, bool)                        # rows that have produced stop_token

    def __iter__(self):
        return self

    def __next__(self):                                      # -> (B,) new ids
        if self.remaining == 0 or (self.stop_token is not None and self.done.all()):
            raise StopIteration
        self.remaining -= 1
        return self.step()

    def step(self):                                          # -> (B,) new ids
        # no dropout while generating; a model without any is left in its mode (switching visits every layer)
        with eval_mode(self.model) if self.model.config.dropout else contextlib.nullcontext():
            logits = self.next_logits()                      # (B, V)
        ids = self.sampler(logits)                           # (B,)
        if self.stop_token is not None:
            ids = np.where(self.done, self.stop_token, ids)
            self.done |= ids == self.stop_token
        self.window = np.concatenate([self.window, ids[:, None]], axis=1)[:, -self.n_ctx:]  # (B, <= n_ctx)
        self.pending = ids[:, None]                          # (B, 1)
        return ids

    def next_logits(self):                                   # -> (B, V), last position only
        if self.cache is None:
            return self.model.forward(self.window)[:, -1]
        if not self.extrapolate and self.cache.length + self.pending.shape[1] > self.n_ctx:  # full: refill
            self.cache.length = 0
            self.pending = self.window[:, -refill_length(self.n_ctx):]
            self.refills += 1
        return self.model.forward(self.pending, kv_cache=self.cache, extrapolate=self.extrapolate)[:, -1]


def stream(model, idx, max_new_tokens, use_cache=True, stop_token=None, **sampling) -> Stream:
    """The new tokens one step at a time, as a `Stream` (same options as `generate`)."""
    return Stream(model, idx, max_new_tokens, Sampling(**sampling), use_cache, stop_token)


def generate(model, idx, max_new_tokens, use_cache=True, stop_token=None, **sampling):
    """idx: (B, T) equal-length prompts -> (B, T + n): each prompt, whole, then its n new tokens
    (n = max_new_tokens, or fewer once every row has produced `stop_token`).

    `sampling` are the fields of a lib.sampling.Sampling: temperature (0 is greedy), top_k, top_p,
    repetition_penalty, and a seed, which reproduces a sample. use_cache=False recomputes the
    whole window for every token.
    """
    s = Stream(model, idx, max_new_tokens, Sampling(**sampling), use_cache, stop_token)
    return np.concatenate([s.prompt, *(ids[:, None] for ids in s)], axis=1)  # (B, T + n)
