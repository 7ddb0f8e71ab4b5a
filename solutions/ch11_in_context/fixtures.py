"""Exercise ch11_in_context's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("same_token", "the key of the earlier copy of the same token, i - period, not the one after it",
     (("weights = attn[..., queries, queries - period + 1]", "weights = attn[..., queries, queries - period]"),),
     "the key is one past"),
    ("every_query", "averaged over all T queries, not only the repeat's",
     (("queries = np.arange(period, T)", "queries = np.arange(T)"),),
     "divided by all T queries"),
    ("first_sequence", "a batch's first sequence only, not the mean over the batch",
     (("return per_head.reshape(-1, *attn.shape[-4:-2]).mean(axis=0)",
       "return per_head.reshape(-1, *attn.shape[-4:-2])[0]"),)),
    ("early_minus_late", "the early loss minus the late one: the sign flipped",
     (("return float(loss[:, late - 1].mean() - loss[:, early - 1].mean())",
       "return float(loss[:, early - 1].mean() - loss[:, late - 1].mean())"),),
     "early loss minus the late one"),
    ("counted_from_0", "the positions taken as column indices (counted from 0)",
     (("return float(loss[:, late - 1].mean() - loss[:, early - 1].mean())",
       "return float(loss[:, late].mean() - loss[:, early].mean())"),),
     "counted from 1"),
    ("no_period_check", "a period outside 1..T - 1 accepted",
     (("    if not (isinstance(period, (int, np.integer)) and 1 <= period < T):\n"
       "        raise ValueError(f\"period must be an integer from 1 to {T - 1}, got {period!r}\")\n", ""),)),
]

TRIVIAL = {
    "zeros": '''
import numpy as np


def prefix_matching_score(attn, period):
    attn = np.asarray(attn)
    return np.zeros(attn.shape[-4:-2])


def in_context_score(per_position_loss, early, late):
    return 0.0
''',
}

IMPORT_REFERENCE = '''
from lib.scaling.in_context import in_context_score, prefix_matching_score
'''
