"""Hidden tests of exercise 11.2: each head's prefix-matching score and the in-context score.

Reference: float64, written here from the definitions with loops over queries, heads and sequences
(no fancy indexing, so that no reference shares the answer's), independently of lib;
tests/test_in_context.py checks it against lib's versions.
Inputs: attention of known score (induction, previous-token, same-token and uniform heads), random
causal softmax attention of 1 to 3 layers and heads, single sequences and batches, periods from 1
to T - 1 (T up to 64), odd T with a repeat shorter than the first copy; losses of one sequence and
of batches, positions at both ends of the context.
Tolerances: |got - ref| <= 1e-12 + 1e-12 |ref| (means of at most a few thousand float64 numbers:
rounding is ~1e-15; an answer one position off is off by O(0.1) on these inputs).
Edge tests: bad input (a function that always raises gets them right).
"""
import numpy as np

import math

from grader.spec import Exercise, Test, Verdict, close

EXERCISE = Exercise(
    notebook="ch11_in_context", title="the prefix-matching score and the in-context score",
    functions=("prefix_matching_score", "in_context_score"),
    blocked=("lib.scaling.in_context:*",),
)

TOL = dict(rtol=1e-12, atol=1e-12)


def prefix_matching_score(attn, period):
    attn = np.asarray(attn, dtype=float)
    batch = attn.reshape(-1, *attn.shape[-4:])                # (B, L, H, T, T)
    B, L, H, T, _ = batch.shape
    score = np.zeros((L, H))
    for layer in range(L):
        for h in range(H):
            total = 0.0
            for b in range(B):
                total += sum(batch[b, layer, h, i, i - period + 1] for i in range(period, T)) / (T - period)
            score[layer, h] = total / B
    return score


def in_context_score(per_position_loss, early, late):
    loss = np.asarray(per_position_loss, dtype=float).reshape(-1, np.shape(per_position_loss)[-1])
    return float(np.mean([row[late - 1] for row in loss]) - np.mean([row[early - 1] for row in loss]))


REFERENCE = {"prefix_matching_score": prefix_matching_score, "in_context_score": in_context_score}


def float_close(expected):
    """Check: a float (a numpy float or a 0-d array too) within TOL of expected."""
    def check(got):
        if isinstance(got, np.ndarray) and got.shape == ():
            got = got.item()
        if not isinstance(got, (float, np.floating)) or not math.isfinite(got):
            return False, f"expected a finite float, got {got!r}"
        if abs(got - expected) > TOL["atol"] + TOL["rtol"] * abs(expected):
            return Verdict(False, f"score off: got {got!r}", f"expected {expected!r}")
        return True, "score right"
    return check


def _causal_softmax(rng, *shape, scale=3.0):
    """Random attention weights (*shape, T): a softmax over each query's keys 0..i (shape ends in T)."""
    T = shape[-1]
    s = scale * rng.standard_normal((*shape, T)) + np.triu(np.full((T, T), -np.inf), k=1)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return p / p.sum(axis=-1, keepdims=True)


def _head(T, target):
    attn = np.zeros((T, T))
    rows = np.arange(T)
    attn[rows, np.clip(target(rows), 0, rows)] = 1.0
    return attn


def _known_heads(T, period):
    """(2, 2, T, T): induction, previous-token; same-token, uniform."""
    even = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    return np.stack([np.stack([_head(T, lambda i: i - period + 1), _head(T, lambda i: i - 1)]),
                     np.stack([_head(T, lambda i: i - period), even])])


def _prefix_cases():
    rng = np.random.default_rng(1102)
    return {
        "known heads, T 20, period 10": (_known_heads(20, 10), 10),
        "known heads, T 64, period 32": (_known_heads(64, 32), 32),
        "random attention, 3 layers of 2 heads, T 16, period 8": (_causal_softmax(rng, 3, 2, 16), 8),
        "a batch of 5, 2 layers of 3 heads, T 24, period 12": (_causal_softmax(rng, 5, 2, 3, 24), 12),
        "a batch with an induction head and a uniform one": (
            np.stack([_known_heads(20, 10)[:1, :1], _known_heads(20, 10)[1:, 1:]]), 10),
        "T 21, period 13 (a repeat shorter than the first copy)": (_causal_softmax(rng, 1, 2, 21), 13),
        "period 1 (every query scores its own position)": (_causal_softmax(rng, 1, 1, 9), 1),
        "period T - 1": (_causal_softmax(rng, 2, 2, 12), 11),
    }


def _loss_cases():
    rng = np.random.default_rng(1103)
    return {
        "one sequence of 64, tokens 6 and 62": (rng.exponential(2.0, 64), 6, 62),
        "a batch of 8 of 64, tokens 6 and 62": (rng.exponential(2.0, (8, 64)), 6, 62),
        "a batch of 3 of 512, tokens 50 and 500": (rng.exponential(2.0, (3, 512)), 50, 500),
        "the first and the last token": (rng.exponential(2.0, (4, 10)), 1, 10),
        "a batch of 1, tokens 2 and 3 of 3": (rng.exponential(2.0, (1, 3)), 2, 3),
    }


def tests():
    out = []
    for label, args in _prefix_cases().items():
        out.append(Test(f"prefix matching: {label}", "prefix_matching_score", args,
                        close(prefix_matching_score(*args), dtype="float64", **TOL)))
    for label, args in _loss_cases().items():
        out.append(Test(f"in-context score: {label}", "in_context_score", args,
                        float_close(in_context_score(*args))))
    attn = _known_heads(20, 10)
    bad_prefix = {
        "attention of 3 axes raises ValueError": (attn[0], 10),
        "attention of 6 axes raises ValueError": (attn[None, None], 10),
        "keys and queries of different lengths raise ValueError": (attn[..., :19], 10),
        "period = T raises ValueError": (attn, 20),
        "period = 0 raises ValueError": (attn, 0),
        "period = 2.5 raises ValueError": (attn, 2.5),
    }
    out += [Test(label, "prefix_matching_score", args, expect_error="ValueError", edge=True)
            for label, args in bad_prefix.items()]
    loss = np.ones((2, 64))
    bad_loss = {
        "losses of 3 axes raise ValueError": (np.ones((2, 2, 64)), 6, 62),
        "early = late raises ValueError": (loss, 10, 10),
        "early > late raises ValueError": (loss, 62, 6),
        "early = 0 raises ValueError": (loss, 0, 62),
        "late = T + 1 raises ValueError": (loss, 6, 65),
        "early = 6.0 (not an integer) raises ValueError": (loss, 6.0, 62),
    }
    out += [Test(label, "in_context_score", args, expect_error="ValueError", edge=True)
            for label, args in bad_loss.items()]
    return out
