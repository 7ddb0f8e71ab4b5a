"""Hidden tests of exercise 9.1 (LoRA): the forward pass, the backward pass and the merge.

Reference: float64, written here from the definition with einsum over explicit indices
(y_ni = sum_j x_nj W_ij + b_i + s sum_k (sum_j x_nj A_kj) B_ik, s = alpha / r), independently of lib;
tests/test_posttrain.py checks it against lib's LoRALinear.
Each output of the backward pass (dx, dA, dB) is a test of its own, so that a mistake in one keeps
the points of the others.
Inputs: x with one, two and three leading axes, a layer without a bias, ranks 1 to 8, alpha from
0.5 to 32, float32.
Tolerances: float64 |got - ref| <= 1e-12 + 1e-9 |ref| (any order of the products agrees to
~1e-14); float32 answers must be float32, within 1e-4 + 1e-4 |ref| (sums of a few hundred terms).
Edge tests: B = 0 (the layer is its base, which an answer ignoring the update gets right, for the
forward pass and dx) and bad shapes (a function that always raises gets them right).
"""
import numpy as np

from grader.spec import Exercise, Test, Verdict, close

EXERCISE = Exercise(
    notebook="ch9_lora", title="LoRA's forward, backward and merge",
    functions=("lora_forward", "lora_backward", "lora_merge"),
    blocked=("lib.numpy_twin.posttrain:LoRALinear.forward", "lib.numpy_twin.posttrain:LoRALinear.backward",
             "lib.numpy_twin.posttrain:LoRALinear.merge", "lib.torch_twin.posttrain:LoRALinear.forward",
             "lib.torch_twin.posttrain:LoRALinear.merge"),
)

F64 = dict(rtol=1e-9, atol=1e-12)
F32 = dict(rtol=1e-4, atol=1e-4)


def lora_forward(x, weight, bias, A, B, alpha):
    x = np.asarray(x, np.float64)
    s = alpha / A.shape[0]
    y = np.einsum("...j,ij->...i", x, weight) + s * np.einsum("...k,ik->...i", np.einsum("...j,kj->...k", x, A), B)
    return y if bias is None else y + bias


def lora_backward(dy, x, weight, A, B, alpha):
    dy, x = np.asarray(dy, np.float64), np.asarray(x, np.float64)
    s = alpha / A.shape[0]
    u = np.einsum("...j,kj->...k", x, A)                                   # (..., r)
    du = s * np.einsum("...i,ik->...k", dy, B)                             # (..., r)
    dx = np.einsum("...i,ij->...j", dy, weight) + np.einsum("...k,kj->...j", du, A)
    dA = np.einsum("nk,nj->kj", du.reshape(-1, A.shape[0]), x.reshape(-1, x.shape[-1]))      # summed over positions
    dB = s * np.einsum("ni,nk->ik", dy.reshape(-1, dy.shape[-1]), u.reshape(-1, A.shape[0]))
    return dx, dA, dB


def lora_merge(weight, A, B, alpha):
    return np.asarray(weight, np.float64) + (alpha / A.shape[0]) * np.einsum("ik,kj->ij", B, A)


REFERENCE = {"lora_forward": lora_forward, "lora_backward": lora_backward, "lora_merge": lora_merge}


def _case(lead, n_in, n_out, r, alpha, bias=True, dtype="float64", zero_B=False, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((*lead, n_in)).astype(dtype)
    weight = (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)).astype(dtype)
    b = rng.standard_normal(n_out).astype(dtype) if bias else None
    A = (rng.standard_normal((r, n_in)) / np.sqrt(n_in)).astype(dtype)
    B = np.zeros((n_out, r), dtype) if zero_B else rng.standard_normal((n_out, r)).astype(dtype)
    dy = rng.standard_normal((*lead, n_out)).astype(dtype)
    return dict(x=x, weight=weight, bias=b, A=A, B=B, alpha=alpha, dy=dy, dtype=dtype)


CASES = {
    "x (2, 5, 16), out 24, rank 4, alpha 8": _case((2, 5), 16, 24, 4, 8.0, seed=91),
    "x (7, 12) (no batch axis), out 6, rank 1, alpha 0.5": _case((7,), 12, 6, 1, 0.5, seed=92),
    "x (2, 3, 4, 10), out 10, rank 8, alpha 32, no bias": _case((2, 3, 4), 10, 10, 8, 32.0, bias=False, seed=93),
    "float32: x (3, 6, 32), out 16, rank 4, alpha 16": _case((3, 6), 32, 16, 4, 16.0, dtype="float32", seed=94),
    "B = 0 (a fresh layer): x (2, 4, 8), out 8, rank 2, alpha 4": _case((2, 4), 8, 8, 2, 4.0, zero_B=True, seed=95),
}


def _tol(case):
    return F32 if case["dtype"] == "float32" else F64


def part(k, name, expected, dtype, tol):
    """Check entry k of the returned triple (dx, dA, dB)."""
    compare = close(expected, dtype=dtype, **tol)

    def check(got):
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            return False, f"expected a triple (dx, dA, dB), got {type(got).__name__}"
        verdict = compare(got[k])
        return Verdict(verdict[0], f"{name}: {verdict[1]}", verdict[2] if len(verdict) > 2 else "")
    return check


def tests():
    out = []
    for label, c in CASES.items():
        fresh = label.startswith("B = 0")
        args = (c["x"], c["weight"], c["bias"], c["A"], c["B"], c["alpha"])
        out.append(Test(f"lora_forward: {label}", "lora_forward", args,
                        close(lora_forward(*args), dtype=c["dtype"], **_tol(c)), edge=fresh))
        grads = lora_backward(c["dy"], c["x"], c["weight"], c["A"], c["B"], c["alpha"])
        for k, name in enumerate(("dx", "dA", "dB")):
            out.append(Test(f"lora_backward, {name}: {label}", "lora_backward",
                            (c["dy"], c["x"], c["weight"], c["A"], c["B"], c["alpha"]),
                            part(k, name, grads[k], c["dtype"], _tol(c)), edge=fresh and name == "dx"))
        out.append(Test(f"lora_merge: {label}", "lora_merge", (c["weight"], c["A"], c["B"], c["alpha"]),
                        close(lora_merge(c["weight"], c["A"], c["B"], c["alpha"]), dtype=c["dtype"], **_tol(c)),
                        edge=fresh))
    c = CASES["x (2, 5, 16), out 24, rank 4, alpha 8"]
    x, weight, bias, A, B, dy = c["x"], c["weight"], c["bias"], c["A"], c["B"], c["dy"]
    bad = {
        "lora_forward with A of 15 inputs for a weight of 16 raises ValueError":
            ("lora_forward", (x, weight, bias, A[:, :15], B, 8.0)),
        "lora_forward with rank 0 raises ValueError":
            ("lora_forward", (x, weight, bias, A[:0], B[:, :0], 8.0)),
        "lora_backward with B of rank 3 for A of rank 4 raises ValueError":
            ("lora_backward", (dy, x, weight, A, B[:, :3], 8.0)),
        "lora_merge with B of 23 outputs for a weight of 24 raises ValueError":
            ("lora_merge", (weight, A, B[:23], 8.0)),
    }
    out += [Test(label, function, args, expect_error="ValueError", edge=True) for label, (function, args) in bad.items()]
    return out
