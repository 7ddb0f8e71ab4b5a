"""Exercise ch8_alibi's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("slopes_from_zero", "the slopes start at 2^0 = 1, h = 0 .. H - 1, instead of 2^(-8/H)",
     (("first = 2.0 ** (-8.0 * np.arange(1, n + 1) / n)", "first = 2.0 ** (-8.0 * np.arange(n) / n)"),)),
    ("geometric_for_any_head_count", "2^(-8h/H) for every H, not the paper's rule for non-powers of two",
     (("n = 2 ** int(np.floor(np.log2(n_head)))", "n = n_head"),)),
    ("bias_rewards_distance", "+slope * (i - j): far keys raised instead of lowered",
     (("bias = -slopes[:, None, None] * distance[None]", "bias = slopes[:, None, None] * distance[None]"),)),
    ("ignores_start", "queries counted from position 0 whatever start is (breaks decoding with a cache)",
     (("queries = np.arange(start, start + T, dtype=np.float64)", "queries = np.arange(T, dtype=np.float64)"),)),
    ("no_causal_mask", "the later keys keep -slope * (i - j), a positive bias, instead of -inf",
     (("    bias = np.where(distance[None] < 0, -np.inf, bias)       # keys after the query\n", ""),)),
    ("bias_left_float64", "the bias is not cast, so float32 asks get float64",
     (("return bias.astype(dtype)", "return bias"),)),
]

TRIVIAL = {
    "causal_mask_only": '''
import numpy as np


def alibi_slopes(n_head):
    return np.zeros(n_head)


def alibi_bias(T, start, slopes, dtype):
    mask = np.triu(np.full((T, start + T), -np.inf), k=start + 1)
    return np.broadcast_to(mask, (len(slopes), T, start + T)).astype(dtype)
''',
}

IMPORT_REFERENCE = '''
import numpy as np

from lib.numpy_twin.modern import alibi_slopes
from lib.numpy_twin.modern import alibi_bias as _bias


def alibi_bias(T, start, slopes, dtype):
    mask = np.triu(np.full((T, start + T), -np.inf), k=start + 1)
    return (_bias(T, start, slopes, np.float64) + mask).astype(dtype)
'''
