"""Exercise ch8_rope's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("neighbour_pairs", "RoPE turns neighbours (x_2i, x_2i+1), not the halves' pairs (x_i, x_i+D/2)",
     (("    first, second = np.split(x, 2, axis=-1)", "    first, second = x[..., ::2], x[..., 1::2]"),
      ("return np.concatenate(turned, axis=-1)", "return np.stack(turned, axis=-1).reshape(x.shape)"))),
    ("theta_i_over_d", "theta_i = base^(-i/D) instead of base^(-2i/D)",
     (("theta = base ** (-np.arange(0, head_dim, 2) / head_dim)",
       "theta = base ** (-np.arange(0, head_dim // 2) / head_dim)"),)),
    ("ignores_start", "positions counted from 0 whatever start is (breaks decoding with a cache)",
     (("angles = np.arange(start, start + T)[:, None]", "angles = np.arange(T)[:, None]"),)),
    ("backward_turns_forward", "the backward pass rotates by +angle, as the forward one does",
     (("return apply_rope(dy, cos, -sin)", "return apply_rope(dy, cos, sin)"),)),
    ("rmsnorm_backward_no_projection", "dx = rstd * dy * g: rstd treated as a constant",
     (("dx = rstd * (dxhat - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))", "dx = rstd * dxhat"),)),
    ("rmsnorm_subtracts_mean", "RMSNorm with the mean subtracted first, as LayerNorm does",
     (("    rstd = 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)   # (..., 1)\n    return x * rstd * weight",
       "    xc = x - x.mean(axis=-1, keepdims=True)\n    rstd = 1.0 / np.sqrt((xc * xc).mean(axis=-1, keepdims=True) + eps)\n"
       "    return xc * rstd * weight"),)),
    ("cos_sin_float64", "cos and sin left in float64, so float32 inputs come back float64",
     (("return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)", "return np.cos(angles), np.sin(angles)"),)),
]

TRIVIAL = {
    "identity": '''
import numpy as np


def rope_cos_sin(start, T, head_dim, base, dtype):
    return np.ones((T, head_dim // 2), dtype), np.zeros((T, head_dim // 2), dtype)


def apply_rope(x, cos, sin):
    return x


def apply_rope_backward(dy, cos, sin):
    return dy


def rmsnorm(x, weight, eps):
    return x * weight


def rmsnorm_backward(dy, x, weight, eps):
    return dy * weight, (dy * x).reshape(-1, x.shape[-1]).sum(axis=0)
''',
}

IMPORT_REFERENCE = '''
from lib.numpy_twin.modern import RMSNorm, apply_rope, apply_rope_backward, rope_cos_sin


def _norm(weight, eps):
    norm = RMSNorm(len(weight), eps).astype(weight.dtype)
    norm.weight[...] = weight
    return norm


def rmsnorm(x, weight, eps):
    return _norm(weight, eps).forward(x)[0]


def rmsnorm_backward(dy, x, weight, eps):
    norm = _norm(weight, eps)
    dx = norm.backward(dy, norm.forward(x)[1])
    return dx, norm.grads["weight"]
'''
