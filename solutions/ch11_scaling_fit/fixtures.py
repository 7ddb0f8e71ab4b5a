"""Exercise ch11_scaling_fit's wrong, trivial and tampering answers (see solutions/fixtures.py)."""
WRONG = [
    ("A_at_centre", "A returned as the factor at the ladder's centre, B, not at N = 1",
     (("return float(E), float(np.exp(log_B + alpha * center)), float(alpha)",
       "return float(E), float(np.exp(log_B)), float(alpha)"),),
     "A is the factor at N = 1"),
    ("grid_only", "the grid's alpha, not refined: off by the grid's spacing",
     (("for _ in range(60):", "for _ in range(0):"),)),
    ("variance_over_n", "the residual variance over n, not n - 3: an interval too narrow",
     (("s2 = residual @ residual / (len(N) - 3)", "s2 = residual @ residual / len(N)"),),
     "not n"),
    ("new_run_noise", "the interval of one more run (s^2 added), not of the curve",
     (("half = t * np.sqrt(g @ covariance @ g)", "half = t * np.sqrt(g @ covariance @ g + s2)"),),
     "one more run"),
    ("no_positive_A", "fits with A <= 0 accepted: losses rising with N get a fit",
     (("rss = np.array([f[2] if f[1] > 0 else np.inf for f in fits])",
       "rss = np.array([f[2] for f in fits])"),
      ("if not np.isfinite(rss[k]) or k in (0, len(alphas) - 1):", "if not np.isfinite(rss[k]):")),),
]

TRIVIAL = {
    "flat_fit": '''
import numpy as np


def fit_power_law(params, losses):
    return float(np.min(losses)), 1.0, 0.5


def predict_interval(params, losses, n_params, t):
    loss = float(np.min(losses))
    return loss, loss - t, loss + t
''',
}

IMPORT_REFERENCE = '''
from lib.scaling.fit import fit_power_law as _fit, predict as _predict


def fit_power_law(params, losses):
    fit = _fit(params, losses)
    return fit.E, fit.A, fit.alpha


def predict_interval(params, losses, n_params, t):
    result = _predict(_fit(params, losses), n_params)
    return result["loss"], *result["interval"]
'''
