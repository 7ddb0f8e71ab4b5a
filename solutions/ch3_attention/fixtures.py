"""Exercise ch3_attention's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("naive_softmax", "the softmax without subtracting the maximum: NaN once exp overflows",
     (("e = np.exp(scores - scores.max(axis=-1, keepdims=True))", "e = np.exp(scores)"),)),
    ("scale_by_sqrt_C", "scores divided by sqrt(C) instead of sqrt(D), the head's width",
     (("/ math.sqrt(C // n_head) + mask", "/ math.sqrt(C) + mask"),)),
    ("no_scale", "the scores q k^T not divided by sqrt(D)",
     (("/ math.sqrt(C // n_head) + mask", "+ mask"),)),
    ("softmax_over_queries", "the softmax normalised over the queries (axis -2), not the keys",
     (("e = np.exp(scores - scores.max(axis=-1, keepdims=True))",
       "e = np.exp(scores - scores.max(axis=-2, keepdims=True))"),
      ("return e / e.sum(axis=-1, keepdims=True)", "return e / e.sum(axis=-2, keepdims=True)")),
     "the softmax normalises over the wrong axis"),
    ("mask_one_off", "the mask lets each position see the next one too",
     (("mask = np.triu(np.full((T, T), -np.inf, x.dtype), k=1)", "mask = np.triu(np.full((T, T), -np.inf, x.dtype), k=2)"),)),
    ("heads_by_bare_reshape", "q, k, v cut into heads by a bare reshape to (B, H, T, D)",
     (("return a.reshape(B, T, n_head, C // n_head).transpose(0, 2, 1, 3)", "return a.reshape(B, n_head, T, C // n_head)"),)),
    ("merge_by_bare_reshape", "the heads merged by a bare reshape to (B, T, C)",
     (("return y.transpose(0, 2, 1, 3).reshape(B, T, H * D)", "return y.reshape(B, T, H * D)"),)),
    ("q_and_k_swapped", "the first C outputs of c_attn taken as the keys, the next C as the queries",
     (("q, k, v = (to_heads(a, n_head)", "k, q, v = (to_heads(a, n_head)"),)),
    ("mask_float64", "the mask built in float64, so float32 inputs give float64 answers",
     (("mask = np.triu(np.full((T, T), -np.inf, x.dtype), k=1)", "mask = np.triu(np.full((T, T), -np.inf), k=1)"),)),
    ("no_argument_checks", "no ValueError for an n_head that does not divide C or a wrong shape",
     (("    check_shapes(x, c_attn_weight, c_attn_bias, c_proj_weight, c_proj_bias, n_head)\n", ""),)),
]

TRIVIAL = {
    "no_attention": '''
import numpy as np


def causal_self_attention(x, c_attn_weight, c_attn_bias, c_proj_weight, c_proj_bias, n_head):
    C = x.shape[-1]
    if C % n_head or c_attn_weight.shape != (C, 3 * C):
        raise ValueError(n_head)
    v = (x @ c_attn_weight + c_attn_bias)[..., 2 * C:]        # every position attends to itself only
    return v @ c_proj_weight + c_proj_bias
''',
    "zeros": '''
import numpy as np


def causal_self_attention(x, c_attn_weight, c_attn_bias, c_proj_weight, c_proj_bias, n_head):
    if x.shape[-1] % n_head or c_attn_weight.shape != (x.shape[-1], 3 * x.shape[-1]):
        raise ValueError(n_head)
    return np.zeros_like(x)
''',
}

IMPORT_REFERENCE = '''
from lib.config import GPTConfig
from lib.numpy_twin import CausalSelfAttention


def causal_self_attention(x, c_attn_weight, c_attn_bias, c_proj_weight, c_proj_bias, n_head):
    layer = CausalSelfAttention(GPTConfig.small(n_embd=x.shape[-1], n_head=n_head)).astype(x.dtype)
    layer.c_attn.weight, layer.c_attn.bias = c_attn_weight.T.copy(), c_attn_bias
    layer.c_proj.weight, layer.c_proj.bias = c_proj_weight.T.copy(), c_proj_bias
    return layer.forward(x)[0]
'''

LIB_ROUTE = '''
import numpy as np
from lib.numpy_twin.flash import flash_attention


def causal_self_attention(x, w_attn, b_attn, w_proj, b_proj, n_head):
    """The heads cut and merged by hand, the attention itself lib's (chapter 10's tiled one)."""
    B, T, C = x.shape
    q, k, v = np.split(x @ w_attn + b_attn, 3, axis=-1)
    heads = [t.reshape(B, T, n_head, C // n_head).transpose(0, 2, 1, 3) for t in (q, k, v)]
    y = flash_attention(*heads).transpose(0, 2, 1, 3).reshape(B, T, C)
    return y @ w_proj + b_proj
'''
