"""Choosing the next token from the logits, written once for both twins (numpy only).

For each row of logits (B, V), in this order:

1. Repetition penalty (CTRL, Keskar et al. 2019): every token id already in the sequence
   (prompt and generated so far, each id once however often it occurred) has its logit divided
   by `repetition_penalty` if positive, multiplied by it if negative. 1 changes nothing.
2. Temperature: 0 means greedy, the argmax of the penalised logits (the argmax survives any
   top-k or top-p filter, so steps 3 to 5 are skipped). Otherwise the logits are divided by it.
3. Top-k: keep the logits >= the k-th largest; ties with it are kept too. None keeps all.
4. Top-p (nucleus): with p = softmax of what is left, sorted from most to least likely, keep
   the shortest prefix whose probability reaches `top_p`, and any token tied with its last.
   The most likely token is always kept; None or 1 keeps all.
5. Sample: softmax over the kept tokens (float64), then the inverse CDF: for u ~ U[0, 1) from
   the seeded numpy Generator, the first token, in vocabulary order, whose cumulative
   probability exceeds u. One u per row per step, so a seed reproduces a sample, and the torch
   twin's on-device sampler, given the same u, picks the same tokens.

Steps 3 and 4 keep a set defined by a threshold on values, so ties never depend on the order
a sort happens to leave them in.

`Sampling` holds these settings (and the seed), checked where it is built; `Sampler` applies
them. Also here, because both twins' generation loops share them: the checks of a prompt and of
the generation settings, and `refill_length`, the window a full KV cache is refilled with.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Sampling:
    """How the next token is chosen: the settings of the steps above, and the seed of the uniform
    numbers (None: fresh ones every time). Every bad value raises a ValueError here, in one line
    naming it and what was expected."""
    temperature: float = 1.0          # 0: greedy
    top_k: int | None = None          # None: keep all
    top_p: float | None = None        # None or 1: keep all
    repetition_penalty: float = 1.0   # 1: none
    seed: int | None = None

    def __post_init__(self):
        t, k, p, r = self.temperature, self.top_k, self.top_p, self.repetition_penalty
        if not _is_real(t) or not math.isfinite(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0 (0 means greedy), got {t!r}")
        if k is not None and (not _is_int(k) or k < 1):
            raise ValueError(f"top_k must be None or an integer >= 1, got {k!r}")
        if p is not None and (not _is_real(p) or not 0 < p <= 1):
            raise ValueError(f"top_p must be None or a number in (0, 1], got {p!r}")
        if not _is_real(r) or not math.isfinite(r) or r <= 0:
            raise ValueError(f"repetition_penalty must be a finite number > 0 (1 means none), got {r!r}")
        if self.seed is not None and (not _is_int(self.seed) or self.seed < 0):
            raise ValueError(f"seed must be None or an integer >= 0, got {self.seed!r}")


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def penalize(logits, seen, penalty):
    """Step 1. logits (B, V), seen (B, V) bool -> penalised copy (B, V)."""
    scaled = np.where(logits > 0, logits / penalty, logits * penalty)
    return np.where(seen, scaled, logits)


def filtered_probs(logits, temperature=1.0, top_k=None, top_p=None):
    """Steps 2 to 4 for temperature > 0: logits (B, V) -> probabilities (B, V) in float64,
    zero outside the kept set, each row summing to 1."""
    z = np.asarray(logits, np.float64) / temperature                # (B, V)
    if top_k is not None and top_k < z.shape[-1]:
        kth = -np.partition(-z, top_k - 1, axis=-1)[:, top_k - 1:top_k]  # (B, 1): k-th largest
        z = np.where(z >= kth, z, -np.inf)
    p = _softmax(z)                                                 # (B, V)
    if top_p is not None and top_p < 1:
        s = -np.sort(-p, axis=-1)                                   # (B, V), most likely first
        before = np.cumsum(s, axis=-1) - s                          # (B, V): mass ahead of each
        n_keep = (before < top_p).sum(axis=-1, keepdims=True)       # (B, 1), >= 1 since before[0] = 0
        cut = np.take_along_axis(s, n_keep - 1, axis=-1)            # (B, 1): least likely kept value
        p = _softmax(np.where(p >= cut, z, -np.inf))                # (B, V)
    return p


def _softmax(z):                                                    # (B, V) -> (B, V)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def draw(probs, u):
    """Step 5. probs (B, V), u (B,) in [0, 1) -> (B,) token ids by the inverse CDF."""
    c = np.cumsum(probs, axis=-1)                                   # (B, V)
    ids = (c <= u[:, None] * c[:, -1:]).sum(axis=-1)                # (B,): entries not yet past u
    last = probs.shape[-1] - 1 - np.argmax(probs[:, ::-1] > 0, axis=-1)  # (B,): last kept id
    return np.minimum(ids, last)                                    # rounding can never pick past it


class Sampler:
    """The sampling state of one generation: its `Sampling` settings, its seeded Generator and,
    for the repetition penalty, which ids each of the B rows has seen. `sampler(logits)` -> (B,) ids."""

    def __init__(self, vocab_size, batch, settings: Sampling):
        self.settings = settings
        self.rng = np.random.default_rng(settings.seed)
        self.seen = np.zeros((batch, vocab_size), bool) if settings.repetition_penalty != 1 else None

    def observe(self, ids):
        """Mark ids (B, T) as seen, for the repetition penalty."""
        if self.seen is not None:
            ids = np.asarray(ids)
            self.seen[np.arange(ids.shape[0])[:, None], ids] = True

    def __call__(self, logits):
        """logits (B, V) -> next ids (B,), which it also marks as seen."""
        logits, s = np.asarray(logits), self.settings
        if self.seen is not None:
            logits = penalize(logits, self.seen, s.repetition_penalty)
        if s.temperature == 0:
            ids = logits.argmax(axis=-1)                            # (B,)
        else:
            probs = filtered_probs(logits, s.temperature, s.top_k, s.top_p)
            ids = draw(probs, self.rng.random(logits.shape[0]))
        self.observe(ids[:, None])
        return ids


# ---- generation settings shared by both twins --------------------------------------------------
def check_generation(idx, vocab_size, max_new_tokens, use_cache=True, stop_token=None) -> None:
    """idx: the prompts as a numpy array, (B, T) token ids, T >= 1. Raise a ValueError naming
    the first bad input and what was expected."""
    if idx.ndim != 2 or not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(f"the prompt must be a (B, T) array of integer token ids (a batch of equal-length "
                         f"prompts), got shape {idx.shape} dtype {idx.dtype}")
    if idx.shape[0] == 0 or idx.shape[1] == 0:
        raise ValueError(f"empty prompt: shape {idx.shape}; expected at least one row of at least one token")
    if idx.min() < 0 or idx.max() >= vocab_size:
        raise ValueError(f"prompt token ids must lie in [0, {vocab_size}), got min {idx.min()} max {idx.max()}")
    if not _is_int(max_new_tokens) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    if not isinstance(use_cache, bool):
        raise ValueError(f"use_cache must be True or False, got {use_cache!r}")
    if stop_token is not None and (not _is_int(stop_token) or not 0 <= stop_token < vocab_size):
        raise ValueError(f"stop_token must be None or a token id in [0, {vocab_size}), got {stop_token!r}")


def refill_length(n_ctx: int) -> int:
    """How many of the latest tokens refill a full KV cache: half the context (at least one).

    Positions are absolute, so when the window slides every cached key and value is stale and
    must be recomputed. Refilling half the context pays that prefill once per n_ctx / 2 new
    tokens, where keeping the whole window would pay it for every token. Until the context is
    full the cached path conditions on exactly the tokens the uncached one does (the last
    n_ctx); past it, on the last n_ctx / 2 to n_ctx.
    """
    return max(1, n_ctx // 2)
