"""FlashAttention in numpy: causal attention tiled over the keys, with the online softmax, so that
no (T, T) matrix of scores or weights ever exists, forward or backward.

The plain attention (`plain_attention`, what chapter 3 builds) computes all T x T scores, their
softmax and the weighted sum of the values: its memory grows as T^2. Here the keys and values
come in tiles of `block_size`. For every query the forward keeps a running maximum m of its
scores, a running sum l of exp(score - m) and a running weighted sum of values; each new tile
may raise the maximum, and then the sums so far are rescaled by exp(m_old - m_new) before the
tile's share is added (the online softmax). After the last tile, output = sums / l. Memory
grows as T x block_size. The forward keeps, per query, only the log-sum-exp of its scores
(m + log l); the backward recomputes each tile's weights from it instead of storing them.

In numpy the tiles are a Python loop of smaller products, so it is slower than the plain one
wherever the (T, T) matrix still fits in memory; the gain is memory, and on a GPU, where the
tile stays in fast on-chip memory, time too (Dao et al. 2022). The torch twin's
`F.scaled_dot_product_attention` is a fused kernel of the same idea.

Shapes: q, k, v (..., T, D), any leading axes (e.g. batch and heads); query i sees keys 0..i.
"""
from __future__ import annotations

import math

import numpy as np

from .model import causal_mask, softmax


def check_qkv(q, k, v, block_size):
    """One clear error for inputs the tiled attention cannot take."""
    if not (q.shape == k.shape == v.shape) or q.ndim < 2:
        raise ValueError(f"q, k, v must share one shape (..., T, D); got {q.shape}, {k.shape}, {v.shape}")
    if not isinstance(block_size, (int, np.integer)) or block_size < 1:
        raise ValueError(f"block_size must be a positive integer, got {block_size!r}")


def plain_attention(q, k, v):
    """softmax(q k^T / sqrt(D) + causal mask) v, the whole (T, T) matrix at once (chapter 3)."""
    T, D = q.shape[-2:]
    att = (q @ np.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(D))    # (..., T, T)
    att += causal_mask(T, 0, att.dtype)                          # -inf above the diagonal
    return softmax(att) @ v                                      # (..., T, D)


def tile_scores(q, k_tile, start):
    """Scaled scores of queries start.. against keys start..start + b, the tile's future keys at
    -inf. q: (..., T - start, D), k_tile: (..., b, D) -> (..., T - start, b)."""
    b, D = k_tile.shape[-2:]
    s = (q @ np.swapaxes(k_tile, -1, -2)) * (1.0 / math.sqrt(D))  # (..., T - start, b)
    s[..., :b, :] += causal_mask(b, 0, s.dtype)[: s.shape[-2]]   # only the first b queries see a future key
    return s


def online_softmax_update(m, l, acc, s, v_tile):
    """Fold one tile into the running state. m, l: (..., n) running max and sum of exp(s - m);
    acc: (..., n, D) running sum of exp(s - m) v; s: (..., n, b) the tile's scores; v_tile:
    (..., b, D). Returns the new m, l, acc."""
    m_new = np.maximum(m, s.max(axis=-1))                        # (..., n)
    rescale = np.exp(m - m_new)                                  # (..., n): 0 on the first tile
    p = np.exp(s - m_new[..., None])                             # (..., n, b)
    l = rescale * l + p.sum(axis=-1)                             # (..., n)
    acc = rescale[..., None] * acc + p @ v_tile                  # (..., n, D)
    return m_new, l, acc


def flash_forward(q, k, v, block_size=64):
    """-> (y, lse): y (..., T, D) the causal attention, lse (..., T) each query's log-sum-exp
    of its scores, all the backward needs besides q, k, v and y."""
    check_qkv(q, k, v, block_size)
    T = q.shape[-2]
    m = np.full(q.shape[:-1], -np.inf, q.dtype)                  # (..., T) running max
    l = np.zeros(q.shape[:-1], q.dtype)                          # (..., T) running sum
    acc = np.zeros_like(q)                                       # (..., T, D)
    for start in range(0, T, block_size):                        # keys start..stop see queries start..
        stop = min(start + block_size, T)
        s = tile_scores(q[..., start:, :], k[..., start:stop, :], start)  # (..., T - start, b)
        m[..., start:], l[..., start:], acc[..., start:, :] = online_softmax_update(
            m[..., start:], l[..., start:], acc[..., start:, :], s, v[..., start:stop, :])
    return acc / l[..., None], m + np.log(l)


def flash_attention(q, k, v, block_size=64):
    """Causal attention of q, k, v (..., T, D) -> (..., T, D), tiled over the keys in blocks of
    `block_size`; equal to `plain_attention` up to rounding."""
    return flash_forward(q, k, v, block_size)[0]


def flash_backward(dy, q, k, v, y, lse, block_size=64):
    """Gradients of the causal attention, tile by tile: -> dq, dk, dv, each (..., T, D). Each
    tile's weights p = exp(s - lse) are recomputed from the scores; with
    delta = sum(dy * y) per query, the softmax's backward is ds = p (dy v^T - delta)."""
    check_qkv(q, k, v, block_size)
    T, D = q.shape[-2:]
    scale = 1.0 / math.sqrt(D)
    delta = (dy * y).sum(axis=-1)                                # (..., T)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for start in range(0, T, block_size):
        stop = min(start + block_size, T)
        k_t, v_t = k[..., start:stop, :], v[..., start:stop, :]  # (..., b, D)
        q_s, dy_s = q[..., start:, :], dy[..., start:, :]        # (..., T - start, D)
        p = np.exp(tile_scores(q_s, k_t, start) - lse[..., start:, None])  # (..., T - start, b)
        dv[..., start:stop, :] = np.swapaxes(p, -1, -2) @ dy_s   # (..., b, D)
        ds = p * (dy_s @ np.swapaxes(v_t, -1, -2) - delta[..., start:, None])  # (..., T - start, b)
        dq[..., start:, :] += (ds @ k_t) * scale                 # (..., T - start, D)
        dk[..., start:stop, :] = (np.swapaxes(ds, -1, -2) @ q_s) * scale  # (..., b, D)
    return dq, dk, dv
