"""Exercise ch7_finetune_loss's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("lm_no_shift", "L1 compares each position's logits with its own token, not the next one",
     (("x[:, 1:].reshape(-1)", "x[:, :-1].reshape(-1)"),)),
    ("head_reads_first_position", "the head reads the first position instead of the classify token's",
     (("last = hidden[:, -1]", "last = hidden[:, 0]"), ("dhidden[:, -1] = dscores @ weight", "dhidden[:, 0] = dscores @ weight"))),
    ("lm_weight_not_in_gradient", "the loss weighs L1 by lm_weight, its gradient does not",
     (("dlogits[:, :-1] = lm_weight * dlm.reshape(B, T - 1, V)", "dlogits[:, :-1] = dlm.reshape(B, T - 1, V)"),)),
    ("no_max_subtraction", "log-softmax without subtracting the row maximum: overflow on large logits",
     (("shifted = z - z.max(axis=-1, keepdims=True)", "shifted = z"),)),
    ("head_gradient_everywhere", "the head's gradient sent to every position, not only the last one",
     (("dhidden[:, -1] = dscores @ weight", "dhidden[:] = (dscores @ weight)[:, None]"),)),
    ("no_label_checks", "labels are not checked: a label of -1 silently picks the last class",
     (("    if labels.shape != (B,) or labels.min() < 0 or labels.max() >= K:\n"
       "        raise ValueError(f\"labels must be {B} class indices in [0, {K}), got \"\n"
       "                         f\"{labels!r}\")\n", ""),)),
]

TRIVIAL = {
    "zeros": '''
import numpy as np


def finetune_loss(hidden, logits, x, labels, weight, bias, lm_weight):
    if lm_weight < 0 or hidden.shape[1] < 2 or np.max(labels) >= len(bias):
        raise ValueError(lm_weight)
    return {"loss": 0.0, "cls_loss": 0.0, "lm_loss": 0.0, "dhidden": np.zeros_like(hidden),
            "dlogits": np.zeros_like(logits), "dweight": np.zeros_like(weight), "dbias": np.zeros_like(bias)}
''',
}

IMPORT_REFERENCE = '''
import numpy as np
from lib.numpy_twin.finetune import ClassifierHead
from lib.numpy_twin.train import cross_entropy


def finetune_loss(hidden, logits, x, labels, weight, bias, lm_weight):
    head = ClassifierHead(hidden.shape[-1], len(bias)).astype(np.float64)
    head.weight[...], head.bias[...] = weight, bias
    scores, cache = head.forward(hidden)
    cls_loss, dscores = cross_entropy(scores[:, None], np.asarray(labels)[:, None])
    dhidden = head.backward(dscores[:, 0], cache)
    lm_loss, dlm = cross_entropy(logits[:, :-1], x[:, 1:])
    dlogits = np.zeros_like(logits)
    dlogits[:, :-1] = lm_weight * dlm
    return {"loss": cls_loss + lm_weight * lm_loss, "cls_loss": cls_loss, "lm_loss": lm_loss, "dhidden": dhidden,
            "dlogits": dlogits, "dweight": head.grads["weight"], "dbias": head.grads["bias"]}
'''
