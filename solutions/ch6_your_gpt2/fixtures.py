"""Exercise ch6_your_gpt2's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("keeps_mask_buffers", "the published file's causal-mask buffers loaded as weights",
     (("if not name.endswith(BUFFERS):", "if not name.endswith(\".masked_bias\"):"),)),
    ("float64_weights", "the weights loaded as float64, not the float32 they are stored in",
     (("params[name] = value.astype(np.float32)", "params[name] = value.astype(np.float64)"),)),
    ("untied_head_accepted", "an lm_head.weight unlike wte.weight dropped without a word",
     (('if head is not None and not np.array_equal(head, params["wte.weight"]):', "if False:"),)),
    ("targets_not_shifted", "the loss against the inputs instead of the next tokens",
     (("loss, dlogits = parts.cross_entropy(logits, y)", "loss, dlogits = parts.cross_entropy(logits, x)"),)),
    ("gradients_kept_between_calls", "one gradient dict for every call: each call adds to the last",
     (('BUFFERS = (".attn.bias", ".attn.masked_bias")     # the causal mask, stored in the file',
       'BUFFERS = (".attn.bias", ".attn.masked_bias")     # the causal mask, stored in the file\nGRADS = {}'),
      ("    grads = zeros_like(params)\n    parts.gpt_backward",
       "    grads = GRADS.setdefault(id(params), {n: np.zeros_like(p) for n, p in params.items()})\n"
       "    parts.gpt_backward"))),
    ("no_clipping", "the gradients never clipped",
     (("norm = clip(grads, s.grad_clip)", "norm = clip(grads, 0.0)"),)),
    ("adam_steps_from_zero", "AdamW's step count from 0: the bias correction divides by 0",
     (("step + 1, lr, s.betas,", "step, lr, s.betas,"),)),
    ("mask_ignores_cache", "the mask of the new positions drawn as if they started at 0",
     (("future = np.arange(start + T)[None, :] > start + np.arange(T)[:, None]",
       "future = np.arange(start + T)[None, :] > np.arange(T)[:, None]"),)),
    ("positions_from_zero", "the new tokens' positions counted from 0, not from cache.length",
     (('x = parts.embed_forward(idx, wte, params["wpe.weight"][start:])',
       'x = parts.embed_forward(idx, wte, params["wpe.weight"])'),)),
    ("length_not_advanced", "cache.length never advanced: every chunk overwrites the first positions",
     (("    cache.length += T\n", ""),)),
    ("refeeds_whole_sequence", "the whole sequence fed to forward_cached again at every step",
     (("logits = forward_cached(idx[:, -1:], params, config, cache)",
       "logits = forward_cached(idx, params, config, cache)[:, -1:]"),)),
    ("filters_ignored", "top_k and top_p never passed to sample",
     (("new = parts.sample(logits[:, -1], rng, temperature, top_k, top_p)",
       "new = parts.sample(logits[:, -1], rng, temperature)"),)),
]

TRIVIAL = {
    "shapes_only": '''
import numpy as np


def load_gpt2(folder):
    raise ValueError("not a GPT-2 folder")


def loss_and_grads(params, config, x, y):
    return 0.0, {name: np.zeros_like(p) for name, p in params.items()}


def train(params, config, train_ids, val_ids, settings):
    return {"step": [], "train_loss": [], "lr": [], "grad_norm": [], "eval_step": [],
            "eval_train_loss": [], "val_loss": []}


def forward_cached(idx, params, config, cache):
    cache.length += idx.shape[1]
    if cache.length > config.n_ctx:
        raise ValueError("past the context")
    return np.zeros(idx.shape + (config.vocab_size,), params["wte.weight"].dtype)


def generate(params, config, idx, max_new_tokens, rng, temperature=0.0, top_k=None, top_p=None,
             use_cache=True):
    if idx.shape[1] + max_new_tokens > config.n_ctx:
        raise ValueError("past the context")
    return np.concatenate([idx, np.zeros((len(idx), max_new_tokens), idx.dtype)], axis=1)
''',
}

IMPORT_REFERENCE = '''
import numpy as np
from lib.numpy_twin import GPT, KVCache
from lib.numpy_twin.train import cross_entropy
from lib.weights import _HF_CONV1D, load_hf_gpt2, to_hf_state


def load_gpt2(folder):
    config, state = load_hf_gpt2(folder)
    return config, {n.removeprefix("transformer."): a for n, a in to_hf_state(config, state).items()}


def _model(params, config):
    model = GPT(config, dtype=params["wte.weight"].dtype)
    model.load_state_dict({n: (p.T if n.endswith(_HF_CONV1D) else p).copy() for n, p in params.items()})
    return model


def loss_and_grads(params, config, x, y):
    model = _model(params, config)
    model.zero_grad()
    loss, dlogits = cross_entropy(model.forward(x), y)
    model.backward(dlogits)
    return loss, {n.removeprefix("transformer."): g for n, g in to_hf_state(config, dict(model.named_grads())).items()}


def forward_cached(idx, params, config, cache):
    return _model(params, config).forward(idx)[:, -idx.shape[1]:]


def generate(params, config, idx, max_new_tokens, rng, temperature=0.0, top_k=None, top_p=None, use_cache=True):
    return _model(params, config).generate(idx, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p)
'''
