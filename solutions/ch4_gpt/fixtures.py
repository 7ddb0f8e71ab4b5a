"""Exercise ch4_gpt's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("ln_eps_outside_sqrt", "LayerNorm's eps added to the standard deviation instead of the variance",
     (("rstd = 1.0 / np.sqrt(variance + eps)", "rstd = 1.0 / (np.sqrt(variance) + eps)"),)),
    ("softmax_backward_elementwise", "the softmax's gradient taken entry by entry, p * dp: the row's sum term forgotten",
     (("dscores = p * (dp - (dp * p).sum(axis=-1, keepdims=True))", "dscores = p * dp"),),
     "a row's weights sum to 1"),
    ("no_mask_in_backward", "the forward that attention_backward recomputes left without the causal mask",
     (("    scores[..., future] = -np.inf                                       # weight 0\n", ""),),
     "the causal mask is missing from the forward that your backward recomputes"),
    ("no_scale_in_backward", "the scores' 1/sqrt(D) forgotten on the way back to q and k",
     (("dq = scale * (dscores @ k)", "dq = dscores @ k"),
      ("dk = scale * (dscores.swapaxes(-1, -2) @ q)", "dk = dscores.swapaxes(-1, -2) @ q"))),
    ("no_skip_path", "the block's second skip path forgotten: only the MLP branch's gradient reaches h",
     (("dh = dout + norm_backward(dm, ln_2_cache", "dh = norm_backward(dm, ln_2_cache"),),
     "a skip path is missing"),
    ("mlp_grad_written_in_place", "the MLP's output weight gradient written into the array ([...] =), not added: a second pass overwrites the first",
     (('grad["mlp.c_proj.weight"] += rows(g).T @ rows(dout)', 'grad["mlp.c_proj.weight"][...] = rows(g).T @ rows(dout)'),)),
    ("no_final_layernorm", "ln_f left out of the forward pass: the head reads the last block's output",
     (('hidden, ln_f_cache = layernorm_forward(x, params["ln_f.weight"],\n                                           params["ln_f.bias"])',
       'hidden, ln_f_cache = x, layernorm_forward(x, params["ln_f.weight"], params["ln_f.bias"])[1]'),)),
    ("assigns_ln_f_grads", "ln_f's gradients assigned (=), not added (+=): accumulation loses the earlier passes",
     (('grads["ln_f.weight"] += dweight\n    grads["ln_f.bias"] += dbias',
       'grads["ln_f.weight"] = dweight\n    grads["ln_f.bias"] = dbias'),)),
]

TRIVIAL = {
    "passes_through": '''
import numpy as np


def layernorm_forward(x, weight, bias, eps=1e-5):
    return x, (x, np.ones(x.shape[:-1] + (1,), x.dtype))


def attention_backward(dy, x, c_attn_weight, c_attn_bias, c_proj_weight, c_proj_bias, n_head):
    return dy, *(np.zeros_like(w) for w in (c_attn_weight, c_attn_bias, c_proj_weight, c_proj_bias))


def block_forward(x, params, layer, n_head, parts):
    return x, None


def block_backward(dout, cache, params, layer, n_head, grads, parts):
    return dout


def gpt_forward(idx, params, config, parts):
    return np.zeros((*idx.shape, len(params["wte.weight"]))), None


def gpt_backward(dlogits, cache, params, config, grads, parts):
    pass
''',
}

IMPORT_REFERENCE = '''
import numpy as np
from lib.config import GPTConfig
from lib.numpy_twin import GPT, CausalSelfAttention, LayerNorm
from lib.weights import _HF_CONV1D, to_hf_state


def _model(params, n_head):
    V, C = params["wte.weight"].shape
    config = GPTConfig(vocab_size=V, n_ctx=len(params["wpe.weight"]), n_head=n_head, n_embd=C,
                       n_layer=sum(name.endswith("ln_1.weight") for name in params))
    model = GPT(config, dtype=np.float64)
    model.load_state_dict({n: (p.T if n.endswith(_HF_CONV1D) else p).copy() for n, p in params.items()})
    model.zero_grad()
    return model


def _add_grads(model, grads):
    for name, g in to_hf_state(model.config, model.grads).items():
        grads[name.removeprefix("transformer.")] += g


def layernorm_forward(x, weight, bias, eps=1e-5):
    ln = LayerNorm(len(weight), eps).astype(x.dtype)
    ln.weight[...], ln.bias[...] = weight, bias
    return ln.forward(x)


def attention_backward(dy, x, c_attn_weight, c_attn_bias, c_proj_weight, c_proj_bias, n_head):
    C = x.shape[-1]
    layer = CausalSelfAttention(GPTConfig(vocab_size=2, n_ctx=64, n_layer=1, n_head=n_head, n_embd=C))
    layer.astype(x.dtype)
    layer.c_attn.weight, layer.c_attn.bias = c_attn_weight.T.copy(), c_attn_bias.copy()
    layer.c_proj.weight, layer.c_proj.bias = c_proj_weight.T.copy(), c_proj_bias.copy()
    layer.zero_grad()
    dx = layer.backward(dy, layer.forward(x)[1])
    g = layer.c_attn.grads, layer.c_proj.grads
    return dx, g[0]["weight"].T, g[0]["bias"], g[1]["weight"].T, g[1]["bias"]


def block_forward(x, params, layer, n_head, parts):
    model = _model(params, n_head)
    out, cache = model.h[layer].forward(x)
    return out, (model, cache)


def block_backward(dout, cache, params, layer, n_head, grads, parts):
    model, block_cache = cache
    model.zero_grad()
    dx = model.h[layer].backward(dout, block_cache)
    _add_grads(model, grads)
    return dx


def gpt_forward(idx, params, config, parts):
    model = _model(params, config.n_head)
    return model.forward(idx), model


def gpt_backward(dlogits, model, params, config, grads, parts):
    model.zero_grad()
    model.backward(dlogits)
    _add_grads(model, grads)
'''
