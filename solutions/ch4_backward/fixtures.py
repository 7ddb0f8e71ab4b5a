"""Exercise ch4_backward's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("ln_no_mean_term", "LayerNorm's dx without removing the mean of g (the mean's own gradient)",
     (("dx = rstd * (g - g_mean - xhat * g_along_xhat)", "dx = rstd * (g - xhat * g_along_xhat)"),)),
    ("ln_no_xhat_term", "LayerNorm's dx without the component along xhat (the variance's gradient)",
     (("dx = rstd * (g - g_mean - xhat * g_along_xhat)", "dx = rstd * (g - g_mean)"),)),
    ("ln_gain_forgotten", "the gain gamma left out of the gradient reaching xhat",
     (("g = dy * weight ", "g = dy * 1.0 "),)),
    ("no_skip_path", "the residual's skip path forgotten: only the branch's gradient reaches h",
     (("dh = dy + _norm_backward(block.ln_2, dmlp_in, ln_2_cache)", "dh = _norm_backward(block.ln_2, dmlp_in, ln_2_cache)"),),
     "a skip path is missing"),
    ("attn_gets_output_gradient", "attention's backward given the block output's gradient instead of h's",
     (("dattn_in = block.attn.backward(dh, attn_cache)", "dattn_in = block.attn.backward(dy, attn_cache)"),)),
    ("dweight_without_xhat", "the gain's gradient summed from dy alone, as the bias's is",
     (("dweight = (dy * xhat).reshape(-1, C).sum(axis=0)", "dweight = dy.reshape(-1, C).sum(axis=0)"),)),
    ("ln_bias_grad_forgotten", "block_backward adds the LayerNorms' weight gradients, not their bias gradients",
     (("    norm.grads[\"bias\"] += dbias\n", ""),)),
    ("assigns_grads", "the LayerNorms' gradients assigned (=), not added (+=): accumulation loses the earlier passes",
     (("    norm.grads[\"weight\"] += dweight\n    norm.grads[\"bias\"] += dbias\n",
       "    norm.grads[\"weight\"] = dweight\n    norm.grads[\"bias\"] = dbias\n"),)),
]

TRIVIAL = {
    "passes_dy_through": '''
import numpy as np


def layernorm_backward(dy, cache, weight):
    return dy, np.zeros_like(weight), np.zeros_like(weight)


def block_backward(dy, cache, block):
    return dy
''',
}

IMPORT_REFERENCE = '''
import numpy as np
from lib.numpy_twin import LayerNorm


def layernorm_backward(dy, cache, weight):
    ln = LayerNorm(len(weight)).astype(np.asarray(weight).dtype)
    ln.weight[...] = weight
    ln.zero_grad()
    dx = ln.backward(dy, cache)
    return dx, ln.grads["weight"], ln.grads["bias"]


def block_backward(dy, cache, block):
    return block.backward(dy, cache)
'''
