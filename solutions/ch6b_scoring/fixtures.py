"""Exercise ch6b_scoring's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("naive_softmax", "the log-softmax without subtracting the row's largest logit: inf - inf once exp overflows",
     (("    rows = rows - rows.max(axis=-1, keepdims=True)     # (n, V), each max 0: no overflow\n", ""),)),
    ("row_t_scores_token_t", "token t scored by row t of the logits, not row t - 1 (the shapes still agree)",
     (("rows = logits[start - 1:T - 1].astype(np.float64)", "rows = logits[start:T].astype(np.float64)"),)),
    ("float32_log_probs", "the log-probabilities left in the logits' float32",
     (("rows = logits[start - 1:T - 1].astype(np.float64)", "rows = logits[start - 1:T - 1]"),)),
    ("no_start_check", "start = 0 accepted: row -1 (the last) would score token 0",
     (("    if not 1 <= start < T:\n"
       "        raise ValueError(f\"start = {start}: expected 1 <= start < T = {T} \"\n"
       "                         f\"(token 0 has nothing before it)\")\n", ""),)),
    ("scores_the_context", "the context's tokens scored too, from the second token on",
     (("logp = continuation_logprobs(logits, ids, len(context))", "logp = continuation_logprobs(logits, ids, 1)"),)),
    ("per_token_over_everything", "the per-token score divided by every token read, context included",
     (("return total, total / len(choice)", "return total, total / len(ids)"),)),
    ("no_crop", "a context too long for the window passed whole to the model, which refuses it",
     (("    context = context[-(n_ctx - len(choice)):]    # the last tokens that fit\n", ""),)),
    ("pick_lowest", "the lowest log-probabilities picked, as if they were losses",
     (("return int(np.argmax(scores[:, 0])), int(np.argmax(scores[:, 1]))",
       "return int(np.argmin(scores[:, 0])), int(np.argmin(scores[:, 1]))"),)),
]

TRIVIAL = {
    "uniform": '''
import numpy as np


def continuation_logprobs(logits, ids, start):
    if not 1 <= start < len(ids) or len(logits) != len(ids):
        raise ValueError(start)
    return np.full(len(ids) - start, -np.log(np.shape(logits)[-1]))


def score_choice(model, context, choice):
    if len(context) == 0 or not 1 <= len(choice) < model.config.n_ctx:
        raise ValueError(len(choice))
    per_token = -float(np.log(model.config.vocab_size))
    return per_token * len(choice), per_token


def pick(scores):
    if len(scores) == 0:
        raise ValueError("no scores")
    return 0, 0
''',
}

IMPORT_REFERENCE = '''
import numpy as np
from lib.evaluate import score_choices


def score_choice(model, context, choice):
    scores = score_choices(model, np.asarray(context, np.int64), [np.asarray(choice, np.int64)])
    return float(scores.sum[0]), float(scores.mean[0])
'''

LIB_ROUTE = '''
import numpy as np
from lib.numpy_twin.posttrain import response_logp


def score_choice(model, context, choice):
    # chapter 9's DPO scorer: lib's sum of log p over a masked response, on one pair
    ids = np.concatenate([np.asarray(context, np.int64), np.asarray(choice, np.int64)])
    x, y = ids[None, :-1], ids[None, 1:]                     # (1, T - 1) each
    mask = np.zeros_like(y)
    mask[0, len(context) - 1:] = 1                           # the choice's tokens
    total = float(response_logp(model, x, y, mask)[0][0])
    return total, total / len(choice)
'''
