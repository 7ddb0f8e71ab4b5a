"""Exercise ch6_kv_cache's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("no_reuse", "a correct cache, but every step reruns the whole sequence (no speed-up)",
     (("        logits = model.forward(new, kv_cache=cache)\n"
       "        new = logits[:, -1].argmax(axis=-1)[:, None]       # (B, 1)",
       "        logits = model.forward(np.concatenate(out, axis=1))\n"
       "        new = logits[:, -1].argmax(axis=-1)[:, None]       # (B, 1)"),)),
    ("feeds_the_last_token", "the last new token fed to the model too: one forward pass for nothing",
     (("    return np.concatenate(out, axis=1)                     # (B, T + max_new_tokens)",
       "    if max_new_tokens:\n        model.forward(new, kv_cache=cache)\n"
       "    return np.concatenate(out, axis=1)                     # (B, T + max_new_tokens)"),)),
    ("writes_at_start", "update stores the new keys at position 0 instead of after `length`",
     (("        self.k[layer][:, :, self.length:end] = k\n        self.v[layer][:, :, self.length:end] = v",
       "        self.k[layer][:, :, :k.shape[2]] = k\n        self.v[layer][:, :, :k.shape[2]] = v"),)),
    ("length_twice", "update advances `length` too, so the model's own += T counts twice",
     (("        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]",
       "        if layer == len(self.k) - 1:\n            self.length = end\n"
       "        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]"),)),
    ("always_float32", "the cache ignores the dtype it is given",
     (("self.k = [np.zeros(shape, dtype) for _ in range(config.n_layer)]",
       "self.k = [np.zeros(shape, np.float32) for _ in range(config.n_layer)]"),
      ("self.v = [np.zeros(shape, dtype) for _ in range(config.n_layer)]",
       "self.v = [np.zeros(shape, np.float32) for _ in range(config.n_layer)]"))),
    ("returns_only_new", "update returns only the new keys and values, so attention sees one position",
     (("        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]",
       "        return self.k[layer][:, :, self.length:end], self.v[layer][:, :, self.length:end]"),)),
]

TRIVIAL = {
    "returns_its_input": '''
class KVCache:
    def __init__(self, config, batch, dtype=None):
        self.length = 0

    def update(self, layer, k, v):
        return k, v


def generate_cached(model, idx, max_new_tokens):
    return idx
''',
}

IMPORT_REFERENCE = '''
from lib.numpy_twin import KVCache


def generate_cached(model, idx, max_new_tokens):
    return model.generate(idx, max_new_tokens, temperature=0)
'''
