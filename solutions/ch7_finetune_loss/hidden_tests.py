"""Hidden tests of exercise 7.1 (the fine-tuning loss): L3 = L2 + lm_weight * L1 and its gradients.

Reference: float64, log-softmax after subtracting each row's maximum, written here independently of
lib (tests/test_grader.py checks it against lib's finetune_loss through a model's backward pass).
Each part of the answer (the three losses, the four gradients) is a test of its own, on every
input, so that a mistake in one part keeps the points of the others.
Tolerance: |got - ref| <= 1e-12 + 1e-9 |ref|. Any correct formulation (log-sum-exp or softmax
then log, gradients by rows or by matrix products) agrees to ~1e-14 relative; the inputs with
logits and scores in the thousands make a softmax without the max subtraction overflow (NaN).
Edge tests: dlogits with lm_weight = 0 (zeros, which a function that returns zeros gets right) and
the three bad inputs (a function that always raises gets them right).
"""
import numpy as np

from grader.spec import Exercise, Test, Verdict, close

EXERCISE = Exercise(
    notebook="ch7_finetune_loss", title="The fine-tuning loss",
    functions=("finetune_loss",),
    # lib's cross_entropy (exercise 5.1's answer) stays usable: 5.1 comes first in the book, and 7.1
    # grades what is new to it (the shift, the head at the classify token, the weighting, the gradients).
    blocked=("lib.numpy_twin.finetune:ClassifierHead.forward", "lib.numpy_twin.finetune:ClassifierHead.backward",
             "lib.numpy_twin.finetune:finetune_loss", "lib.torch_twin.finetune:ClassifierHead.forward",
             "lib.torch_twin.finetune:finetune_loss"),
)

PARTS = ("loss", "cls_loss", "lm_loss", "dhidden", "dlogits", "dweight", "dbias")
TOL = dict(rtol=1e-9, atol=1e-12)


def _mean_cross_entropy(z, targets):
    z = z - z.max(axis=-1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    rows = np.arange(len(z))
    grad = np.exp(log_p)
    grad[rows, targets] -= 1.0
    return -log_p[rows, targets].mean(), grad / len(z)


def finetune_loss(hidden, logits, x, labels,
                  weight, bias, lm_weight):
    B, T, C = hidden.shape
    V = logits.shape[-1]
    scores = hidden[:, -1] @ weight.T + bias
    cls_loss, dscores = _mean_cross_entropy(scores, labels)
    lm_loss, dlm = _mean_cross_entropy(logits[:, :-1].reshape(-1, V), x[:, 1:].reshape(-1))
    dlogits = np.zeros((B, T, V))
    dlogits[:, :-1] = lm_weight * dlm.reshape(B, T - 1, V)
    dhidden = np.zeros((B, T, C))
    dhidden[:, -1] = dscores @ weight
    return {"loss": cls_loss + lm_weight * lm_loss, "cls_loss": cls_loss, "lm_loss": lm_loss, "dhidden": dhidden,
            "dlogits": dlogits, "dweight": dscores.T @ hidden[:, -1], "dbias": dscores.sum(axis=0)}


REFERENCE = {"finetune_loss": finetune_loss}


def _inputs(B, T, C, V, K, lm_weight, seed, logit_scale=1.0, score_scale=1.0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((B, T, C)), logit_scale * rng.standard_normal((B, T, V)) + 5.0 * logit_scale,
            rng.integers(0, V, (B, T)), rng.integers(0, K, B), score_scale * rng.standard_normal((K, C)) / np.sqrt(C),
            rng.standard_normal(K), lm_weight)


CASES = {
    "B 3, T 7, C 10, V 13, K 2, lm_weight 0.5": _inputs(3, 7, 10, 13, 2, 0.5, seed=71),
    "B 4, T 5, C 8, V 30, K 5, lm_weight 0": _inputs(4, 5, 8, 30, 5, 0.0, seed=72),
    "B 1, T 2 (one next token), C 6, V 7, K 3, lm_weight 1.25": _inputs(1, 2, 6, 7, 3, 1.25, seed=73),
    "logits and scores in the thousands, lm_weight 0.5": _inputs(2, 6, 12, 17, 4, 0.5, seed=74,
                                                                 logit_scale=2000.0, score_scale=3000.0),
}


def part(key, expected):
    """Check one entry of the returned dict: a float (or 0-d array) for losses, an array for gradients."""
    compare = close(np.asarray(expected, np.float64), dtype=np.float64, **TOL)

    def check(got):
        if not isinstance(got, dict) or key not in got:
            return False, f"expected a dict with the key {key!r}, got {type(got).__name__}"
        value = got[key]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = np.float64(value)
        if isinstance(value, np.generic):
            value = np.asarray(value)
        verdict = compare(value)
        passed, message = verdict[0], verdict[1]
        return Verdict(passed, f"{key}: {message}", verdict[2] if len(verdict) > 2 else "")
    return check


def tests():
    out = []
    for label, args in CASES.items():
        want = finetune_loss(*args)
        for key in PARTS:
            edge = key == "dlogits" and args[-1] == 0
            out.append(Test(f"{key}: {label}", "finetune_loss", args, part(key, want[key]), edge=edge))
    hidden, logits, x, labels, weight, bias, _ = CASES["B 3, T 7, C 10, V 13, K 2, lm_weight 0.5"]
    bad = {
        "a label equal to K raises ValueError": (hidden, logits, x, np.array([0, 2, 1]), weight, bias, 0.5),
        "a label of -1 raises ValueError": (hidden, logits, x, np.array([0, -1, 1]), weight, bias, 0.5),
        "a negative lm_weight raises ValueError": (hidden, logits, x, labels, weight, bias, -0.5),
        "T = 1 (no next token) raises ValueError": (hidden[:, :1], logits[:, :1], x[:, :1], labels, weight, bias, 0.5),
    }
    out += [Test(label, "finetune_loss", args, expect_error="ValueError", edge=True) for label, args in bad.items()]
    return out
