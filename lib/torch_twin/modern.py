"""The torch twin's layers beyond GPT-2 (chapter 8): RMSNorm, SwiGLU, RoPE, shared K/V heads.

SwiGLU is SiLU-gated; shared key/value heads are GQA, or MQA with one.

Built on `lib.torch_twin.model`: each piece registers under its lib.config.CHOICES name in the
table the model looks it up in (`NORMS`, `MLPS`, `ATTENTIONS`), so a config that asks for one
gets it, and model.py, which reads as GPT-2, never imports this module. Read it beside `lib/numpy_twin/modern.py`: same names.

Shapes: B batch, T time, C = n_embd, H = n_head, D = C // H, G = kv_heads (key/value heads),
F = hidden_dim (feed-forward width), S = keys seen (cached positions + T).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import GPTConfig
from .model import ATTENTIONS, MLPS, NORMS, CausalSelfAttention, Dropout, Linear


def silu(x):
    """SiLU (also called swish): x * sigmoid(x), SwiGLU's gate."""
    return F.silu(x)


# ---- rotary position embeddings (RoPE) and shared key/value heads (GQA) -------------------------
def rope_cos_sin(start, T, head_dim, base, dtype, device="cpu"):
    """cos and sin of the angles (start + t) * base ** (-2i / head_dim), each (T, head_dim / 2):
    at position start + t, pair i turns by that angle. Computed in float64, then cast."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim)  # (D/2,)
    angles = torch.arange(start, start + T, dtype=torch.float64, device=device)[:, None] * inv_freq  # (T, D/2)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x, cos, sin):
    """Rotate each pair (x_i, x_{i + D/2}) of every head's vector by its position's angle.
    x: (B, heads, T, D); cos, sin: (T, D/2). Pairs are taken across the two halves, as GPT-NeoX
    and transformers' LLaMA take them (the RoPE paper pairs neighbours; a permutation apart)."""
    x1, x2 = x.chunk(2, dim=-1)                               # (B, heads, T, D/2) each
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (B, heads, T, D)


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
    """GPT-2's attention with chapter 8's two changes: with G = kv_heads < H (GQA; G = 1 is MQA)
    each key/value head serves H / G query heads, and with RoPE q and k are turned by their
    positions' angles before the scores. The rest is CausalSelfAttention's."""

    def __init__(self, config: GPTConfig):
        super().__init__(config, config.kv_heads)
        self.rope_base = config.rope_base if config.position == "rope" else None

    def turn(self, q, k, start):                              # q: (B, H, T, D), k: (B, G, T, D)
        if self.rope_base is None:
            return q, k
        # (T, D/2) each
        cos, sin = rope_cos_sin(start, q.shape[2], q.shape[3], self.rope_base, q.dtype, q.device)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin)

    def share(self, k, v):                                    # (B, G, S, D) -> (B, H, S, D) each
        n = self.n_head // self.n_kv_head
        return repeat_kv(k, n), repeat_kv(v, n)


NORMS["rmsnorm"] = RMSNorm
MLPS["swiglu"] = SwiGLU
ATTENTIONS.update(learned=ModernAttention, rope=ModernAttention)   # shared key/value heads with either
