"""int8 weights for the torch twin: every matrix product's weight quantized per output channel
(absmax, as in the numpy twin's quant.py) and multiplied by a real int8 kernel.

What this CPU build of torch offers for an int8 product, and why this one:
- `torch.ops.quantized.linear_dynamic` (fbgemm, what `quantize_dynamic` puts in a Linear): int8
  weights packed once, each call quantizes its input to 8 bits (one scale per call) and
  multiplies in integers with int32 sums, then scales back to float32. Chosen: on an AVX2 CPU
  it is the one int8 path faster than torch's float32 product at batch 1 to 64.
- `torch.ops.aten._weight_int8pack_mm` (int8 weights, float activations) and `torch._int_mm`
  (int8 by int8) exist on the CPU too, but ran several times slower than float32 here.
- torch's quantized tensors are deprecated in favour of the torchao package, which the course
  does not install; building the packed weights raises that warning, which is silenced here.
Because the input is quantized too, the error is that of int8 weights plus 8-bit activations;
tests/test_quant.py bounds the logits' error and the perplexity's change.

`int8_layout(model)` is a context, like `cpu_decode.py`'s layout: within it each Linear and the
tied head multiply through the packed int8 weights (built on entry); leaving it restores the
float32 products. The model itself stays the plain one.
"""
from __future__ import annotations

import contextlib
import functools
import warnings

import torch

from .model import Linear, replace_head


def quantize(w):
    """W (out, in) -> (q int8 (out, in), scale float32 (out,)): q = round(w / scale), scale =
    max|row| / 127 (1 for an all-zero row), the numpy twin's rule."""
    w = w.detach().float()
    scale = w.abs().amax(dim=1) / 127                        # (out,)
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    return torch.round(w / scale[:, None]).to(torch.int8), scale


def pack(w, bias=None):
    """W (out, in) float -> fbgemm's packed int8 weight, per output channel."""
    q, scale = quantize(w)
    with warnings.catch_warnings():                          # quantized tensors: deprecated, still the kernel
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*")
        qw = torch._make_per_channel_quantized_tensor(q, scale.double(), torch.zeros_like(scale, dtype=torch.long), 0)
    return torch.ops.quantized.linear_prepack(qw, None if bias is None else bias.detach().float())


def int8_matmul(x, packed):
    """x (..., in) float32 -> (..., out): x W^T + b through the packed int8 weight. reduce_range
    keeps the input to 7 bits, which AVX2's 16-bit intermediate sums need to never saturate."""
    return torch.ops.quantized.linear_dynamic(x.float(), packed, True)


def weight_bytes(model) -> int:
    """Bytes of the int8 weights with their float32 scales and biases, for every Linear and the head."""
    weights = [m.weight for m in model.modules() if isinstance(m, Linear)] + [model.wte.weight]
    biases = [m.bias for m in model.modules() if isinstance(m, Linear) and m.bias is not None]
    return sum(w.numel() + 4 * w.shape[0] for w in weights) + sum(4 * b.numel() for b in biases)


def pack_model(model) -> list:
    """The packed int8 weights of every Linear (in `model.modules()` order) and last the head."""
    linears = [m for m in model.modules() if isinstance(m, Linear)]
    return [pack(m.weight, m.bias) for m in linears] + [pack(model.wte.weight)]


@contextlib.contextmanager
def int8_layout(model, packed=None):
    """Within this block every Linear of the model and its tied head multiply through int8
    weights (`pack_model`'s, built on entry from the weights as they are then, or `packed`, built
    earlier, which a benchmark reuses); leaving it restores both."""
    linears = [m for m in model.modules() if isinstance(m, Linear)]
    *blocks, head = pack_model(model) if packed is None else packed
    for layer, w in zip(linears, blocks):
        layer.forward = functools.partial(int8_matmul, packed=w)
    try:
        with replace_head(model, functools.partial(int8_matmul, packed=head)):
            yield
    finally:
        for layer in linears:
            del layer.forward
