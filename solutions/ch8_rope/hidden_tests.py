"""Hidden tests of exercise 8.1 (RoPE and RMSNorm): the rotation's angles, the rotation, its
backward pass, RMSNorm and its backward pass.

Reference: float64, written here from the definitions (the rotation as a 2 x 2 matrix per pair,
RMSNorm's backward as the full Jacobian-vector product with the two terms of d xhat / d x);
tests/test_grader.py checks it against lib's versions.
Inputs: shapes with T = 1 and positions that start late and odd (a decoding step after a KV cache
of 37 or 1001 tokens), head sizes from 6 to 128, bases 10,000 and 500; vectors scaled by 1e-3 so
that eps matters, and by 1e3.
Tolerances:
- float64: |got - ref| <= 1e-12 + 1e-10 |ref|, and atol 1e-10 for the angles' cos and sin: an
  angle of ~1000 rad computed as base ** (-2i/D) or exp(-2i/D log base) differs by ~1e-13 rad.
  A wrong pairing, a wrong theta (i/D for 2i/D) or the forward rotation as the backward one are
  off by O(1).
- float32: the answer must be float32, within 1e-5 + 1e-5 |ref|.
Edge tests: position 0 with T = 1 (no rotation at all, which the identity gets right) for the three
RoPE functions.
"""
import numpy as np

from grader.spec import Exercise, Test, Verdict, close

EXERCISE = Exercise(
    notebook="ch8_rope", title="RoPE and RMSNorm",
    functions=("rope_cos_sin", "apply_rope", "apply_rope_backward", "rmsnorm", "rmsnorm_backward"),
    blocked=("lib.numpy_twin.modern:rope_cos_sin", "lib.numpy_twin.modern:apply_rope",
             "lib.numpy_twin.modern:apply_rope_backward", "lib.numpy_twin.modern:RMSNorm.forward",
             "lib.numpy_twin.modern:RMSNorm.backward", "lib.torch_twin.modern:rope_cos_sin",
             "lib.torch_twin.modern:apply_rope"),
)

F64 = dict(rtol=1e-10, atol=1e-12)
ANGLES = dict(rtol=1e-10, atol=1e-10)
F32 = dict(rtol=1e-5, atol=1e-5)


def rope_cos_sin(start, T, head_dim, base, dtype):
    positions = np.arange(start, start + T, dtype=np.float64)
    theta = np.array([base ** (-2.0 * i / head_dim) for i in range(head_dim // 2)])
    angles = np.outer(positions, theta)
    cos, sin = np.cos(angles), np.sin(angles)
    return cos.astype(dtype), sin.astype(dtype)


def _rotate(x, cos, sin, sign):
    x = np.asarray(x, np.float64)
    half = x.shape[-1] // 2
    out = np.empty_like(x)
    for i in range(half):                                    # one 2 x 2 rotation per pair (i, i + half)
        c, s = cos[:, i].astype(np.float64), sign * sin[:, i].astype(np.float64)
        a, b = x[..., i], x[..., i + half]
        out[..., i], out[..., i + half] = c * a - s * b, s * a + c * b
    return out


def apply_rope(x, cos, sin):
    return _rotate(x, cos, sin, 1.0)


def apply_rope_backward(dy, cos, sin):
    return _rotate(dy, cos, sin, -1.0)                       # R^T = R(-angle)


def rmsnorm(x, weight, eps):
    x = np.asarray(x, np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rmsnorm_backward(dy, x, weight, eps):
    x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    C = x.shape[-1]
    r = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)                # (..., 1)
    g = dy * weight                                                          # dL/dxhat
    # d xhat_i / d x_j = delta_ij / r - x_i x_j / (C r^3)
    dx = g / r - x * np.sum(g * x, axis=-1, keepdims=True) / (C * r ** 3)
    dweight = np.sum((dy * x / r).reshape(-1, C), axis=0)
    return dx, dweight


REFERENCE = {"rope_cos_sin": rope_cos_sin, "apply_rope": apply_rope, "apply_rope_backward": apply_rope_backward,
             "rmsnorm": rmsnorm, "rmsnorm_backward": rmsnorm_backward}


def pair(expected, dtype, tol, names):
    """Check a pair of arrays, (cos, sin) or (dx, dweight)."""
    checks = [close(e, dtype=dtype, **tol) for e in expected]

    def check(got):
        if not isinstance(got, (list, tuple)) or len(got) != 2:
            return False, f"expected a pair ({', '.join(names)}), got {type(got).__name__}"
        for name, c, g in zip(names, checks, got):
            verdict = c(g)
            if not verdict[0]:
                return Verdict(False, f"{name}: {verdict[1]}", verdict[2] if len(verdict) > 2 else "")
        return True, "both right"
    return check


# (label, start, B, heads, T, D, base, dtype)
ROPE_CASES = [
    ("start 0, T 9, D 16, base 10000", 0, 2, 3, 9, 16, 10000.0, "float64"),
    ("decoding: start 37, T 1, D 64, base 10000", 37, 3, 2, 1, 64, 10000.0, "float64"),
    ("start 1001, T 3, D 128, base 10000", 1001, 1, 2, 3, 128, 10000.0, "float64"),
    ("start 5, T 11, D 6, base 500", 5, 2, 1, 11, 6, 500.0, "float64"),
    ("float32: start 13, T 4, D 32, base 10000", 13, 2, 2, 4, 32, 10000.0, "float32"),
    ("position 0 alone: start 0, T 1, D 8", 0, 2, 2, 1, 8, 10000.0, "float64"),
]
# (label, shape, scale, eps, dtype)
NORM_CASES = [
    ("shape (3, 5, 12)", (3, 5, 12), 1.0, 1e-5, "float64"),
    ("T 1: shape (2, 1, 32)", (2, 1, 32), 1.0, 1e-5, "float64"),
    ("values ~1e-3 (eps matters), shape (4, 7)", (4, 7), 1e-3, 1e-5, "float64"),
    ("values ~1e3, eps 1e-6, shape (2, 3, 9)", (2, 3, 9), 1e3, 1e-6, "float64"),
    ("float32: shape (2, 6, 16)", (2, 6, 16), 1.0, 1e-5, "float32"),
]


def tests():
    out = []
    rng = np.random.default_rng(81)
    for label, start, B, H, T, D, base, dtype in ROPE_CASES:
        f32, edge = dtype == "float32", label.startswith("position 0")
        cos, sin = rope_cos_sin(start, T, D, base, dtype)
        out.append(Test(f"rope_cos_sin: {label}", "rope_cos_sin", (start, T, D, base, dtype),
                        pair((cos, sin), dtype, F32 if f32 else ANGLES, ("cos", "sin")), edge=edge))
        x = rng.standard_normal((B, H, T, D)).astype(dtype)
        for name, ref in (("apply_rope", apply_rope), ("apply_rope_backward", apply_rope_backward)):
            out.append(Test(f"{name}: {label}", name, (x, cos, sin), close(ref(x, cos, sin), dtype=dtype,
                                                                             **(F32 if f32 else F64)), edge=edge))
    for label, shape, scale, eps, dtype in NORM_CASES:
        tol = F32 if dtype == "float32" else F64
        x = (scale * rng.standard_normal(shape)).astype(dtype)
        weight = rng.standard_normal(shape[-1]).astype(dtype)
        dy = rng.standard_normal(shape).astype(dtype)
        out.append(Test(f"rmsnorm: {label}", "rmsnorm", (x, weight, eps), close(rmsnorm(x, weight, eps), dtype=dtype, **tol)))
        out.append(Test(f"rmsnorm_backward: {label}", "rmsnorm_backward", (dy, x, weight, eps),
                        pair(rmsnorm_backward(dy, x, weight, eps), dtype, tol, ("dx", "dweight"))))
    return out
