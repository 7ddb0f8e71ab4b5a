"""Exercise ch6_top_k_top_p's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("top_p_one_short", "top-p drops the token that crosses p (keeps mass strictly below p)",
     (("n_keep = (before < p).sum(axis=-1, keepdims=True)",
       "n_keep = np.maximum((before + desc < p).sum(axis=-1, keepdims=True), 1)"),)),
    ("top_p_one_extra", "top-p keeps one token past the one that reaches p",
     (("n_keep = (before < p).sum(axis=-1, keepdims=True)",
       "n_keep = np.minimum((before < p).sum(axis=-1, keepdims=True) + 1, probs.shape[-1])"),)),
    ("top_k_argsort", "top-k by argsort: exactly k tokens, ties with the k-th dropped",
     (("    kth = np.sort(logits, axis=-1)[..., -k, None]          # (..., 1): the k-th largest\n"
       "    return np.where(logits >= kth, logits, -np.inf).astype(logits.dtype)",
       "    order = np.argsort(-logits, axis=-1, kind='stable')[..., :k]\n"
       "    out = np.full_like(logits, -np.inf)\n"
       "    np.put_along_axis(out, order, np.take_along_axis(logits, order, axis=-1), axis=-1)\n"
       "    return out"),)),
    ("temperature_multiplies", "logits multiplied by the temperature instead of divided",
     (("z = logits / temperature                               # (B, V)",
       "z = logits * temperature                               # (B, V)"),)),
    ("filters_before_temperature", "top-k and top-p applied to the logits before the temperature",
     (("    z = logits / temperature                               # (B, V)\n"
       "    if top_k is not None:\n        z = top_k_filter(z, top_k)\n"
       "    if top_p is not None:\n        z = top_p_filter(z, top_p)",
       "    z = logits\n    if top_k is not None:\n        z = top_k_filter(z, top_k)\n"
       "    if top_p is not None:\n        z = top_p_filter(z, top_p)\n    z = z / temperature"),)),
    ("no_argument_checks", "k < 1 and p outside (0, 1] accepted silently",
     (("    if int(k) != k or k < 1:\n        raise ValueError(f\"top-k needs an integer k >= 1, got {k!r}\")\n", ""),
      ("    if not 0 < p <= 1:\n        raise ValueError(f\"top-p needs 0 < p <= 1, got {p!r}\")\n", ""))),
]

TRIVIAL = {
    "does_nothing": '''
import numpy as np


def top_k_filter(logits, k):
    if k < 1:
        raise ValueError(k)
    return logits


def top_p_filter(logits, p):
    if not 0 < p <= 1:
        raise ValueError(p)
    return logits


def sample(logits, rng, temperature=1.0, top_k=None, top_p=None):
    return np.asarray(logits).argmax(axis=-1)
''',
    "raises": '''
def top_k_filter(logits, k):
    raise ValueError(k)


def top_p_filter(logits, p):
    raise ValueError(p)


def sample(logits, rng, temperature=1.0, top_k=None, top_p=None):
    raise ValueError(temperature)
''',
}

IMPORT_REFERENCE = '''
import numpy as np
from lib.sampling import Sampler, Sampling, filtered_probs


def _rows(logits):
    z = np.asarray(logits)
    return z.reshape(-1, z.shape[-1])


def top_k_filter(logits, k):
    kept = filtered_probs(_rows(logits), 1.0, top_k=k) > 0
    if k < 1:
        raise ValueError(k)
    return np.where(kept.reshape(np.shape(logits)), logits, -np.inf).astype(np.asarray(logits).dtype)


def top_p_filter(logits, p):
    kept = filtered_probs(_rows(logits), 1.0, top_p=p) > 0
    if not 0 < p <= 1:
        raise ValueError(p)
    return np.where(kept.reshape(np.shape(logits)), logits, -np.inf).astype(np.asarray(logits).dtype)


def sample(logits, rng, temperature=1.0, top_k=None, top_p=None):
    sampler = Sampler(logits.shape[-1], len(logits), Sampling(temperature, top_k, top_p))
    sampler.rng = rng
    return sampler(logits)
'''
