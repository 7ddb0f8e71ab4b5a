"""int8 weights for the numpy twin: per-output-channel absmax quantization, and the product that
dequantizes the weight tile by tile inside it.

Each row of W (out, in), one output channel, is stored as int8 q = round(w / s) with its own
scale s = max|w| / 127, so the row's largest weight maps to +-127 and every weight is off by at
most s / 2. One scale per row (not one for the whole matrix) keeps a row of small weights from
being rounded to zeros by a row of large ones. The stored bytes fall to a quarter.

numpy has no int8 matrix product, so `Int8Weight` turns a tile of rows back to float32 (a
buffer small enough to stay in the core's cache), multiplies by it and moves to the next tile:
memory is read in int8 once, but every weight is converted on every product, which costs more
than the bytes saved on a CPU's memory bus (chapter 10 measures it). The scale multiplies the
output columns once, after the product: x (q s)^T = (x q^T) s.
"""
from __future__ import annotations

import numpy as np

TILE_BYTES = 2**18                                           # a float32 tile of 256 KiB: fits L2


def quantize(w):
    """W (out, in) float -> (q int8 (out, in), scale float32 (out,)), q = round(w / scale),
    scale = max|row| / 127 (1 for an all-zero row, which then stays zero)."""
    w = np.asarray(w, np.float32)
    if w.ndim != 2:
        raise ValueError(f"quantize takes a (out, in) weight matrix, got shape {w.shape}")
    scale = np.abs(w).max(axis=1) / 127                      # (out,)
    scale[scale == 0] = 1
    q = np.rint(w / scale[:, None]).astype(np.int8)          # (out, in), in [-127, 127]
    return q, scale.astype(np.float32)


def dequantize(q, scale):
    """(q (out, in), scale (out,)) -> float32 W (out, in)."""
    return q.astype(np.float32) * scale[:, None]


class Int8Weight:
    """A Linear's weight in int8 with its per-row scales, and its product x W^T + b."""

    def __init__(self, weight, bias=None):
        self.q, self.scale = quantize(weight)                # (out, in) int8, (out,)
        self.bias = bias
        self.rows = max(1, TILE_BYTES // (4 * self.q.shape[1]))  # rows per float32 tile
        self.tile = np.empty((self.rows, self.q.shape[1]), np.float32)  # (rows, in)

    @property
    def nbytes(self) -> int:
        return self.q.nbytes + self.scale.nbytes + (0 if self.bias is None else self.bias.nbytes)

    def __call__(self, x):                                   # x: (..., in) -> (..., out)
        x2 = x.reshape(-1, x.shape[-1]).astype(np.float32, copy=False)  # (N, in)
        n_out = self.q.shape[0]
        y = np.empty((x2.shape[0], n_out), np.float32)       # (N, out)
        for r0 in range(0, n_out, self.rows):
            r1 = min(r0 + self.rows, n_out)
            tile = self.tile[:r1 - r0]                       # (r, in)
            np.copyto(tile, self.q[r0:r1], casting="unsafe")  # int8 -> float32, in the cache
            np.matmul(x2, tile.T, out=y[:, r0:r1])           # (N, r)
        y *= self.scale
        if self.bias is not None:
            y += self.bias
        return y.reshape(*x.shape[:-1], n_out)               # (..., out)
