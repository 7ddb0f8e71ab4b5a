"""The torch twin: every component of GPT-2 in torch, fast and GPU-ready (autograd does backward).

Mirrors lib.numpy_twin name for name; never imports it. Three modules have no numpy twin:
`sampling`, lib.sampling's steps in torch (the next token chosen on the model's device),
`cpu_decode`, the weights' layout for decoding on a CPU, and `gpu`, the device side of training
(GPU precision, the process group, DistributedDataParallel), which the numpy twin, one process on
the CPU, does not have.
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
