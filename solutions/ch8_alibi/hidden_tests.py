"""Hidden tests of exercise 8.2 (ALiBi): the slopes per head and the causal bias from any start.

Reference: float64, written here from the paper's description (the slopes of a power of two as a
start value times its powers, the other head counts by taking every other slope of the next power
of two; the bias entry by entry from its definition); tests/test_grader.py checks it against lib's
versions.
Inputs: head counts that are powers of two (1 to 64) and that are not (3, 5, 6, 7, 12, 20, 24,
96); biases for a decoding step after 1,001 cached keys, a chunk after 37, float32 at 5,000
positions in (distances times slopes in the thousands), and one head.
Tolerances:
- slopes: |got - ref| <= 1e-13 |ref|: 2 ** (-8h/H) and the paper's start * start ** k differ by a
  few ulps; a slope off by one place in the sequence is off by a factor 2 ** (8/H) >= 1.09.
- bias, float64: <= 1e-13 |ref| + 1e-12; float32: the answer must be float32, within 1e-6 |ref|
  + 1e-6 (computed in float64 then cast, it is within half an ulp, 6e-8 relative).
- the -inf entries (keys after the query) exactly where the reference has them, finite elsewhere.
Edge test: one query at position 0 (bias 0, which an answer of zeros gets right).
"""
import math

import numpy as np

from grader.spec import Exercise, Test, Verdict, close

EXERCISE = Exercise(
    notebook="ch8_alibi", title="ALiBi's bias",
    functions=("alibi_slopes", "alibi_bias"),
    blocked=("lib.numpy_twin.modern:alibi_slopes", "lib.numpy_twin.modern:alibi_bias",
             "lib.torch_twin.modern:alibi_slopes", "lib.torch_twin.modern:alibi_bias"),
)

SLOPES = dict(rtol=1e-13, atol=0.0)
F64 = dict(rtol=1e-13, atol=1e-12)
F32 = dict(rtol=1e-6, atol=1e-6)


def _power_of_two(n):
    start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))           # 2^(-8/n)
    return [start * start ** k for k in range(n)]


def alibi_slopes(n_head):
    if math.log2(n_head).is_integer():
        return np.array(_power_of_two(n_head))
    closest = 2 ** math.floor(math.log2(n_head))
    return np.array(_power_of_two(closest) + _power_of_two(2 * closest)[0::2][:n_head - closest])


def alibi_bias(T, start, slopes, dtype):
    out = np.empty((len(slopes), T, start + T))
    for t in range(T):
        i = start + t
        for j in range(start + T):
            out[:, t, j] = -np.asarray(slopes, np.float64) * (i - j) if j <= i else -np.inf
    return out.astype(dtype)


REFERENCE = {"alibi_slopes": alibi_slopes, "alibi_bias": alibi_bias}


def causal(expected, dtype, tol):
    """Check: -inf exactly where expected has it, then the finite entries within tol."""
    values = close(np.where(np.isinf(expected), 0.0, expected), dtype=dtype, **tol)
    future = np.isneginf(expected)

    def check(got):
        if not isinstance(got, np.ndarray) or got.shape != expected.shape:
            return values(got)                               # its message names the type or shape
        if (np.isneginf(got) != future).any():
            n = int((np.isneginf(got) != future).sum())
            return Verdict(False, f"{n} entries where -inf (a key after the query) is wrong or missing",
                           f"-inf at the {int(future.sum())} keys after their queries")
        return values(np.where(future, 0, got).astype(got.dtype))
    return check


HEADS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 24, 64, 96)
# (label, T, start, heads, dtype)
BIAS_CASES = [
    ("T 7 from position 0, 8 heads", 7, 0, 8, "float64"),
    ("decoding: T 1 after 1001 keys, 12 heads", 1, 1001, 12, "float64"),
    ("a chunk: T 5 after 37 keys, 3 heads", 5, 37, 3, "float64"),
    ("one head, T 9 after 2 keys", 9, 2, 1, "float64"),
    ("float32: T 3 after 5000 keys, 6 heads", 3, 5000, 6, "float32"),
    ("one query at position 0, 4 heads", 1, 0, 4, "float64"),
]


def tests():
    out = [Test(f"alibi_slopes({h})", "alibi_slopes", (h,), close(alibi_slopes(h), dtype="float64", **SLOPES))
           for h in HEADS]
    for label, T, start, heads, dtype in BIAS_CASES:
        slopes = alibi_slopes(heads)
        out.append(Test(f"alibi_bias: {label}", "alibi_bias", (T, start, slopes, dtype),
                        causal(alibi_bias(T, start, slopes, dtype), dtype, F32 if dtype == "float32" else F64),
                        edge=label.startswith("one query at position 0")))
    return out
