"""Hidden tests of exercise 10.1 (FlashAttention's forward pass): the online softmax's update and
the tiled causal attention.

Reference: float64, written here from the definitions (the update as the formulas of the
exercise; the attention as one softmax over every row's visible keys, row by row, so that no
reference shares the answer's tiling); tests/test_flash.py checks it against lib's versions.
Inputs: a first tile (running max -inf, sums 0), a tile whose maximum is higher than the running
one and one whose maximum is lower, masked keys (-inf), scores in the thousands, leading axes;
attention at T = 1, T below, at and above the block size, blocks of 1, 7 and 64, float32 with
scores in the thousands, and T = 32,768 (group "long", LONG_POINTS points): there the (T, T)
matrix alone is 4 GiB in float32, and that group's sandbox holds LONG_MEMORY_MB, so only an answer
that never builds it can finish. Its queries are small and random (scale 0.1, so that the weights
differ from key to key and no shortcut such as a running mean of v is right); the grader computes
its expectation here, 512 query rows at a time, when it judges the answer.
Tolerances:
- float64: |got - ref| <= 1e-12 + 1e-10 |ref|. A missing rescale, a mask one off, a missing
  1/sqrt(D) are off by O(1).
- float32: the answer must be float32, within 1e-5 of max|v| (5e-4 of it with scores in the
  thousands: float32 rounds a score of 4,000 by ~2.4e-4, which each weight e^s carries as a
  relative error; lib's answer is off by ~1e-4 there).
Edge tests: T = 1 (the answer is v, which `return v` gets right) and a first tile of one key.
"""
import math

import numpy as np

from grader.spec import Exercise, Test, Verdict, close

EXERCISE = Exercise(
    notebook="ch10_flash", title="the online softmax and the tiled forward pass of attention",
    functions=("online_softmax_update", "flash_attention"),
    blocked=("lib.numpy_twin.flash:*",),
    groups={"main": 60.0, "long": 60.0},
    memory={"long": 1024},
)
LONG_POINTS = 4             # never building the (T, T) matrix is the exercise's point

F64 = dict(rtol=1e-10, atol=1e-12)


def online_softmax_update(m, l, acc, s, v_tile):
    m, l, acc, s, v_tile = (np.asarray(a, np.float64) for a in (m, l, acc, s, v_tile))
    m_new = np.maximum(m, np.max(s, axis=-1))
    old = np.where(np.isneginf(m), 0.0, np.exp(m - np.where(np.isneginf(m), 0.0, m_new)))
    weights = np.exp(s - m_new[..., None])
    return m_new, old * l + weights.sum(axis=-1), old[..., None] * acc + np.einsum("...nb,...bd->...nd", weights, v_tile)


def flash_attention(q, k, v, block_size=64):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    T, D = q.shape[-2:]
    out = np.empty(q.shape)
    for i in range(T):                                       # query i sees keys 0..i
        s = np.einsum("...d,...jd->...j", q[..., i, :], k[..., :i + 1, :]) / math.sqrt(D)
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        out[..., i, :] = np.einsum("...j,...jd->...d", p / p.sum(axis=-1, keepdims=True), v[..., :i + 1, :])
    return out


REFERENCE = {"online_softmax_update": online_softmax_update, "flash_attention": flash_attention}


def triple(expected, dtype, tol):
    """Check the update's (m, l, acc)."""
    checks = [close(e, dtype=dtype, **tol) for e in expected]

    def check(got):
        if not isinstance(got, (list, tuple)) or len(got) != 3:
            return False, f"expected a triple (m, l, acc), got {type(got).__name__}"
        for name, c, g in zip(("m", "l", "acc"), checks, got):
            verdict = c(g)
            if not verdict[0]:
                return Verdict(False, f"{name}: {verdict[1]}", verdict[2] if len(verdict) > 2 else "")
        return True, "all three right"
    return check


def relative_to_v(expected, v, share, dtype):
    return close(expected, rtol=0, atol=share * float(np.abs(v).max()), dtype=dtype)


def update_cases(rng):
    """(label, (m, l, acc, s, v_tile), dtype, edge)"""
    out = []
    n, b, D = 5, 7, 3
    s, v = rng.standard_normal((n, b)), rng.standard_normal((b, D))
    out.append(("the first tile: running max -inf, sums 0", (np.full(n, -np.inf), np.zeros(n), np.zeros((n, D)), s, v),
                "float64", False))
    s1, v1 = rng.standard_normal((n, 1)), rng.standard_normal((1, D))
    out.append(("a first tile of one key", (np.full(n, -np.inf), np.zeros(n), np.zeros((n, D)), s1, v1), "float64", True))
    state = online_softmax_update(np.full(n, -np.inf), np.zeros(n), np.zeros((n, D)), s, v)
    higher = rng.standard_normal((n, b)) + 4.0
    out.append(("a second tile with a higher maximum (rescale)", (*state, higher, rng.standard_normal((b, D))),
                "float64", False))
    lower = rng.standard_normal((n, b)) - 4.0
    lower[1, 3] = -np.inf
    out.append(("a second tile with a lower maximum and a masked key", (*state, lower, rng.standard_normal((b, D))),
                "float64", False))
    big = 2000 * rng.standard_normal((2, 3, 4, 6))
    first = online_softmax_update(np.full((2, 3, 4), -np.inf), np.zeros((2, 3, 4)), np.zeros((2, 3, 4, 5)), big,
                                  rng.standard_normal((2, 3, 6, 5)))
    out.append(("scores in the thousands, leading axes (2, 3)", (*first, 2000 * rng.standard_normal((2, 3, 4, 6)),
                                                                 rng.standard_normal((2, 3, 6, 5))), "float64", False))
    return out


# (label, shape, block, scale, dtype, group, edge)
ATTENTION_CASES = [
    ("T 1", (2, 1, 8), 64, 1.0, "float64", "main", True),
    ("T 5 in blocks of 2", (5, 4), 2, 1.0, "float64", "main", False),
    ("T 64, one block of 64", (2, 64, 8), 64, 1.0, "float64", "main", False),
    ("T 130 in blocks of 64, shape (2, 3, 130, 16)", (2, 3, 130, 16), 64, 1.0, "float64", "main", False),
    ("T 37 in blocks of 7, leading axes (2, 2, 2)", (2, 2, 2, 37, 8), 7, 1.0, "float64", "main", False),
    ("T 12 in blocks of 1", (3, 12, 4), 1, 1.0, "float64", "main", False),
    ("float32: T 100", (2, 100, 32), 64, 1.0, "float32", "main", False),
    ("float32, scores in the thousands: T 150", (2, 150, 64), 64, 30.0, "float32", "main", False),
]
LONG_T = 32768


def causal_attention_by_rows(q, k, v, rows=512):
    """Causal attention in float64, `rows` queries at a time (each chunk sees its keys 0..i):
    at most rows x T scores at once, 128 MiB at T = 32,768."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    T, D = q.shape[-2:]
    out = np.empty(q.shape)
    for start in range(0, T, rows):
        end = min(start + rows, T)
        s = np.einsum("...id,...jd->...ij", q[..., start:end, :], k[..., :end, :]) / math.sqrt(D)
        s[..., np.arange(end)[None, :] > np.arange(start, end)[:, None]] = -np.inf
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        out[..., start:end, :] = np.einsum("...ij,...jd->...id", p / p.sum(axis=-1, keepdims=True), v[..., :end, :])
    return out


def long_check(q, k, v):
    """Check the long test's answer against causal_attention_by_rows, computed when it is judged
    (some seconds), not each time the tests are listed."""
    def check(got):
        return relative_to_v(causal_attention_by_rows(q, k, v), v, 1e-5, "float32")(got)
    return check


def tests():
    out = []
    rng = np.random.default_rng(1010)
    for label, args, dtype, edge in update_cases(rng):
        out.append(Test(f"online_softmax_update: {label}", "online_softmax_update", args,
                        triple(online_softmax_update(*args), dtype, F64), edge=edge))
    for label, shape, block, scale, dtype, group, edge in ATTENTION_CASES:
        q, k, v = ((scale * rng.standard_normal(shape)).astype(dtype) for _ in range(3))
        want = flash_attention(q, k, v)
        if dtype == "float32":
            check = relative_to_v(want, v, 5e-4 if scale > 1 else 1e-5, dtype)
        else:
            check = close(want, dtype=dtype, **F64)
        out.append(Test(f"flash_attention: {label}", "flash_attention", (q, k, v), check,
                        kwargs={"block_size": block}, group=group, edge=edge))
    k, v = (rng.standard_normal((1, LONG_T, 4)).astype(np.float32) for _ in range(2))
    q = (0.1 * rng.standard_normal((1, LONG_T, 4))).astype(np.float32)
    out.append(Test(f"flash_attention: T {LONG_T:,} in float32, where a (T, T) array does not fit the sandbox",
                    "flash_attention", (q, k, v), long_check(q, k, v), kwargs={"block_size": 64}, group="long",
                    points=LONG_POINTS))
    return out
