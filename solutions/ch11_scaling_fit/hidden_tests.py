"""Hidden tests of exercise 11.1: the fit of L(N) = E + A N^-alpha and the prediction's interval.

Reference: float64, written here independently of lib: E and A by np.linalg.lstsq for each alpha
of a log grid, the best alpha refined by Newton's method on the profiled residual's numerical
derivatives (bracketed by the grid), and the interval from the column-scaled Jacobian in
(E, A, alpha) through its singular value decomposition; tests/test_in_context.py checks it against
lib's fit_power_law and predict.
Inputs: exact ladders of known truth (Hoffmann et al.'s N-term; E = 0, Kaplan's form, at sizes
1e9 to 1e12), noisy ladders of 6 to 12 runs with known truths (noise 0.3% to 1% of the loss), an
ill-conditioned ladder (six sizes within 1.5x of each other, where A and alpha nearly trade off:
a fit in raw (E, A, alpha) by Newton steps fails there), repeated sizes.
Tolerances: E, A, alpha within 1e-5 relative (E within 1e-7 of the mean loss where the truth is
E = 0); the predicted loss within 1e-7 relative; the interval's half-width within 1e-3 relative
(a standard error of a fit converged to ~1e-8 in alpha). For the ill-conditioned ladder only the
prediction and its interval are compared (its parameters are determined to ~1e-4 at best).
Edge tests: bad input (a function that always raises gets them right).
"""
import math

import numpy as np

from grader.spec import Exercise, Test, Verdict

EXERCISE = Exercise(
    notebook="ch11_scaling_fit", title="fitting the scaling law and predicting with an interval",
    functions=("fit_power_law", "predict_interval"),
    blocked=("lib.scaling.fit:*",),
)


def _line(N, L, alpha):
    """E, A and the residual sum of squares of the straight-line fit of L on N^-alpha."""
    X = np.stack([np.ones_like(N), N ** -alpha], axis=1)
    (E, A), *_ = np.linalg.lstsq(X, L, rcond=None)
    return E, A, float(((L - X @ np.array([E, A])) ** 2).sum())


def fit_power_law(params, losses):
    N = np.asarray(params, dtype=float)
    L = np.asarray(losses, dtype=float)
    N = N / np.exp(np.log(N).mean())                       # sizes around 1: the fit is A at the centre
    alphas = np.geomspace(1e-3, 20.0, 500) / np.ptp(np.log(N))
    rss = [(_line(N, L, a)[2] if _line(N, L, a)[1] > 0 else np.inf) for a in alphas]
    k = int(np.argmin(rss))
    lo, hi, alpha = alphas[k - 1], alphas[k + 1], alphas[k]
    for _ in range(100):                                    # Newton on d rss / d alpha, kept in the bracket
        h = 1e-4 * alpha
        r0, rp, rm = (_line(N, L, a)[2] for a in (alpha, alpha + h, alpha - h))
        d1, d2 = (rp - rm) / (2 * h), (rp - 2 * r0 + rm) / h ** 2
        step = alpha - d1 / d2 if d2 > 0 else (lo + hi) / 2
        alpha = min(max(step, lo), hi)
    for _ in range(200):                                    # then bisection on the sign of the slope
        mid = (lo + hi) / 2
        h = 1e-6 * mid
        if _line(N, L, mid + h)[2] > _line(N, L, mid - h)[2]:
            hi = mid
        else:
            lo = mid
        if hi - lo < 1e-13 * mid:
            break
    alpha = (lo + hi) / 2
    E, A_centre, _ = _line(N, L, alpha)
    centre = np.log(np.asarray(params, dtype=float)).mean()
    return float(E), float(A_centre * math.exp(alpha * centre)), float(alpha)


def predict_interval(params, losses, n_params, t):
    N = np.asarray(params, dtype=float)
    L = np.asarray(losses, dtype=float)
    E, A, alpha = fit_power_law(N, L)
    centre = np.log(N).mean()

    def rows(n):                                            # dL / d(E, A_c, alpha), A_c the factor at the centre
        x = np.exp(-alpha * (np.log(n) - centre))
        return np.stack([np.ones_like(x), x, -A * math.exp(-alpha * centre) * (np.log(n) - centre) * x], axis=-1)

    A_c = A * math.exp(-alpha * centre)
    J = rows(N)
    s2 = float(((L - E - A_c * np.exp(-alpha * (np.log(N) - centre))) ** 2).sum()) / (len(N) - 3)
    scale = np.linalg.norm(J, axis=0)
    U, S, Vt = np.linalg.svd(J / scale, full_matrices=False)
    g = rows(np.array([float(n_params)]))[0] / scale
    se = math.sqrt(s2 * float(((Vt @ g) / S) @ ((Vt @ g) / S)))
    loss = E + A * float(n_params) ** -alpha
    return loss, loss - t * se, loss + t * se


REFERENCE = {"fit_power_law": fit_power_law, "predict_interval": predict_interval}


def law(N, E=1.69, A=406.4, alpha=0.34):
    return E + A * np.asarray(N, dtype=float) ** -alpha


def _noisy(n, lo, hi, noise, seed, **truth):
    N = np.geomspace(lo, hi, n)
    L = law(N, **truth)
    return N, L * (1 + noise * np.random.default_rng(seed).standard_normal(n))


def _floats(got, n):
    if isinstance(got, np.ndarray):
        got = tuple(got.tolist())
    if not isinstance(got, (tuple, list)) or len(got) != n:
        return None
    try:
        values = [float(v) for v in got]
    except (TypeError, ValueError):
        return None
    return values if all(math.isfinite(v) for v in values) else None


def params_close(expected, scale):
    """(E, A, alpha) within 1e-5 relative; E within 1e-7 of `scale` (the losses' mean) when near 0."""
    def check(got):
        values = _floats(got, 3)
        if values is None:
            return False, "expected (E, A, alpha): three finite floats"
        for name, v, want in zip(("E", "A", "alpha"), values, expected):
            if abs(v - want) > 1e-5 * abs(want) + (1e-7 * scale if name == "E" else 0.0):
                return Verdict(False, f"{name} off: got {v!r}", f"expected {want!r}")
        return True, "E, A, alpha right"
    return check


def prediction_close(expected):
    loss, low, high = expected

    def check(got):
        values = _floats(got, 3)
        if values is None:
            return False, "expected (loss, low, high): three finite floats"
        if abs(values[0] - loss) > 1e-7 * abs(loss):
            return Verdict(False, f"the predicted loss is off: got {values[0]!r}", f"expected {loss!r}")
        half, want = (values[2] - values[1]) / 2, (high - low) / 2
        if abs(values[0] - (values[1] + values[2]) / 2) > 1e-9 * abs(loss):
            return False, "the interval is not centred on the prediction"
        if abs(half - want) > 1e-3 * want:
            return Verdict(False, f"the interval's half-width is off: got {half!r}", f"expected {want!r}")
        return True, "prediction and interval right"
    return check


def fit_cases():
    N6 = np.geomspace(1e6, 1e9, 6)
    N_kaplan = np.geomspace(1e9, 1e12, 7)
    return {
        "exact ladder, Hoffmann et al.'s N-term, 1e6 to 1e9": (N6, law(N6)),
        "exact ladder, E = 0 (Kaplan's form), 1e9 to 1e12": (N_kaplan, law(N_kaplan, E=0.0, A=50.0, alpha=0.1)),
        "noisy ladder of 6, 0.5% noise": _noisy(6, 1e6, 1e9, 0.005, 1111),
        "noisy ladder of 12, 1% noise, E 2.5, alpha 0.5": _noisy(12, 1e5, 1e9, 0.01, 1112, E=2.5, A=2000.0,
                                                                 alpha=0.5),
        "noisy ladder, E = 0, 0.3% noise": _noisy(8, 1e8, 1e11, 0.003, 1113, E=0.0, A=30.0, alpha=0.076),
        "two runs at each of four sizes": (np.repeat(np.geomspace(1e6, 1e8, 4), 2),
                                           law(np.repeat(np.geomspace(1e6, 1e8, 4), 2))
                                           * (1 + 0.004 * np.random.default_rng(1114).standard_normal(8))),
    }


def interval_cases():
    narrow = _noisy(6, 1e8, 1.5e8, 1e-4, 1115)
    return {
        "noisy ladder of 6 at 1e10, t = 2.35": (*fit_cases()["noisy ladder of 6, 0.5% noise"], 1e10, 2.35),
        "noisy ladder of 12 at 1e11, t = 1.83": (*fit_cases()["noisy ladder of 12, 1% noise, E 2.5, alpha 0.5"],
                                                 1e11, 1.83),
        "E = 0 ladder at 1e12, t = 2.02": (*fit_cases()["noisy ladder, E = 0, 0.3% noise"], 1e12, 2.02),
        "ill-conditioned: six sizes within 1.5x, at 2e8": (*narrow, 2e8, 2.35),
        "inside the ladder, at 3e7": (*fit_cases()["noisy ladder of 6, 0.5% noise"], 3e7, 2.35),
    }


def tests():
    out = []
    for label, (N, L) in fit_cases().items():
        out.append(Test(f"the fit: {label}", "fit_power_law", (N, L), params_close(fit_power_law(N, L),
                                                                                    float(np.mean(L)))))
    for label, args in interval_cases().items():
        out.append(Test(f"the prediction: {label}", "predict_interval", args,
                        prediction_close(predict_interval(*args))))
    N = np.geomspace(1e6, 1e9, 6)
    L = law(N)
    bad_fit = {
        "lists of different lengths raise ValueError": (N, L[:5]),
        "a size of 0 raises ValueError": (np.r_[0.0, N[1:]], L),
        "a negative loss raises ValueError": (N, np.r_[L[:5], -1.0]),
        "a NaN loss raises ValueError": (N, np.r_[L[:5], np.nan]),
        "two distinct sizes raise ValueError": (np.array([1e6, 1e6, 1e7, 1e7]), L[:4]),
        "losses rising with N raise ValueError": (N, L[::-1]),
    }
    out += [Test(label, "fit_power_law", args, expect_error="ValueError", edge=True) for label, args in bad_fit.items()]
    out.append(Test("an interval from three runs raises ValueError", "predict_interval", (N[:3], L[:3], 1e10, 2.0),
                    expect_error="ValueError", edge=True))
    return out
