"""The torch twin: every component of GPT-2 in torch, fast and GPU-ready (autograd does backward).

Mirrors lib.numpy_twin name for name; never imports it.
"""
from .model import (GPT, MLP, Block, CausalSelfAttention, Embedding, KVCache, LayerNorm, Linear,
                     gelu, gelu_exact, relu, softmax)

__all__ = ["GPT", "MLP", "Block", "CausalSelfAttention", "Embedding", "KVCache", "LayerNorm", "Linear",
           "gelu", "gelu_exact", "relu", "softmax"]
