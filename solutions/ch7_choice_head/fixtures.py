"""Exercise ch7_choice_head's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("reads_last_position", "every choice read at the last position, not at its own [extract]",
     (("states = hidden[rows, seqs, extract]", "states = hidden[:, :, -1]"),
      ("dhidden[rows, seqs, extract] = dscores[..., None] * weight[0]",
       "dhidden[:, :, -1] = dscores[..., None] * weight[0]"))),
    ("no_max_subtraction", "log-softmax without subtracting the largest score: overflow on large scores",
     (("shifted = scores - scores.max(axis=1, keepdims=True)", "shifted = scores"),)),
    ("softmax_over_the_batch", "the softmax taken over the batch's examples instead of the choices",
     (("shifted = scores - scores.max(axis=1, keepdims=True)", "shifted = scores - scores.max(axis=0, keepdims=True)"),
      ("log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))",
       "log_p = shifted - np.log(np.exp(shifted).sum(axis=0, keepdims=True))"))),
    ("gradient_not_averaged", "the loss is a mean over the batch, its gradient a sum",
     (("    dscores /= B\n", ""),)),
    ("no_label_checks", "labels are not checked: a label of -1 silently picks the last choice",
     (("    if labels.shape != (B,) or labels.min() < 0 or labels.max() >= S:\n"
       "        raise ValueError(f\"labels must be {B} choice indices in [0, {S}), \"\n"
       "                         f\"got {labels!r}\")\n", ""),)),
]

TRIVIAL = {
    "zeros": '''
import numpy as np


def choice_head(hidden, extract, weight, bias, labels):
    B, S, T, C = hidden.shape
    if np.shape(extract) != (B, S) or np.max(extract) >= T or np.max(labels) >= S or np.min(labels) < 0 \\
            or weight.shape != (1, C):
        raise ValueError(labels)
    return {"scores": np.zeros((B, S)), "loss": 0.0, "dhidden": np.zeros_like(hidden),
            "dweight": np.zeros_like(weight), "dbias": np.zeros_like(bias)}
''',
}

IMPORT_REFERENCE = '''
import numpy as np
from lib.numpy_twin.finetune import ClassifierHead
from lib.numpy_twin.gpt1_formats import choice_scores, choice_scores_backward, extract_states
from lib.numpy_twin.gpt1_formats import extract_states_backward
from lib.numpy_twin.train import cross_entropy


def choice_head(hidden, extract, weight, bias, labels):
    B, S, T, C = hidden.shape
    head = ClassifierHead(C, 1).astype(np.float64)
    head.weight[...], head.bias[...] = weight, bias
    states = extract_states(hidden, extract)
    scores, cache = choice_scores(head, states)
    loss, dscores = cross_entropy(scores[:, None], np.asarray(labels)[:, None])
    dstates = choice_scores_backward(head, dscores[:, 0], cache, S)
    return {"scores": scores, "loss": loss, "dhidden": extract_states_backward(dstates, extract, T),
            "dweight": head.grads["weight"], "dbias": head.grads["bias"]}
'''
