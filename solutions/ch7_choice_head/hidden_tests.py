"""Hidden tests of exercise 7.2 (the multiple-choice head): one score per choice from its [extract]
state by a shared linear head, a softmax across the choices, and the gradients.

Reference: float64, log-softmax after subtracting each example's largest score, written here
independently of lib (tests/test_grader.py checks it against lib's format_loss through a model's
backward pass). Each part of the answer (the scores, the loss, the three gradients) is a test of its
own, on every input, so that a mistake in one part keeps the points of the others.
Tolerance: |got - ref| <= 1e-12 + 1e-9 |ref|. Any correct formulation (log-sum-exp or softmax then
log, gathering before or after the head) agrees to ~1e-14 relative; the inputs with scores in the
thousands make a softmax without the max subtraction overflow (NaN), and the padding after each
[extract] holds values of 1e8 that only a head reading the wrong positions sees.
Edge tests: dbias (zero on every input: a softmax's gradient rows sum to zero, which a function that
returns zeros gets right) and the bad inputs (a function that always raises gets them right).
"""
import numpy as np

from grader.spec import Exercise, Test, Verdict, close

EXERCISE = Exercise(
    notebook="ch7_choice_head", title="The multiple-choice head",
    functions=("choice_head",),
    # lib's cross_entropy (exercise 5.1's answer) stays usable, as in 7.1: 7.2 grades what is new
    # (reading each choice at its [extract], one shared score, the softmax across choices, the gradients).
    blocked=("lib.numpy_twin.gpt1_formats:extract_states", "lib.numpy_twin.gpt1_formats:extract_states_backward",
             "lib.numpy_twin.gpt1_formats:choice_scores", "lib.numpy_twin.gpt1_formats:choice_scores_backward",
             "lib.numpy_twin.gpt1_formats:format_loss", "lib.numpy_twin.finetune:ClassifierHead.forward",
             "lib.numpy_twin.finetune:ClassifierHead.backward", "lib.torch_twin.gpt1_formats:extract_states",
             "lib.torch_twin.gpt1_formats:choice_scores", "lib.torch_twin.gpt1_formats:format_loss"),
)

PARTS = ("scores", "loss", "dhidden", "dweight", "dbias")
TOL = dict(rtol=1e-9, atol=1e-12)


def choice_head(hidden, extract, weight, bias, labels):
    B, S, T, C = hidden.shape
    states = np.stack([[hidden[b, s, extract[b, s]] for s in range(S)] for b in range(B)])
    scores = np.einsum("bsc,c->bs", states, weight[0]) + bias[0]
    z = scores - scores.max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    grad = np.exp(log_p)
    grad[np.arange(B), labels] -= 1.0
    grad /= B
    dhidden = np.zeros((B, S, T, C))
    for b in range(B):
        for s in range(S):
            dhidden[b, s, extract[b, s]] = grad[b, s] * weight[0]
    return {"scores": scores, "loss": -log_p[np.arange(B), labels].mean(), "dhidden": dhidden,
            "dweight": np.einsum("bs,bsc->c", grad, states)[None], "dbias": np.array([grad.sum()])}


REFERENCE = {"choice_head": choice_head}


def _inputs(B, S, T, C, seed, scale=1.0):
    """Choices of different lengths: each sequence's [extract] at its own position, 1e8 after it."""
    rng = np.random.default_rng(seed)
    extract = rng.integers(0, T, (B, S))
    hidden = rng.standard_normal((B, S, T, C))
    after = np.arange(T) > extract[..., None]                # (B, S, T): the padding
    hidden[after] = 1e8
    return (hidden, extract, scale * rng.standard_normal((1, C)) / np.sqrt(C), rng.standard_normal(1),
            rng.integers(0, S, B))


CASES = {
    "B 3, S 4, T 9, C 8": _inputs(3, 4, 9, 8, seed=81),
    "B 1, S 2, T 5, C 6": _inputs(1, 2, 5, 6, seed=82),
    "B 5, S 5, T 12, C 4": _inputs(5, 5, 12, 4, seed=83),
    "scores in the thousands, B 4, S 4, T 7, C 10": _inputs(4, 4, 7, 10, seed=84, scale=3000.0),
}


def part(key, expected):
    """Check one entry of the returned dict: a float (or 0-d array) for the loss, an array otherwise."""
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
        return Verdict(verdict[0], f"{key}: {verdict[1]}", verdict[2] if len(verdict) > 2 else "")
    return check


def tests():
    out = []
    for label, args in CASES.items():
        want = choice_head(*args)
        out += [Test(f"{key}: {label}", "choice_head", args, part(key, want[key]), edge=key == "dbias")
                for key in PARTS]
    hidden, extract, weight, bias, labels = CASES["B 3, S 4, T 9, C 8"]
    bad = {
        "a label equal to S raises ValueError": (hidden, extract, weight, bias, np.array([0, 4, 1])),
        "a label of -1 raises ValueError": (hidden, extract, weight, bias, np.array([0, -1, 1])),
        "an extract position equal to T raises ValueError": (hidden, np.full((3, 4), 9), weight, bias, labels),
        "extract of shape (B,) raises ValueError": (hidden, extract[:, 0], weight, bias, labels),
        "a weight of shape (2, C) raises ValueError": (hidden, extract, np.ones((2, 8)), bias, labels),
    }
    out += [Test(label, "choice_head", args, expect_error="ValueError", edge=True) for label, args in bad.items()]
    return out
