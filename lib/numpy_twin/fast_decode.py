"""The numpy twin's decoding fast path: within `decode_layout(model, precision)` the model's
forward runs `decode_forward`, a lean pass for cached decoding whose matrix products are either
float32 or int8 weights (`lib/numpy_twin/quant.py`); leaving the block restores the taught one.

Why: a decode step reads every weight once and does little else, so its speed is the speed of
reading them. The taught forward keeps what a backward would need and goes through each layer's
general code; here each product writes into an output of its own kept between steps, the
attention reads the cache in place, and nothing is kept for a backward. In int8 the products
read a quarter of the bytes (see quant.py for what numpy's lack of an int8 product costs).
A forward without a cache runs as a prefill into a fresh cache, so a perplexity computed inside
the block measures the same products. GPT-2's architecture only (learned positions, LayerNorm,
the GELU MLP, one key/value head per query head); `python -m lib.bench decode` measures it
against the taught forward, and tests/test_quant.py checks it token for token.
"""
from __future__ import annotations

import contextlib
import math

import numpy as np

from .model import KVCache, Linear, causal_mask, gelu, softmax
from .quant import Int8Weight


class Fp32Weight:
    """A Linear's float32 weight and bias, x W^T + b into an output kept for the next call."""

    def __init__(self, weight, bias=None):
        self.weight, self.bias, self.out = weight, bias, None

    @property
    def nbytes(self) -> int:
        return self.weight.nbytes + (0 if self.bias is None else self.bias.nbytes)

    def __call__(self, x):                                   # x: (..., in) -> (..., out)
        x2 = x.reshape(-1, x.shape[-1])                      # (N, in)
        shape = (x2.shape[0], self.weight.shape[0])
        if self.out is None or self.out.shape != shape:
            self.out = np.empty(shape, np.float32)           # (N, out)
        y = np.matmul(x2, self.weight.T, out=self.out)
        if self.bias is not None:
            y += self.bias
        return y.reshape(*x.shape[:-1], shape[1])            # (..., out)


PRODUCTS = {"fp32": Fp32Weight, "int8": Int8Weight}


def check_gpt2(config):
    if (config.position, config.norm, config.mlp, config.kv_heads, config.sliding_window) != \
            ("learned", "layernorm", "mlp", config.n_head, None):
        raise ValueError("decode_layout covers GPT-2's architecture only (learned positions, LayerNorm, "
                         f"GELU MLP, no shared key/value heads, no sliding window); got {config.position}, "
                         f"{config.norm}, {config.mlp}, {config.kv_heads} key/value heads, "
                         f"sliding_window={config.sliding_window}")


def products(model, precision):
    """Each Linear's product (by the layer's id) and the tied head's, in `precision`."""
    if precision not in PRODUCTS:
        raise ValueError(f"precision must be one of {sorted(PRODUCTS)}, got {precision!r}")
    make = PRODUCTS[precision]
    table = {id(m): make(m.weight, m.bias) for m in model.modules() if isinstance(m, Linear)}
    table["head"] = make(model.wte.weight)
    return table


def weight_bytes(table) -> int:
    """Bytes of the matrix products' weights (and biases) in a `products` table."""
    return sum(p.nbytes for p in table.values())


def attention(attn, x, cache, layer, table):                 # x: (B, T, C)
    B, T, C = x.shape
    H, D = attn.n_head, C // attn.n_head
    qkv = table[id(attn.c_attn)](x)                          # (B, T, 3C)
    q, k, v = qkv.reshape(B, T, 3, H, D).transpose(2, 0, 3, 1, 4)  # (B, H, T, D) each
    start = cache.length
    k, v = cache.update(layer, k, v)                         # (B, H, start + T, D)
    att = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(D))  # (B, H, T, start + T)
    if T > 1:
        att += causal_mask(T, start, att.dtype)
    y = (softmax(att) @ v).transpose(0, 2, 1, 3).reshape(B, T, C)  # (B, T, C)
    return table[id(attn.c_proj)](y)                         # (B, T, C)


def decode_forward(model, idx, cache, table):
    """idx (B, T) new ids after cache.length cached positions -> logits (B, T, V); appends to
    the cache. The taught forward's arithmetic, with `table`'s products."""
    B, T = idx.shape
    start = cache.length
    x = model.wte.weight[idx] + model.wpe.weight[start:start + T]  # (B, T, C)
    for layer, block in enumerate(model.h):
        x = x + attention(block.attn, block.ln_1.forward(x)[0], cache, layer, table)
        h = gelu(table[id(block.mlp.c_fc)](block.ln_2.forward(x)[0]))  # (B, T, F)
        x = x + table[id(block.mlp.c_proj)](h)               # (B, T, C)
    cache.length += T
    return table["head"](model.ln_f.forward(x)[0]).copy()    # (B, T, V): the head's buffer is reused


@contextlib.contextmanager
def decode_layout(model, precision="fp32", table=None):
    """Within this block `model.forward` (and so `model.generate`) runs `decode_forward` with
    `precision`'s products, built on entry from the weights as they are then (or `table`, built
    earlier by `products`, which a benchmark reuses); a call without a cache runs as a prefill
    into a fresh one. Leaving the block restores the taught forward."""
    check_gpt2(model.config)
    table = products(model, precision) if table is None else table

    def forward(idx, kv_cache=None, extrapolate=False):
        idx = model._check_idx(idx, kv_cache, extrapolate)
        cache = KVCache(model.config, idx.shape[0], np.float32) if kv_cache is None else kv_cache
        return decode_forward(model, idx, cache, table)

    model.forward = forward
    try:
        yield table
    finally:
        del model.forward
