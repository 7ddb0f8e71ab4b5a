"""Exercise ch4_gelu's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("wrong_constant", "0.0447 for 0.044715 in the tanh form",
     (("u = sqrt(2/pi) (x + 0.044715 x^3)", "u = sqrt(2/pi) (x + 0.0447 x^3)"),
      ("(x + 0.044715 * x ** 3)", "(x + 0.0447 * x ** 3)"),
      ("(1.0 + 3 * 0.044715 * x * x)", "(1.0 + 3 * 0.0447 * x * x)"))),
    ("erf_without_sqrt2", "erf(x) instead of erf(x / sqrt 2) in Phi",
     (("0.5 * (1.0 + _erf(x64 / math.sqrt(2.0)))", "0.5 * (1.0 + _erf(x64))"),)),
    ("grad_missing_product_term", "the derivatives forget the x * (...)' term of the product rule",
     (("return (_cdf(x64) + x64 * pdf).astype(x.dtype)", "return _cdf(x64).astype(x.dtype)"),
      ("return 0.5 * (1.0 + t) + product", "return 0.5 * (1.0 + t)")),
     "the product rule's second term"),
    ("unstable_sigmoid", "the tanh form through exp: e^{2u} / (1 + e^{2u}) is inf / inf for large x",
     (("    return 0.5 * x * (1.0 + _tanh_inner(x))",
       "    e = np.exp(2 * SQRT_2_OVER_PI * (x + 0.044715 * x ** 3))\n    return x * e / (1.0 + e)"),)),
    ("float64_output", "right values, but float64 answers for float32 inputs",
     (("return (x64 * _cdf(x64)).astype(x.dtype)", "return x64 * _cdf(x64)"),
      ("return (_cdf(x64) + x64 * pdf).astype(x.dtype)", "return _cdf(x64) + x64 * pdf"))),
]

TRIVIAL = {
    "relu": '''
import numpy as np


def gelu_exact(x):
    return np.maximum(x, 0).astype(np.asarray(x).dtype)


def gelu_exact_grad(x):
    return (np.asarray(x) > 0).astype(np.asarray(x).dtype)


gelu_tanh, gelu_tanh_grad = gelu_exact, gelu_exact_grad
''',
    "identity": '''
import numpy as np


def gelu_exact(x):
    return np.asarray(x)


def gelu_exact_grad(x):
    return np.ones_like(x)


gelu_tanh, gelu_tanh_grad = gelu_exact, gelu_exact_grad
''',
}

IMPORT_REFERENCE = '''
import numpy as np
from lib.numpy_twin.model import gelu, gelu_backward, gelu_exact, gelu_exact_backward


def gelu_tanh(x):
    return gelu(x)


def gelu_tanh_grad(x):
    return gelu_backward(np.ones_like(x), x)


def gelu_exact_grad(x):
    return gelu_exact_backward(np.ones_like(x), x)
'''
