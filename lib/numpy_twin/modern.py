"""The numpy twin's layers beyond GPT-2 (chapter 8): RMSNorm, SwiGLU, positions, windows, shared K/V heads.

SwiGLU is SiLU-gated; shared key/value heads are GQA, or MQA with one. RoPE's tables can be
scaled to reach past the training length (position interpolation, NTK-aware scaling); ALiBi
biases each head's scores by the distance to the key; sinusoidal positions are a fixed table
added to the embeddings. A sliding window W hides every key W or more positions back (such a
model decodes with model.py's RollingKVCache, which keeps the last W positions).

Built on `lib.numpy_twin.model`: each piece registers under its lib.config.CHOICES name in the
table the model looks it up in (`NORMS`, `MLPS`, `ATTENTIONS`, `FIXED_POSITIONS`), so a config
that asks for one gets it, and model.py, which reads as GPT-2, never imports this module.
Forward and backward side by side, as in model.py; read it beside `lib/torch_twin/modern.py`.

Shapes: B batch, T time, C = n_embd, H = n_head, D = C // H, G = kv_heads (key/value heads),
F = hidden_dim (feed-forward width), S = keys seen (cached positions + T).
"""
from __future__ import annotations

import numpy as np

from ..config import GPTConfig
from .model import ATTENTIONS, FIXED_POSITIONS, MLPS, NORMS, CausalSelfAttention, Dropout, Linear, Module, causal_mask


# ---- sinusoidal positions and the sliding window's mask ------------------------------------
def sinusoidal_positions(start, T, n_embd, dtype):
    """The original Transformer's fixed positions (Vaswani et al. 2017), (T, n_embd): at position
    p = start + t, columns 2i and 2i + 1 hold sin and cos of p / 10000 ** (2i / n_embd). A formula,
    not a table of weights, so it exists for every position. Computed in float64, then cast."""
    inv_freq = 10000.0 ** (-np.arange(0, n_embd, 2) / n_embd)            # (C/2,)
    angles = np.arange(start, start + T)[:, None] * inv_freq[None, :]    # (T, C/2)
    table = np.stack([np.sin(angles), np.cos(angles)], axis=-1)          # (T, C/2, 2)
    return table.reshape(T, n_embd).astype(dtype)                        # (T, C): sin, cos interleaved


def window_mask(T, start, window, dtype):
    """(T, start + T) additive mask of a sliding window W: query i, at position start + i, keeps
    keys start + i - W + 1 onwards; keys W or more positions back get -inf. Added to causal_mask,
    each query sees its last W keys only."""
    return np.tril(np.full((T, start + T), -np.inf, dtype), k=start - window)


# ---- SiLU, SwiGLU's gate --------------------------------------------------------------------
def sigmoid(x):
    """1 / (1 + exp(-x)), written with tanh so that no exponent overflows."""
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def silu(x):
    """SiLU (also called swish): x * sigmoid(x), SwiGLU's gate."""
    return x * sigmoid(x)


def silu_backward(dy, x):
    s = sigmoid(x)
    return dy * s * (1.0 + x * (1.0 - s))


# ---- rotary position embeddings (RoPE) and shared key/value heads (GQA) -------------------------
def rope_cos_sin(start, T, head_dim, base, dtype, scaling=None, factor=1.0):
    """cos and sin of the angles (start + t) * base ** (-2i / head_dim), each (T, head_dim / 2):
    at position start + t, pair i turns by that angle. Computed in float64, then cast.

    To run a model trained on n_ctx positions on s = `factor` times as many: scaling="interpolation"
    divides the positions by s (Chen et al. 2023), so position s p turns as p did in training;
    scaling="ntk" raises the base to base * s ** (D / (D - 2)) (NTK-aware scaling), which leaves
    the fastest pair as it was and slows the slowest by exactly s."""
    if scaling == "ntk":
        base = base * factor ** (head_dim / (head_dim - 2))
    inv_freq = base ** (-np.arange(0, head_dim, 2) / head_dim)           # (D/2,)
    positions = np.arange(start, start + T) / (factor if scaling == "interpolation" else 1.0)  # (T,)
    angles = positions[:, None] * inv_freq[None, :]                      # (T, D/2)
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


def apply_rope(x, cos, sin):
    """Rotate each pair (x_i, x_{i + D/2}) of every head's vector by its position's angle.
    x: (B, heads, T, D); cos, sin: (T, D/2). Pairs are taken across the two halves, as GPT-NeoX
    and transformers' LLaMA take them (the RoPE paper pairs neighbours; a permutation apart)."""
    x1, x2 = np.split(x, 2, axis=-1)                         # (B, heads, T, D/2) each
    return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)  # (B, heads, T, D)


def apply_rope_backward(dy, cos, sin):
    """A rotation's transpose is the rotation by minus the angle."""
    return apply_rope(dy, cos, -sin)


# ---- ALiBi: attention with linear biases ----------------------------------------------------------
def alibi_slopes(n_head):
    """Each head's slope m_h (Press et al. 2022), float64 (H,). For H a power of two the geometric
    sequence 2 ** (-8 h / H), h = 1 .. H (8 heads: 1/2, 1/4, ..., 1/256). Otherwise the slopes of the
    largest power of two n below H, then every other slope of 2n heads (those that fall between
    the first ones) until there are H."""
    n = 2 ** int(np.floor(np.log2(n_head)))                 # the largest power of two <= H
    slopes = 2.0 ** (-8.0 * np.arange(1, n + 1) / n)        # (n,)
    between = 2.0 ** (-8.0 * np.arange(1, 2 * n + 1, 2) / (2 * n))  # (n,): the odd ones of 2n heads
    return np.concatenate([slopes, between[:n_head - n]])   # (H,)


def alibi_bias(T, start, slopes, dtype):
    """(H, T, start + T): -m_h * (i - j) for query i at position start + i and key j, so each head
    lowers a key's score in proportion to its distance. Only the causal keys (j <= i) are seen; the
    mask hides the rest. Computed in float64, then cast."""
    distance = np.arange(start, start + T)[:, None] - np.arange(start + T)[None, :]   # (T, start + T)
    return (-slopes[:, None, None] * distance[None]).astype(dtype)    # (H, T, start + T)


def repeat_kv(x, n):
    """(B, G, S, D) -> (B, G * n, S, D): each key/value head repeated for the n query heads it serves."""
    return x if n == 1 else np.repeat(x, n, axis=1)


def repeat_kv_backward(dx, n):
    """(B, G * n, S, D) -> (B, G, S, D): a shared head's gradient is the sum over the heads it served."""
    B, Gn, S, D = dx.shape
    return dx if n == 1 else dx.reshape(B, Gn // n, n, S, D).sum(axis=2)


# ---- layers ------------------------------------------------------------------------------------
class RMSNorm(Module):
    """Divide each vector by its root mean square, then scale: LayerNorm without the mean and
    without the bias (eps as LayerNorm's)."""
    param_names = ("weight",)

    def __init__(self, n_embd, eps=1e-5):
        self.weight = np.ones(n_embd, np.float32)
        self.eps = eps

    def forward(self, x):                                    # x: (B, T, C)
        rstd = 1.0 / np.sqrt((x * x).mean(axis=-1, keepdims=True) + self.eps)  # (B, T, 1)
        xhat = x * rstd
        return xhat * self.weight, (xhat, rstd)

    def backward(self, dy, cache):
        xhat, rstd = cache
        self.grads["weight"] += (dy * xhat).reshape(-1, xhat.shape[-1]).sum(axis=0)
        dxhat = dy * self.weight
        # d/dx of x / rms(x): remove the part of dxhat along xhat (no mean was taken out)
        return rstd * (dxhat - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))


class SwiGLU(Module):
    """Gated feed-forward: SiLU(x W1) * (x W3), then W2. Here W1 is c_gate, W3 c_fc, W2 c_proj;
    F is about 8/3 C, so its three matrices weigh about what the plain MLP's two do."""

    def __init__(self, config: GPTConfig):
        self.c_gate = Linear(config.n_embd, config.hidden_dim, config.bias)
        self.c_fc = Linear(config.n_embd, config.hidden_dim, config.bias)
        self.c_proj = Linear(config.hidden_dim, config.n_embd, config.bias)
        self.dropout = Dropout(config.dropout)               # on the output, before the residual add

    def forward(self, x):                                    # x: (B, T, C)
        g, c_gate_cache = self.c_gate.forward(x)             # (B, T, F)
        u, c_fc_cache = self.c_fc.forward(x)                 # (B, T, F)
        out, c_proj_cache = self.c_proj.forward(silu(g) * u) # (B, T, C)
        out, drop_mask = self.dropout.forward(out)
        return out, (c_gate_cache, g, c_fc_cache, u, c_proj_cache, drop_mask)

    def backward(self, dout, cache):
        c_gate_cache, g, c_fc_cache, u, c_proj_cache, drop_mask = cache
        dout = self.dropout.backward(dout, drop_mask)
        da = self.c_proj.backward(dout, c_proj_cache)        # (B, T, F)
        dx = self.c_gate.backward(silu_backward(da * u, g), c_gate_cache)  # (B, T, C)
        return dx + self.c_fc.backward(da * silu(g), c_fc_cache)


class ModernAttention(CausalSelfAttention):
    """GPT-2's attention with chapter 8's changes: with G = kv_heads < H (GQA; G = 1 is MQA)
    each key/value head serves H / G query heads; with RoPE q and k are turned by their
    positions' angles before the scores (scaled as config.rope_scaling says); with ALiBi each
    head's scores get its linear bias; with config.sliding_window = W each query sees only its
    last W keys. The rest is CausalSelfAttention's."""

    def __init__(self, config: GPTConfig):
        super().__init__(config, config.kv_heads)
        self.window = config.sliding_window                  # W, or None: every earlier key
        self.rope_base = config.rope_base if config.position == "rope" else None
        self.rope_scaling, self.rope_factor = config.rope_scaling, config.rope_factor
        self.slopes = alibi_slopes(config.n_head) if config.position == "alibi" else None   # (H,)

    def score_bias(self, T, start, dtype):                   # -> (T, start + T), or (H, T, start + T)
        mask = causal_mask(T, start, dtype)                  # (T, start + T)
        if self.window is not None:
            mask = mask + window_mask(T, start, self.window, dtype)
        if self.slopes is not None:
            mask = mask + alibi_bias(T, start, self.slopes, dtype)   # (H, T, start + T)
        return mask

    def turn(self, q, k, start):                             # q: (B, H, T, D), k: (B, G, T, D)
        if self.rope_base is None:
            return q, k, None
        rope = rope_cos_sin(start, q.shape[2], q.shape[3], self.rope_base, q.dtype, self.rope_scaling,
                            self.rope_factor)                 # (T, D/2) each
        return apply_rope(q, *rope), apply_rope(k, *rope), rope

    def turn_backward(self, dq, dk, rope):
        if rope is None:
            return dq, dk
        return apply_rope_backward(dq, *rope), apply_rope_backward(dk, *rope)

    def share(self, k, v):                                   # (B, G, S, D) -> (B, H, S, D) each
        n = self.n_head // self.n_kv_head
        return repeat_kv(k, n), repeat_kv(v, n)

    def share_backward(self, dk, dv):                        # (B, H, S, D) -> (B, G, S, D) each
        n = self.n_head // self.n_kv_head
        return repeat_kv_backward(dk, n), repeat_kv_backward(dv, n)


NORMS["rmsnorm"] = RMSNorm
MLPS["swiglu"] = SwiGLU
FIXED_POSITIONS["sinusoidal"] = sinusoidal_positions
# every position but GPT-2's learned one, and shared key/value heads or a window with any of them
ATTENTIONS.update(learned=ModernAttention, rope=ModernAttention, sinusoidal=ModernAttention, alibi=ModernAttention)
