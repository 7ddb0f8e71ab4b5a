"""Hidden tests of exercise 4.1 (GELU): the two forms and their derivatives.

Reference: float64, the exact form with math.erf, evaluated on the very values the student's
function receives (float32 inputs are widened without rounding).
Tolerances, with the reasons:
- float64: |got - ref| <= 1e-10 + 1e-7 |ref|. Any correct formulation (erf or erfc, tanh or the
  equivalent sigmoid) agrees with the reference to ~1e-15; a constant off in its 4th digit
  (0.0447 for 0.044715) moves values by ~1e-5, a missing sqrt(2) by ~1e-1.
- float32: the answer must be float32, within 1e-5 + 1e-5 |ref|. Rounding the cubic and
  1 + tanh (cancellation for x < 0) costs ~1e-7 absolute in the values; in the tanh form's
  derivative, 1 - t^2 keeps only ~1e-7 absolute precision where t^2 is near 1, and it is
  multiplied by 0.5 |x| sqrt(2/pi) (1 + 0.134 x^2), up to ~30 on [-8, 8]: ~4e-6 measured worst.
  Wrong formulas are caught by the float64 tests; the float32 ones check dtype and stability.
Large |x| and the empty array are edge tests: a ReLU gets them right, so they count only once
the function is right on the grid and the random values.
"""
import math

import numpy as np

from grader.spec import Exercise, Test, close

EXERCISE = Exercise(
    notebook="ch4_gelu", title="GELU",
    functions=("gelu_exact", "gelu_exact_grad", "gelu_tanh", "gelu_tanh_grad"),
    blocked=("lib.numpy_twin.model:gelu", "lib.numpy_twin.model:gelu_backward",
             "lib.numpy_twin.model:gelu_exact", "lib.numpy_twin.model:gelu_exact_backward",
             "lib.numpy_twin.model:erf", "lib.torch_twin.model:gelu", "lib.torch_twin.model:gelu_exact"),
)

_erf = np.frompyfunc(math.erf, 1, 1)
C = math.sqrt(2.0 / math.pi)


def _phi(x):                                      # standard normal CDF, float64
    return 0.5 * (1.0 + _erf(x / math.sqrt(2.0)).astype(np.float64))


def gelu_exact(x):
    x = np.asarray(x, np.float64)
    return x * _phi(x)


def gelu_exact_grad(x):
    x = np.asarray(x, np.float64)
    return _phi(x) + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def gelu_tanh(x):
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + np.tanh(C * (x + 0.044715 * x ** 3)))


def gelu_tanh_grad(x):
    x = np.asarray(x, np.float64)
    t = np.tanh(C * (x + 0.044715 * x ** 3))
    with np.errstate(invalid="ignore", over="ignore"):
        inner = np.where(t * t == 1.0, 0.0, (1.0 - t * t) * C * (1.0 + 3 * 0.044715 * x * x))
    return 0.5 * (1.0 + t) + 0.5 * x * inner


REFERENCE = {"gelu_exact": gelu_exact, "gelu_exact_grad": gelu_exact_grad,
             "gelu_tanh": gelu_tanh, "gelu_tanh_grad": gelu_tanh_grad}

F64 = dict(rtol=1e-7, atol=1e-10)
F32 = dict(rtol=1e-5, atol=1e-5)


def _inputs():
    rng = np.random.default_rng(8)
    grid = np.linspace(-8, 8, 1601)                                          # steps of 0.01, 0 included
    large = np.array([10, 20, 30, 50, 100, 1e3, 1e4, 1e5, 1e6])
    large = np.concatenate([-large[::-1], large])
    return {
        "float64 on [-8, 8]": grid,
        "float32 on [-8, 8] (answer in float32)": grid.astype(np.float32),
        "large |x| up to 1e6 (float64)": large,
        "large |x| up to 1e4 (float32)": large[np.abs(large) <= 1e4].astype(np.float32),
        "shape (3, 4, 5) and values from N(0, 3^2)": rng.normal(0, 3, (3, 4, 5)),
        "empty array": np.zeros(0),
    }


EDGES = ("large |x| up to 1e6 (float64)", "large |x| up to 1e4 (float32)", "empty array")


def tests():
    out = []
    for name, ref in REFERENCE.items():
        for label, x in _inputs().items():
            tol = F32 if x.dtype == np.float32 else F64
            out.append(Test(f"{name}: {label}", name, (x,), close(ref(x), dtype=x.dtype, **tol), edge=label in EDGES))
    return out
