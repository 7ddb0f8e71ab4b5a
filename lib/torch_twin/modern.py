"""The torch twin's layers beyond GPT-2 (chapter 8): RMSNorm, SwiGLU, positions, windows, shared K/V heads.

SwiGLU is SiLU-gated; shared key/value heads are GQA, or MQA with one. RoPE's tables can be
scaled to reach past the training length (position interpolation, NTK-aware scaling); ALiBi
biases each head's scores by the distance to the key; sinusoidal positions are a fixed table
added to the embeddings. A sliding window W hides every key W or more positions back (such a
model decodes with model.py's RollingKVCache, which keeps the last W positions).

Built on `lib.torch_twin.model`: each piece registers under its lib.config.CHOICES name in the
table the model looks it up in (`NORMS`, `MLPS`, `ATTENTIONS`, `FIXED_POSITIONS`), so a config
that asks for one gets it, and model.py, which reads as GPT-2, never imports this module. Read it
beside `lib/numpy_twin/modern.py`: same names.

Shapes: B batch, T time, C = n_embd, H = n_head, D = C // H, G = kv_heads (key/value heads),
F = hidden_dim (feed-forward width), S = keys seen (cached positions + T).
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import GPTConfig
from .model import ATTENTIONS, FIXED_POSITIONS, MLPS, NORMS, CausalSelfAttention, Dropout, Linear, causal_mask


def silu(x):
    """SiLU (also called swish): x * sigmoid(x), SwiGLU's gate."""
    return F.silu(x)


# ---- sinusoidal positions and the sliding window's mask --------------------------------------------
def sinusoidal_positions(start, T, n_embd, dtype, device="cpu"):
    """The original Transformer's fixed positions (Vaswani et al. 2017), (T, n_embd): at position
    p = start + t, columns 2i and 2i + 1 hold sin and cos of p / 10000 ** (2i / n_embd). A formula,
    not a table of weights, so it exists for every position. Computed in float64, then cast."""
    inv_freq = 10000.0 ** (-torch.arange(0, n_embd, 2, dtype=torch.float64, device=device) / n_embd)  # (C/2,)
    angles = torch.arange(start, start + T, dtype=torch.float64, device=device)[:, None] * inv_freq  # (T, C/2)
    table = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (T, C/2, 2)
    return table.reshape(T, n_embd).to(dtype)                 # (T, C): sin, cos interleaved


def window_mask(T, start, window, dtype, device="cpu"):
    """(T, start + T) additive mask of a sliding window W: query i, at position start + i, keeps
    keys start + i - W + 1 onwards; keys W or more positions back get -inf. Added to causal_mask,
    each query sees its last W keys only."""
    return torch.full((T, start + T), float("-inf"), dtype=dtype, device=device).tril(start - window)


# ---- rotary position embeddings (RoPE) and shared key/value heads (GQA) -------------------------
def rope_cos_sin(start, T, head_dim, base, dtype, scaling=None, factor=1.0, device="cpu"):
    """cos and sin of the angles (start + t) * base ** (-2i / head_dim), each (T, head_dim / 2):
    at position start + t, pair i turns by that angle. Computed in float64, then cast.

    To run a model trained on n_ctx positions on s = `factor` times as many: scaling="interpolation"
    divides the positions by s (Chen et al. 2023), so position s p turns as p did in training;
    scaling="ntk" raises the base to base * s ** (D / (D - 2)) (NTK-aware scaling), which leaves
    the fastest pair as it was and slows the slowest by exactly s."""
    if scaling == "ntk":
        base = base * factor ** (head_dim / (head_dim - 2))
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim)  # (D/2,)
    positions = torch.arange(start, start + T, dtype=torch.float64, device=device)  # (T,)
    positions = positions / (factor if scaling == "interpolation" else 1.0)
    angles = positions[:, None] * inv_freq                    # (T, D/2)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x, cos, sin):
    """Rotate each pair (x_i, x_{i + D/2}) of every head's vector by its position's angle.
    x: (B, heads, T, D); cos, sin: (T, D/2). Pairs are taken across the two halves, as GPT-NeoX
    and transformers' LLaMA take them (the RoPE paper pairs neighbours; a permutation apart)."""
    x1, x2 = x.chunk(2, dim=-1)                               # (B, heads, T, D/2) each
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (B, heads, T, D)


# ---- ALiBi: attention with linear biases ----------------------------------------------------------
def alibi_slopes(n_head):
    """Each head's slope m_h (Press et al. 2022), float64 (H,). For H a power of two the geometric
    sequence 2 ** (-8 h / H), h = 1 .. H (8 heads: 1/2, 1/4, ..., 1/256). Otherwise the slopes of the
    largest power of two n below H, then every other slope of 2n heads (those that fall between
    the first ones) until there are H."""
    n = 2 ** int(math.floor(math.log2(n_head)))              # the largest power of two <= H
    slopes = 2.0 ** (-8.0 * torch.arange(1, n + 1, dtype=torch.float64) / n)  # (n,)
    between = 2.0 ** (-8.0 * torch.arange(1, 2 * n + 1, 2, dtype=torch.float64) / (2 * n))  # (n,): odd ones of 2n
    return torch.cat([slopes, between[:n_head - n]])          # (H,)


def alibi_bias(T, start, slopes, dtype, device="cpu"):
    """(H, T, start + T): -m_h * (i - j) for query i at position start + i and key j, so each head
    lowers a key's score in proportion to its distance. Only the causal keys (j <= i) are seen; the
    mask hides the rest. Computed in float64, then cast."""
    distance = (torch.arange(start, start + T, dtype=torch.float64, device=device)[:, None]
                - torch.arange(start + T, dtype=torch.float64, device=device)[None, :])  # (T, start + T)
    return (-slopes.to(device)[:, None, None] * distance[None]).to(dtype)  # (H, T, start + T)


def repeat_kv(x, n):
    """(B, G, S, D) -> (B, G * n, S, D): each key/value head repeated for the n query heads it serves."""
    return x if n == 1 else x.repeat_interleave(n, dim=1)


# ---- layers ----------------------------------------------------------------------------------------
RMSNorm = nn.RMSNorm        # divide by the root mean square, then scale: no mean, no bias


class SwiGLU(nn.Module):
    """Gated feed-forward: SiLU(x W1) * (x W3), then W2. Here W1 is c_gate, W3 c_fc, W2 c_proj;
    F is about 8/3 C, so its three matrices weigh about what the plain MLP's two do."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_gate = Linear(config.n_embd, config.hidden_dim, bias=config.bias)
        self.c_fc = Linear(config.n_embd, config.hidden_dim, bias=config.bias)
        self.c_proj = Linear(config.hidden_dim, config.n_embd, bias=config.bias)
        self.dropout = Dropout(config.dropout)                # on the output, before the residual add

    def forward(self, x):                                     # (B, T, C) -> (B, T, C)
        return self.dropout(self.c_proj(silu(self.c_gate(x)) * self.c_fc(x)))  # via (B, T, F)


class ModernAttention(CausalSelfAttention):
    """GPT-2's attention with chapter 8's changes: with G = kv_heads < H (GQA; G = 1 is MQA)
    each key/value head serves H / G query heads; with RoPE q and k are turned by their
    positions' angles before the scores (scaled as config.rope_scaling says); with ALiBi each
    head's scores get its linear bias; with config.sliding_window = W each query sees only its
    last W keys. The rest is CausalSelfAttention's."""

    def __init__(self, config: GPTConfig):
        super().__init__(config, config.kv_heads)
        self.window = config.sliding_window                   # W, or None: every earlier key
        self.rope_base = config.rope_base if config.position == "rope" else None
        self.rope_scaling, self.rope_factor = config.rope_scaling, config.rope_factor
        self.slopes = alibi_slopes(config.n_head) if config.position == "alibi" else None   # (H,)

    def score_bias(self, T, start, dtype, device):           # -> (T, start + T), (H, T, start + T) or None
        """The causal mask with the sliding window's and ALiBi's terms added; None (SDPA's own
        causal mask) when there are neither."""
        if self.window is None and self.slopes is None:
            return None
        mask = causal_mask(T, start, dtype, device)           # (T, start + T)
        if self.window is not None:
            mask = mask + window_mask(T, start, self.window, dtype, device)
        if self.slopes is not None:
            mask = mask + alibi_bias(T, start, self.slopes, dtype, device)   # (H, T, start + T)
        return mask

    def turn(self, q, k, start):                              # q: (B, H, T, D), k: (B, G, T, D)
        if self.rope_base is None:
            return q, k
        # (T, D/2) each
        cos, sin = rope_cos_sin(start, q.shape[2], q.shape[3], self.rope_base, q.dtype, self.rope_scaling,
                                self.rope_factor, q.device)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin)

    def share(self, k, v):                                    # (B, G, S, D) -> (B, H, S, D) each
        n = self.n_head // self.n_kv_head
        return repeat_kv(k, n), repeat_kv(v, n)


NORMS["rmsnorm"] = RMSNorm
MLPS["swiglu"] = SwiGLU
FIXED_POSITIONS["sinusoidal"] = sinusoidal_positions
# every position but GPT-2's learned one, and shared key/value heads or a window with any of them
ATTENTIONS.update(learned=ModernAttention, rope=ModernAttention, sinusoidal=ModernAttention, alibi=ModernAttention)
