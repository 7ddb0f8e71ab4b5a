"""The numpy twin: every component of GPT-2 in numpy, with hand-written backward passes.

Imports numpy and lib's framework-free modules only (never torch).
"""
from .model import (GPT, MLP, Block, CausalSelfAttention, Embedding, KVCache, LayerNorm, Linear, RollingKVCache,
                     gelu, gelu_exact, relu, softmax)
from .modern import (ModernAttention, RMSNorm, SwiGLU, alibi_bias, alibi_slopes, apply_rope,
                     repeat_kv, rope_cos_sin, silu, sinusoidal_positions, window_mask)

__all__ = ["GPT", "MLP", "Block", "CausalSelfAttention", "Embedding", "KVCache", "LayerNorm", "Linear",
           "RollingKVCache", "gelu", "gelu_exact", "relu", "softmax"]
# beyond GPT-2 (chapter 8), registered in model.py's tables by modern.py
__all__ += ["ModernAttention", "RMSNorm", "SwiGLU", "alibi_bias", "alibi_slopes", "apply_rope",
            "repeat_kv", "rope_cos_sin", "silu", "sinusoidal_positions", "window_mask"]
from .train import AdamW, Trainer, clip_grad_norm, cross_entropy, estimate_loss, grad_norm, perplexity, train_step

__all__ += ["AdamW", "Trainer", "clip_grad_norm", "cross_entropy", "estimate_loss", "grad_norm", "perplexity",
            "train_step"]
from .flash import flash_attention  # chapter 10

__all__ += ["flash_attention"]
