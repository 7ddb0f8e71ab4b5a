"""Hidden tests of exercise 9.2 (the DPO loss): the loss and its four gradients.

Reference: float64, written here from the definition with exact branches instead of logaddexp
(-log sigmoid(z) = log1p(exp(-z)) for z >= 0 and -z + log1p(exp(z)) for z < 0; sigmoid(-z) as
exp(-z) / (1 + exp(-z)) or 1 / (1 + exp(z)), whichever exponent is <= 0), independently of lib;
tests/test_posttrain.py checks it against lib's dpo_loss.
The loss and each gradient are tests of their own.
Inputs: batches of 1 to 64 pairs, beta from 0.01 to 5, log-probabilities in the hundreds, margins
up to |z| = 1e4 of either sign (a naive log(1 + exp(-z)) is inf there, and a naive sigmoid NaN),
float32 inputs.
Tolerances: float64 |got - ref| <= 1e-15 + 1e-9 |ref| (a gradient of a pair ranked right by 1e4
is e^-1e4 = 0: an answer must give 0, not a rounding residue above 1e-15); float32 gradients must
be float32 within 1e-5 + 1e-5 |ref|; the loss is a float in both.
Edge tests: every margin 0 (loss log 2, every gradient +-beta / 2B, which a constant gets right)
and bad input (a function that always raises gets them right).
"""
import math

import numpy as np

from grader.spec import Exercise, Test, Verdict, close

EXERCISE = Exercise(
    notebook="ch9_dpo", title="The DPO loss and its gradient",
    functions=("dpo_loss",),
    blocked=("lib.numpy_twin.posttrain:dpo_loss", "lib.torch_twin.posttrain:dpo_loss",
             "lib.posttrain.loops:dpo_loss"),
)

F64 = dict(rtol=1e-9, atol=1e-15)
F32 = dict(rtol=1e-5, atol=1e-5)
NAMES = ("d_policy_chosen", "d_policy_rejected", "d_ref_chosen", "d_ref_rejected")


def dpo_loss(pc, pr, rc, rr, beta):
    z = [beta * ((float(a) - float(c)) - (float(b) - float(d))) for a, b, c, d in zip(pc, pr, rc, rr)]
    losses = [math.log1p(math.exp(-t)) if t >= 0 else -t + math.log1p(math.exp(t)) for t in z]
    sig = [math.exp(-t) / (1 + math.exp(-t)) if t >= 0 else 1 / (1 + math.exp(t)) for t in z]   # sigmoid(-z)
    g = np.array([-beta * s / len(z) for s in sig])
    return sum(losses) / len(z), (g, -g, -g, g)


REFERENCE = {"dpo_loss": dpo_loss}


def _case(B, beta, scale, margin=0.0, dtype="float64", seed=0):
    rng = np.random.default_rng(seed)
    pc, pr, rc, rr = (-np.abs(rng.standard_normal(B)) * scale for _ in range(4))
    pr = pr - margin * np.sign(rng.standard_normal(B))       # margins of +-margin (pairs right and wrong)
    return tuple(a.astype(dtype) for a in (pc, pr, rc, rr)) + (beta,)


CASES = {
    "B 6, beta 0.1, log-probabilities ~10": _case(6, 0.1, 10.0, seed=921),
    "B 1, beta 1.0, log-probabilities ~100": _case(1, 1.0, 100.0, seed=922),
    "B 64, beta 0.01, log-probabilities ~300": _case(64, 0.01, 300.0, seed=923),
    "margins +-2000, beta 5 (|z| = 1e4)": _case(8, 5.0, 50.0, margin=2000.0, seed=924),
    "margins +-3000, beta 0.5": _case(5, 0.5, 20.0, margin=3000.0, seed=925),
    "float32: B 7, beta 0.2": _case(7, 0.2, 5.0, dtype="float32", seed=926),
}


def loss_check(expected):
    def check(got):
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return False, f"expected a pair (loss, grads), got {type(got).__name__}"
        loss = got[0]
        if isinstance(loss, np.ndarray) and loss.shape == ():
            loss = loss.item()
        if not isinstance(loss, (float, np.floating)):
            return False, f"the loss should be a float, got {type(loss).__name__}"
        if not math.isfinite(loss):
            return False, f"the loss is {loss}, not a finite number"
        if abs(loss - expected) > 1e-12 + 1e-9 * abs(expected):
            return Verdict(False, f"loss off: got {loss!r}", f"expected {expected!r}")
        return True, "loss right"
    return check


def grad_check(k, expected, dtype, tol):
    compare = close(expected, dtype=dtype, **tol)

    def check(got):
        if not isinstance(got, (tuple, list)) or len(got) != 2 or not isinstance(got[1], (tuple, list)) \
                or len(got[1]) != 4:
            return False, "expected (loss, (four gradients))"
        verdict = compare(got[1][k])
        return Verdict(verdict[0], f"{NAMES[k]}: {verdict[1]}", verdict[2] if len(verdict) > 2 else "")
    return check


def tests():
    out = []
    cases = dict(CASES)
    zero = np.full(4, -3.0)
    cases["every margin 0 (loss log 2)"] = (zero, zero, zero, zero, 0.7)
    for label, args in cases.items():
        edge = label.startswith("every margin 0")
        dtype = str(args[0].dtype)
        loss, grads = dpo_loss(*args)
        out.append(Test(f"the loss: {label}", "dpo_loss", args, loss_check(loss), edge=edge))
        for k in range(4):
            out.append(Test(f"{NAMES[k]}: {label}", "dpo_loss", args,
                            grad_check(k, grads[k], dtype, F32 if dtype == "float32" else F64), edge=edge))
    pc, pr, rc, rr, beta = CASES["B 6, beta 0.1, log-probabilities ~10"]
    bad = {
        "beta = 0 raises ValueError": (pc, pr, rc, rr, 0.0),
        "beta = -1 raises ValueError": (pc, pr, rc, rr, -1.0),
        "five rejected log-probabilities for six pairs raises ValueError": (pc, pr[:5], rc, rr, beta),
        "an empty batch raises ValueError": (pc[:0], pr[:0], rc[:0], rr[:0], beta),
    }
    out += [Test(label, "dpo_loss", args, expect_error="ValueError", edge=True) for label, args in bad.items()]
    return out
