"""Hidden tests of exercise 5.2 (loss plotter): smoothing, the drop rate, and the three phases.

Definitions (stated the same way in the exercise):
- smooth(losses, window): s[t] = mean(losses[max(0, t - window + 1) : t + 1]), a trailing mean;
  window must be an integer >= 1 (else ValueError).
- drop_rate(losses, window): r[t] = (s[t - window] - s[t]) / window for t >= window, NaN before.
- find_phases(losses, window=50, fast=0.3, plateau=0.03): with r = drop_rate(losses, window) and
  r_max its largest value, at index `peak` (the first, if tied), the fast phase ends at the first
  t > peak with r[t] < fast * r_max and the plateau starts at the first t >= that one with
  r[t] < plateau * r_max; each is None when it never happens. ValueError when
  len(losses) <= window, when r_max <= 0 (the smoothed loss never falls) or unless
  0 < plateau < fast < 1.
Known boundaries: with window 1, r[t] = losses[t - 1] - losses[t], so a piecewise-linear curve
changes phase exactly at its kinks (t = 101 and 601 below, by construction). With wider windows
and noise, the expected indices come from the reference below; on every test curve each rate
lies more than 1e-6 r_max from both thresholds, so float rounding (~1e-15) cannot move them.
Values: float64, within 1e-12 + 1e-9 |expected| (sums in another order differ by ~1e-15).
Edge tests (the ValueErrors, window 1, a curve with no phase change) are what a function that
always raises, returns its input or returns (None, None) gets right; they count only once the
function's other tests pass. Test names describe the curve, never the expected phases.
"""
import numpy as np

from grader.spec import Exercise, Test, Verdict, close

EXERCISE = Exercise(notebook="ch5_loss_plotter", title="Loss plotter",
                    functions=("smooth", "drop_rate", "find_phases"), blocked=("lib.plotting:*",))


def smooth(losses, window):
    x = np.asarray(losses, np.float64)
    c = np.concatenate([[0.0], np.cumsum(x)])                              # (N + 1,)
    t = np.arange(len(x))
    start = np.maximum(0, t - window + 1)
    return (c[t + 1] - c[start]) / (t + 1 - start)


def drop_rate(losses, window):
    s = smooth(losses, window)
    r = np.full(len(s), np.nan)
    r[window:] = (s[:-window] - s[window:]) / window
    return r


def find_phases(losses, window=50, fast=0.3, plateau=0.03):
    r = drop_rate(losses, window)
    peak = int(np.nanargmax(r))
    below_fast = np.flatnonzero(r[peak + 1:] < fast * r[peak])
    if not len(below_fast):
        return None, None
    end_fast = peak + 1 + int(below_fast[0])
    below_plateau = np.flatnonzero(r[end_fast:] < plateau * r[peak])
    return end_fast, (end_fast + int(below_plateau[0]) if len(below_plateau) else None)


REFERENCE = {"smooth": smooth, "drop_rate": drop_rate, "find_phases": find_phases}
TOL = dict(rtol=1e-9, atol=1e-12)


def piecewise(slopes_until, n=1000, start=5.0):
    """losses[t] = losses[t - 1] - g(t), g(t) = the slope of the first piece with t <= its end."""
    g = np.zeros(n)
    lo = 1
    for slope, end in slopes_until:
        g[lo:end + 1] = slope
        lo = end + 1
    return start - np.cumsum(g)


def training_like(seed, n=1000, noise=0.05):
    t = np.arange(n)
    rng = np.random.default_rng(seed)
    return 1.6 + 3.5 * np.exp(-t / 60) + 0.8 * np.exp(-t / 350) + rng.normal(0, noise, n)


def warmup_like(seed, n=800, warmup=100, noise=0.05):
    """Almost flat for `warmup` steps (as under a learning-rate warmup), then training_like."""
    t = np.arange(n)
    after = np.maximum(t - warmup, 0)
    rng = np.random.default_rng(seed)
    curve = 1.6 + 3.5 * np.exp(-after / 60) + 0.8 * np.exp(-after / 350) + 0.001 * np.maximum(warmup - t, 0)
    return curve + rng.normal(0, noise, n)


KINKED = piecewise([(0.02, 100), (0.004, 600), (0.0002, 10**9)])


def as_phases(expected):
    def check(got):
        if not isinstance(got, (list, tuple)) or len(got) != 2:
            return False, f"expected a pair (end_fast, start_plateau), got {str(got)[:80]}"
        got = [int(g) if isinstance(g, np.ndarray) and g.ndim == 0 and np.issubdtype(g.dtype, np.integer) else g
               for g in got]
        if any(not (g is None or (isinstance(g, int) and not isinstance(g, bool))) for g in got):
            return False, f"each boundary must be an int or None, got {got}"
        if tuple(got) != tuple(expected):
            return Verdict(False, f"got {tuple(got)}: not the phase boundaries", f"expected {tuple(expected)}")
        return Verdict(True, f"{tuple(expected)}")
    return check


def phase_test(name, losses, edge=False, **kwargs):
    window, fast, plateau = kwargs.get("window", 50), kwargs.get("fast", 0.3), kwargs.get("plateau", 0.03)
    r = drop_rate(losses, window)
    r_max = np.nanmax(r)
    for level in (fast * r_max, plateau * r_max):                      # no rate within rounding of a threshold
        assert np.nanmin(np.abs(r - level)) > 1e-6 * r_max, f"{name}: a rate lies on a threshold"
    return Test(name, "find_phases", (losses,), as_phases(find_phases(losses, **kwargs)), kwargs=kwargs, edge=edge)


def tests():
    rng = np.random.default_rng(5)
    x = rng.normal(3.0, 1.0, 200)
    rising = np.linspace(2.0, 3.0, 300)
    return [
        Test("smooth: window 1 is the identity", "smooth", (x, 1), close(smooth(x, 1), **TOL), edge=True),
        Test("smooth: window 7 (shorter windows at the start)", "smooth", (x, 7), close(smooth(x, 7), **TOL)),
        Test("smooth: window longer than the curve is a running mean", "smooth", (x, 500), close(smooth(x, 500), **TOL)),
        Test("smooth: window 0 raises ValueError", "smooth", (x, 0), expect_error="ValueError", edge=True),
        Test("drop_rate: window 5, NaN before t = 5", "drop_rate", (x, 5), close(drop_rate(x, 5), match_nan=True, **TOL)),
        Test("drop_rate: window 1 is the step-to-step drop", "drop_rate", (KINKED, 1),
             close(drop_rate(KINKED, 1), match_nan=True, **TOL)),
        Test("drop_rate: window 40 on a training-like curve", "drop_rate", (training_like(1), 40),
             close(drop_rate(training_like(1), 40), match_nan=True, **TOL)),
        phase_test("phases: kinks at 100 and 600, window 1, fast 0.5, plateau 0.1", KINKED,
                   window=1, fast=0.5, plateau=0.1),
        phase_test("phases: same kinks, window 20", KINKED, window=20, fast=0.5, plateau=0.1),
        phase_test("phases: training-like curve with noise, the default settings", training_like(2)),
        phase_test("phases: training-like curve, window 30, fast 0.6, plateau 0.05", training_like(3),
                   window=30, fast=0.6, plateau=0.05),
        phase_test("phases: a slow warmup before the fast drop (the peak comes late), window 30",
                   warmup_like(4), window=30, fast=0.5, plateau=0.05),
        phase_test("phases: a straight line, window 10", np.linspace(5, 2, 400), edge=True, window=10),
        phase_test("phases: the drop slows once and then keeps its rate, window 1, fast 0.5, plateau 0.1",
                   piecewise([(0.02, 100), (0.004, 10**9)], n=400), window=1, fast=0.5, plateau=0.1),
        Test("phases: a rising loss raises ValueError", "find_phases", (rising,), kwargs=dict(window=10),
             expect_error="ValueError", edge=True),
        Test("phases: no more losses than the window raises ValueError", "find_phases", (x[:50],),
             kwargs=dict(window=50), expect_error="ValueError", edge=True),
        Test("phases: fast <= plateau raises ValueError", "find_phases", (KINKED,),
             kwargs=dict(window=1, fast=0.1, plateau=0.5), expect_error="ValueError", edge=True),
    ]
