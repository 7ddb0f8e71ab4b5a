"""The torch twin's CPU decode layout: while the torch twin decodes on a CPU with its KV cache,
every Linear layer and the tied head multiply through W^T cut into blocks of its inputs, one
block per thread.

Why: decoding reads every weight once per token and does little else, so its speed is the speed
of reading the weights. torch's CPU product of one row by W (MKL's, in the CPU build) runs on one
thread, and one thread reads memory at a fraction of the machine's bandwidth. Cut W^T into k
blocks of rows (k = torch's thread count): the k partial products run as one batched product
(`torch.bmm`), which torch spreads over its threads, and their sum is the product. numpy's BLAS
already shares a one-row product between threads, so the numpy twin needs none of this.
`python -m lib.bench decode` measures whole generations.

The blocks are a second copy of the weights, built on first use and kept for the model until any
weight changes (an optimizer step, a load, a move), which the tensors' storage and version
counters reveal. Only `generate.py` enters the layout; the model itself stays the plain one.
"""
from __future__ import annotations

import contextlib
import functools
import weakref

import torch
import torch.nn.functional as F

from .model import Linear, replace_head


def split_inputs(w, k):
    """W (out, in) -> W^T cut along the inputs into k blocks, (k, m, out) with m = ceil(in / k),
    the last padded with zero rows: the layout `split_matmul` reads."""
    n_out, n_in = w.shape
    m = -(-n_in // k)
    w_t = F.pad(w, (0, k * m - n_in)).T                      # (k m, out)
    return w_t.reshape(k, m, n_out).contiguous()             # (k, m, out)


def split_matmul(x, w_split, bias=None):
    """x W^T + b with W^T given in k blocks of inputs (see split_inputs): block j multiplies the
    j-th slice of x's features, the k products run as one bmm, and their sum is the product.
    x: (..., in) -> (..., out); bias None adds nothing."""
    k, m, n_out = w_split.shape
    rows = F.pad(x, (0, k * m - x.shape[-1])).reshape(-1, k, m).transpose(0, 1)  # (k, N, m)
    y = torch.bmm(rows, w_split).sum(dim=0).reshape(*x.shape[:-1], n_out)       # (k, N, out) -> (..., out)
    return y if bias is None else y + bias


_BLOCKS = weakref.WeakKeyDictionary()                        # model -> ((threads, weights' storage and versions), blocks)


def weight_blocks(model):
    """W^T in blocks of inputs, one block per torch thread, for each of the model's Linear layers
    (in `model.modules()` order) and last for the tied head (wte). Cached for the model; rebuilt
    when the thread count or any weight changes."""
    k = torch.get_num_threads()
    key = (k, tuple((p.data_ptr(), p._version) for p in model.parameters()))
    known = _BLOCKS.get(model)
    if known is None or known[0] != key:
        weights = [m.weight for m in model.modules() if isinstance(m, Linear)] + [model.wte.weight]
        with torch.no_grad():
            known = _BLOCKS[model] = (key, [split_inputs(w, k) for w in weights])
    return known[1]


@contextlib.contextmanager
def cpu_decode_layout(model):
    """Within this block the model's Linear layers and its tied head multiply through
    `weight_blocks`: each Linear's `forward` is replaced on the instance by `split_matmul` with
    its blocks and bias, and the head through model.py's `replace_head`. Leaving the block
    restores both. Inside another layout (its head already replaced, e.g. `quant.int8_layout`)
    it changes nothing: that layout's products stay."""
    if "lm_head" in vars(model):
        yield
        return
    linears = [m for m in model.modules() if isinstance(m, Linear)]
    *blocks, head_blocks = weight_blocks(model)
    for layer, w_split in zip(linears, blocks):
        layer.forward = functools.partial(split_matmul, w_split=w_split, bias=layer.bias)
    try:
        with replace_head(model, functools.partial(split_matmul, w_split=head_blocks)):
            yield
    finally:
        for layer in linears:
            del layer.forward
