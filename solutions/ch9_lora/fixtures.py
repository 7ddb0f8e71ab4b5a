"""Exercise ch9_lora's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("alpha_not_over_rank", "the update scaled by alpha, not alpha / r",
     (("y = x2 @ weight.T + (alpha / r) * ((x2 @ A.T) @ B.T)", "y = x2 @ weight.T + alpha * ((x2 @ A.T) @ B.T)"),)),
    ("computes_in_float64", "the forward pass computed and returned in float64 for float32 inputs",
     (("x2 = x.reshape(-1, x.shape[-1])                          # (N, in)",
       "x2 = x.reshape(-1, x.shape[-1]).astype(np.float64)"),
      ("return y.reshape(*x.shape[:-1], -1).astype(x.dtype)      # (..., out)", "return y.reshape(*x.shape[:-1], -1)"))),
    ("dx_through_w_only", "dx = dy W: the gradient that flows back through the update is lost",
     (("dx = dy2 @ weight + du @ A", "dx = dy2 @ weight"),),
     "the gradient that flows back through the update (through B, then A) is missing"),
    ("merge_without_scale", "the merge adds B A without alpha / r",
     (("return (weight + (alpha / r) * (B @ A)).astype(weight.dtype)", "return (weight + B @ A).astype(weight.dtype)"),)),
    ("no_shape_checks", "shapes not checked: rank 0 divides by zero instead of raising ValueError",
     (("    if (A.ndim != 2 or B.ndim != 2 or A.shape != (r, n_in) or B.shape != (n_out, r)\n"
       "            or r < 1):\n"
       "        raise ValueError(f\"expected A (r, {n_in}) and B ({n_out}, r) with the same r \"\n"
       "                         f\">= 1 for a weight {weight.shape}; got A {A.shape} and B \"\n"
       "                         f\"{B.shape}\")\n", ""),)),
]

TRIVIAL = {
    "base_layer_only": '''
import numpy as np


def lora_forward(x, weight, bias, A, B, alpha):
    y = x @ weight.T
    return y if bias is None else y + bias


def lora_backward(dy, x, weight, A, B, alpha):
    return dy @ weight, np.zeros_like(A), np.zeros_like(B)


def lora_merge(weight, A, B, alpha):
    return weight
''',
}

IMPORT_REFERENCE = '''
import numpy as np
from lib.numpy_twin.model import Linear
from lib.numpy_twin.posttrain import LoRALinear


def _layer(weight, bias, A, B, alpha):
    base = Linear(weight.shape[1], weight.shape[0], bias=bias is not None).astype(weight.dtype)
    base.weight[...] = weight
    if bias is not None:
        base.bias[...] = bias
    layer = LoRALinear(base, A.shape[0], alpha)
    layer.lora_A, layer.lora_B = A, B
    layer.zero_grad()
    return layer


def lora_forward(x, weight, bias, A, B, alpha):
    return _layer(weight, bias, A, B, alpha).forward(x)[0]


def lora_backward(dy, x, weight, A, B, alpha):
    layer = _layer(weight, None, A, B, alpha)
    dx = layer.backward(dy, layer.forward(x)[1])
    return dx, layer.grads["lora_A"], layer.grads["lora_B"]


def lora_merge(weight, A, B, alpha):
    return _layer(weight, None, A, B, alpha).merge().weight
'''
