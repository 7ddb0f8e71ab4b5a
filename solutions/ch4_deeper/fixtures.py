"""Exercise ch4_deeper's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("no_qkv_biases", "the fused q, k, v projection counted without its bias",
     (("(C * 3 * C + 3 * C) + (C * C + C)", "(C * 3 * C) + (C * C + C)"),)),
    ("untied_head", "the output head counted as a matrix of its own",
     (("embeddings = config.vocab_size * C + config.n_ctx * C",
       "embeddings = 2 * config.vocab_size * C + config.n_ctx * C"),)),
    ("no_final_layernorm", "ln_f forgotten",
     (("return embeddings + config.n_layer * block + layer_norm", "return embeddings + config.n_layer * block"),)),
    ("mlp_without_biases", "the MLP's two biases forgotten",
     (("mlp = (C * 4 * C + 4 * C) + (4 * C * C + C)", "mlp = (C * 4 * C) + (4 * C * C)"),)),
    ("heads_times_qkv", "q, k and v counted as C x C matrices per head",
     (("attention = (C * 3 * C + 3 * C) + (C * C + C)",
       "attention = config.n_head * (3 * C * C + 3 * C) + (C * C + C)"),)),
]

TRIVIAL = {
    "constant": "def count_params(config):\n    return 124_439_808\n",
    "raises": "def count_params(config):\n    raise ValueError(config)\n",
}

IMPORT_REFERENCE = '''
from lib.config import param_counts


def count_params(config):
    return param_counts(config)["total"]
'''

LIB_ROUTE = '''
import numpy as np
from lib.numpy_twin import model


class _Free:
    """numpy, but zeros and ones give zero-stride arrays: a GPT-2-sized layer costs no memory."""
    def __getattr__(self, name):
        return getattr(np, name)

    def zeros(self, shape, dtype=float):
        return np.broadcast_to(np.zeros((), dtype), shape)

    def ones(self, shape, dtype=float):
        return np.broadcast_to(np.ones((), dtype), shape)


def count_params(config):
    """lib's own layers (not its counting functions), their parameters summed."""
    model.np = _Free()
    try:
        layers = [model.Embedding(config.vocab_size, config.n_embd), model.Embedding(config.n_ctx, config.n_embd),
                  model.LayerNorm(config.n_embd), *(model.Block(config) for _ in range(config.n_layer))]
        return sum(p.size for layer in layers for _, p in layer.named_parameters())
    finally:
        model.np = np
'''
