"""Generation with the torch twin: one prefill pass over the prompt, then one decode step per
new token, each reading the KV cache instead of recomputing the past.

Read it beside `lib/numpy_twin/generate.py`: same functions, same names. Two additions. On the
CPU, cached decoding multiplies through a second layout of the weights (`cpu_decode_layout`,
below: torch's one-row product uses one thread; numpy's BLAS needs no such help). And the
next token is chosen on the model's device by torch versions of `lib.sampling`'s steps
(`penalize`, `filtered_probs`, `draw`, same semantics, same names; tests check they pick the
tokens the shared sampler picks). The uniform numbers still come from a numpy Generator
seeded as the shared sampler's, drawn for all steps at once and copied to the device once, so
a GPU never waits for the host between tokens (unless a `stop_token` must be checked).
`sample_on_device=False` uses the shared sampler on the host instead.

Context: like nanoGPT, generation conditions on at most the last `n_ctx` tokens. A longer
prompt is cropped to its last `n_ctx` tokens (the stream reports how many it dropped in
`cropped`). Without the cache every step runs the model on the last `n_ctx` tokens. With it,
when the cache is full the last `refill_length(n_ctx)` tokens are prefilled again into an
emptied cache (counted in `refills`); see `lib.sampling.refill_length` for why.
"""
from __future__ import annotations

import contextlib
import weakref

import numpy as np
import torch

from .. import sampling
from ..sampling import check_generation, refill_length
from .model import KVCache, Linear, split_inputs


# ---- lib.sampling's steps in torch, for the device ------------------------------------------------
def penalize(logits, seen, penalty):
    """Step 1. logits (B, V), seen (B, V) bool -> penalised copy (B, V)."""
    scaled = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, scaled, logits)


def filtered_probs(logits, temperature=1.0, top_k=None, top_p=None):
    """Steps 2 to 4 for temperature > 0: logits (B, V) -> probabilities (B, V) in float64."""
    z = logits.double() / temperature                               # (B, V)
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[:, -1:]           # (B, 1): k-th largest
        z = z.masked_fill(z < kth, float("-inf"))
    p = torch.softmax(z, dim=-1)                                    # (B, V)
    if top_p is not None and top_p < 1:
        s = torch.sort(p, dim=-1, descending=True).values           # (B, V), most likely first
        before = torch.cumsum(s, dim=-1) - s                        # (B, V): mass ahead of each
        n_keep = (before < top_p).sum(dim=-1, keepdim=True)         # (B, 1), >= 1
        cut = s.gather(-1, n_keep - 1)                              # (B, 1): least likely kept value
        p = torch.softmax(z.masked_fill(p < cut, float("-inf")), dim=-1)  # (B, V)
    return p


def draw(probs, u):
    """Step 5. probs (B, V), u (B,) in [0, 1) -> (B,) token ids by the inverse CDF."""
    c = torch.cumsum(probs, dim=-1)                                 # (B, V)
    ids = (c <= u[:, None] * c[:, -1:]).sum(dim=-1)                 # (B,)
    positions = torch.arange(probs.shape[-1], device=probs.device)  # (V,)
    last = torch.where(probs > 0, positions, -1).amax(dim=-1)       # (B,): last kept id
    return torch.minimum(ids, last)


class DeviceSampler:
    """lib.sampling.Sampler on the model's device: same settings, same seeded stream of u
    (drawn for `steps` steps at once), `seen` kept as a (B, V) bool tensor."""

    def __init__(self, vocab_size, batch, steps, temperature=1.0, top_k=None, top_p=None,
                 repetition_penalty=1.0, seed=None, device="cpu"):
        host = sampling.Sampler(vocab_size, batch, temperature, top_k, top_p, repetition_penalty, seed)
        self.temperature, self.top_k, self.top_p, self.penalty = temperature, top_k, top_p, repetition_penalty
        self.u = torch.as_tensor(host.rng.random((steps, batch)), device=device) if temperature else None
        self.seen = None if host.seen is None else torch.zeros(host.seen.shape, dtype=torch.bool, device=device)
        self.step = 0

    def observe(self, ids):
        """Mark ids (B, T) as seen, for the repetition penalty."""
        if self.seen is not None:
            self.seen.scatter_(1, ids, True)

    def __call__(self, logits):
        """logits (B, V) -> next ids (B,), which it also marks as seen."""
        if self.seen is not None:
            logits = penalize(logits, self.seen, self.penalty)
        if self.temperature == 0:
            ids = logits.argmax(dim=-1)                             # (B,)
        else:
            ids = draw(filtered_probs(logits, self.temperature, self.top_k, self.top_p), self.u[self.step])
        self.step += 1
        self.observe(ids[:, None])
        return ids


class HostSampler(sampling.Sampler):
    """The shared sampler, fed from and returning tensors (one host round trip per token)."""

    def observe(self, ids):
        super().observe(ids.cpu().numpy() if torch.is_tensor(ids) else ids)

    def __call__(self, logits):
        ids = super().__call__(logits.float().cpu().numpy())
        return torch.as_tensor(ids, device=logits.device)


# ---- the CPU decode layout ------------------------------------------------------------------------
_LAYOUTS = weakref.WeakKeyDictionary()                       # model -> ((threads, weights' versions), splits)


@contextlib.contextmanager
def cpu_decode_layout(model):
    """Within this block, the model's Linear layers and its tied head multiply through blocks of
    W^T's rows (inputs), one per thread (model.py's `split_matmul`). Decoding reads every weight once
    per token and does little else, so its speed is the speed of reading the weights; torch's
    CPU product of one row by W (MKL's, here) runs on one thread: on a 2-core machine all of
    GPT-2 Small's weights read at 9 GB/s that way and at 16 GB/s in blocks (`python -m
    lib.bench decode` measures whole generations).
    The blocks are a second copy of the weights, built on first use and kept for the model until
    any weight changes (an optimizer step, a load), which the tensors' version counters reveal."""
    linears = [m for m in model.modules() if isinstance(m, Linear)]
    k = torch.get_num_threads()
    key = (k, tuple((p.data_ptr(), p._version) for p in model.parameters()))
    known = _LAYOUTS.get(model)
    if known is None or known[0] != key:
        with torch.no_grad():
            splits = [split_inputs(m.weight, k) for m in linears] + [split_inputs(model.wte.weight, k)]
        _LAYOUTS[model] = known = (key, splits)
    *splits, model.head_split = known[1]
    for m, split in zip(linears, splits):
        m.split = split
    try:
        yield
    finally:
        for m in linears:
            del m.split
        del model.head_split


# ---- generation --------------------------------------------------------------------------------
class Stream:
    """An iterator over the new tokens, one (B,) tensor of ids (on the model's device) per step.

    Attributes: `prompt` (B, T), the prompt as given; `cropped`, how many of its first tokens
    the model never sees (T - n_ctx when T > n_ctx, else 0); `refills`, how many times a full
    cache has been refilled so far. Rows that have produced `stop_token` keep producing it
    until every row has, and then the stream ends.
    """

    def __init__(self, model, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
                 repetition_penalty=1.0, use_cache=True, seed=None, stop_token=None, sample_on_device=True):
        config, weight = model.config, model.wte.weight
        check_generation(np.asarray(idx.cpu() if torch.is_tensor(idx) else idx), config.vocab_size,
                         max_new_tokens, use_cache, stop_token)
        self.prompt = torch.as_tensor(idx, device=weight.device).long()
        B, T = self.prompt.shape
        self.model, self.n_ctx, self.stop_token = model, config.n_ctx, stop_token
        if sample_on_device:
            self.sampler = DeviceSampler(config.vocab_size, B, max_new_tokens, temperature, top_k, top_p,
                                         repetition_penalty, seed, weight.device)
        else:
            self.sampler = HostSampler(config.vocab_size, B, temperature, top_k, top_p, repetition_penalty, seed)
        self.sampler.observe(self.prompt)
        self.cropped, self.refills, self.remaining = max(0, T - self.n_ctx), 0, max_new_tokens
        self.window = self.prompt[:, -self.n_ctx:]           # (B, <= n_ctx): what the model sees
        self.cache = KVCache(config, B, weight.dtype, weight.device) if use_cache else None
        self.pending = self.window                           # (B, t): ids not yet in the cache
        self.done = torch.zeros(B, dtype=torch.bool, device=weight.device)  # rows past stop_token

    def __iter__(self):
        return self

    def __next__(self):                                      # -> (B,) new ids
        if self.remaining == 0 or (self.stop_token is not None and bool(self.done.all())):
            raise StopIteration
        self.remaining -= 1
        return self.step()

    @torch.inference_mode()
    def step(self):                                          # -> (B,) new ids
        ids = self.sampler(self.next_logits())               # (B,)
        if self.stop_token is not None:
            ids = ids.masked_fill(self.done, self.stop_token)
            self.done |= ids == self.stop_token
        self.window = torch.cat([self.window, ids[:, None]], dim=1)[:, -self.n_ctx:]  # (B, <= n_ctx)
        self.pending = ids[:, None]                          # (B, 1)
        return ids

    def next_logits(self):                                   # -> (B, V), last position only
        if self.cache is None:
            return self.model.forward(self.window)[:, -1]
        if self.cache.length + self.pending.shape[1] > self.n_ctx:   # full: refill the last tokens
            self.cache.length = 0
            self.pending = self.window[:, -refill_length(self.n_ctx):]
            self.refills += 1
        layout = cpu_decode_layout(self.model) if self.cache.k[0].device.type == "cpu" else contextlib.nullcontext()
        with layout:
            return self.model.forward(self.pending, kv_cache=self.cache)[:, -1]


def stream(model, idx, max_new_tokens, **options) -> Stream:
    """The new tokens one step at a time, as a `Stream` (same options as `generate`)."""
    return Stream(model, idx, max_new_tokens, **options)


def generate(model, idx, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
             repetition_penalty=1.0, use_cache=True, seed=None, stop_token=None, sample_on_device=True):
    """idx: (B, T) equal-length prompts -> (B, T + n): each prompt, whole, then its n new tokens
    (n = max_new_tokens, or fewer once every row has produced `stop_token`).

    temperature 0 is greedy; see lib.sampling for top_k, top_p and repetition_penalty. A seed
    reproduces a sample. use_cache=False recomputes the whole window for every token.
    """
    s = Stream(model, idx, max_new_tokens, temperature, top_k, top_p, repetition_penalty,
               use_cache, seed, stop_token, sample_on_device)
    return torch.cat([s.prompt, *(ids[:, None] for ids in s)], dim=1)  # (B, T + n)
