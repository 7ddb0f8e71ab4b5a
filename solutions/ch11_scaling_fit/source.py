"""Exercise 11.1: fitting L(N) = E + A N^-alpha to a ladder of runs and predicting with an interval."""
from build_notebooks import check, code, collapsed, graded, md, setup


STUB = '''
import numpy as np


def fit_power_law(params, losses):
    """Least-squares fit of L(N) = E + A N^-alpha to runs of `params` parameters
    reaching `losses` (two sequences of n numbers, n >= 3 distinct sizes).
    Returns (E, A, alpha) as floats, A > 0."""
    raise NotImplementedError("exercise 11.1: write fit_power_law")


def predict_interval(params, losses, n_params, t):
    """The fitted curve's loss at n_params and its interval loss -+ t * se (se: the
    prediction's standard error by the delta method, the residual variance taken
    over n - 3 degrees of freedom). Returns (loss, low, high) as floats."""
    raise NotImplementedError("exercise 11.1: write predict_interval")
'''

ANSWER = '''
import numpy as np


def _runs(params, losses):
    N, L = np.asarray(params, dtype=float), np.asarray(losses, dtype=float)
    if N.ndim != 1 or N.shape != L.shape:
        raise ValueError(f"params and losses must have one length, got {N.shape}, "
                         f"{L.shape}")
    if not (np.all(np.isfinite(N) & (N > 0)) and np.all(np.isfinite(L) & (L > 0))):
        raise ValueError("params and losses must be positive numbers")
    if len(np.unique(N)) < 3:
        raise ValueError("need runs at 3 or more distinct sizes, got "
                         f"{len(np.unique(N))}")
    return N, L


def _profile(u, L, alpha):
    """For a fixed alpha, L = E + B exp(-alpha u) is linear in E and B: (E, B, rss)."""
    x = np.exp(-alpha * u)                                 # (n,)
    xc = x - x.mean()
    B = xc @ (L - L.mean()) / (xc @ xc)
    E = L.mean() - B * x.mean()
    return E, B, float(((L - E - B * x) ** 2).sum())


def _fit(N, L):
    """(E, ln B, alpha, u, center): B the power term at the ladder's mean ln N."""
    center = np.log(N).mean()
    u = np.log(N) - center                                 # (n,): centred log sizes
    alphas = np.geomspace(1e-3, 20.0, 400) / np.ptp(u)
    fits = [_profile(u, L, a) for a in alphas]
    rss = np.array([f[2] if f[1] > 0 else np.inf for f in fits])
    k = int(np.argmin(rss))
    if not np.isfinite(rss[k]) or k in (0, len(alphas) - 1):
        raise ValueError("the fit did not converge: no power law with A > 0 fits")
    lo, hi = alphas[k - 1], alphas[k + 1]
    g = (np.sqrt(5) - 1) / 2
    for _ in range(60):                          # golden section on rss(alpha)
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if _profile(u, L, a)[2] < _profile(u, L, b)[2]:
            hi = b
        else:
            lo = a
    alpha = (lo + hi) / 2
    E, B, _ = _profile(u, L, alpha)
    return E, np.log(B), alpha, u, center


def fit_power_law(params, losses):
    """Least-squares fit of L(N) = E + A N^-alpha to runs of `params` parameters
    reaching `losses` (two sequences of n numbers, n >= 3 distinct sizes).
    Returns (E, A, alpha) as floats, A > 0."""
    E, log_B, alpha, _, center = _fit(*_runs(params, losses))
    return float(E), float(np.exp(log_B + alpha * center)), float(alpha)


def _jacobian(u, log_B, alpha):
    """dL/d(E, ln B, alpha) at centred log sizes u: (n, 3)."""
    power = np.exp(log_B - alpha * u)
    return np.stack([np.ones_like(u), power, -u * power], axis=-1)


def predict_interval(params, losses, n_params, t):
    """The fitted curve's loss at n_params and its interval loss -+ t * se (se: the
    prediction's standard error by the delta method, the residual variance taken
    over n - 3 degrees of freedom). Returns (loss, low, high) as floats."""
    N, L = _runs(params, losses)
    if len(N) < 4:
        raise ValueError(f"an interval needs 4 or more runs (n - 3 >= 1), got {len(N)}")
    if not (np.isfinite(n_params) and n_params > 0 and t > 0):
        raise ValueError(f"n_params and t must be positive, got {n_params!r}, {t!r}")
    E, log_B, alpha, u, center = _fit(N, L)
    J = _jacobian(u, log_B, alpha)                          # (n, 3)
    residual = L - E - np.exp(log_B - alpha * u)
    s2 = residual @ residual / (len(N) - 3)
    covariance = s2 * np.linalg.inv(J.T @ J)                # (3, 3)
    u_new = np.log(n_params) - center
    g = _jacobian(np.array([u_new]), log_B, alpha)[0]       # (3,)
    loss = E + np.exp(log_B - alpha * u_new)
    half = t * np.sqrt(g @ covariance @ g)
    return float(loss), float(loss - half), float(loss + half)
'''

CELLS = [
    md(r"""
    # Exercise 11.1: fitting the scaling law and predicting with an interval

    This exercise follows [chapter 11](../chapters/11_scale.ipynb), which fits
    $L(N) = E + A N^{-\alpha}$ to a ladder of trained models and predicts the loss of a larger
    one before training it: $E$ is the loss no size removes, $A N^{-\alpha}$ what size does
    (the $N$-term of Hoffmann et al.'s law {cite}`hoffmann2022training`; Kaplan et al.'s
    {cite}`kaplan2020scaling` is its $E = 0$ case). You write the fit and the prediction's
    interval.

    **What is graded.** The cell tagged `graded:ch11_scaling_fit`. A grader runs that cell alone,
    in a sandbox, and calls your two functions with hidden tests; nothing else in this notebook is
    graded. The checks below it are a first test you can run yourself. Some hidden tests are
    *edge tests* (bad input that must raise): they count only once every other test passes.
    """),
    setup(),
    md(r"""
    ## The contract

    - `fit_power_law(params, losses)`: the least-squares fit (the sum of squared differences in
      the loss, over the runs) of $L(N) = E + A N^{-\alpha}$, with $A > 0$; `(E, A, alpha)` as
      floats. $E$ is not held $\ge 0$: for a truth with $E = 0$ and noise it may land just below.
    - `predict_interval(params, losses, n_params, t)`: the fitted curve's loss at `n_params`
      and its interval, `(loss, loss - t * se, loss + t * se)`, where `se` is the delta method's
      standard error: with $J$ the derivatives of the fitted losses by the three parameters at
      the optimum and $s^2$ the residual sum of squares over $n - 3$, the parameters' covariance
      is $s^2 (J^\top J)^{-1}$, and $se^2 = g^\top \text{cov}\, g$ for $g$ the derivatives of
      the prediction by the same parameters. `t` is the Student t quantile you choose the level
      by (1.64 for 90% with many runs; larger for few).
    - Raise `ValueError` for lists of different lengths, a size or a loss that is not a positive
      number, fewer than 3 distinct sizes, an interval asked of fewer than 4 runs (no degree of
      freedom left to measure the noise), and losses that no power law with $A > 0$ fits (losses
      that rise with $N$).
    - The hidden tests fit ladders from $10^6$ to $10^{12}$ parameters, with and without noise,
      with $E = 0$, and one whose sizes lie within 1.5x of each other. Grading compares
      $E$, $A$, $\alpha$ within $10^{-5}$ relative (or $10^{-7}$ of the losses, for $E$ near 0),
      the predicted loss within $10^{-7}$ and the interval's half-width within $10^{-3}$ relative.

    :::{admonition} Hint 1 of 3: one parameter, not three
    :class: dropdown
    For a fixed $\alpha$, $L = E + A x$ with $x = N^{-\alpha}$ is a straight line in $x$: $E$
    and $A$ come from a linear least-squares regression. So the fit is a search over $\alpha$
    alone, of the residual that regression leaves (a *variable projection*). Search a wide grid
    of $\alpha$, then refine around the grid's best.
    :::

    :::{admonition} Hint 2 of 3: keeping the numbers tame
    :class: dropdown
    $N^{-\alpha}$ for $N = 10^{12}$ is tiny and $A$ huge, and the two trade off almost exactly:
    a Newton step in $(E, A, \alpha)$ is badly conditioned. Write $\ln N = c + u$, $c$ the
    ladder's mean $\ln N$: then $L = E + B e^{-\alpha u}$ with $B = A e^{-\alpha c}$, of the
    size of the losses. Search $\alpha$ over a grid scaled by the span of $u$, fit $E$ and $B$,
    and recover $A = B e^{\alpha c}$ at the end.
    :::

    :::{admonition} Hint 3 of 3: the interval
    :class: dropdown
    In the parameters $(E, \ln B, \alpha)$, a run at $u$ has
    $\partial L / \partial(E, \ln B, \alpha) = (1,\ B e^{-\alpha u},\ -u B e^{-\alpha u})$. Stack
    these rows over the runs into $J$, and take the same row at the new size's $u$ as $g$. The
    interval is the same whatever parameters you choose, to first order.
    :::

    Use numpy only; while grading, lib's fit raises an error. The graded cell must hold
    everything the functions use, imports included.
    """),
    graded(STUB, ANSWER),
    md(r"""
    ## Checks you can run

    Exact ladders of known truth, a noisy one, and bad input.
    """),
    code('''
    from lib.checks import CheckFailed, expect_close, expect_raises

    sizes = np.geomspace(1e6, 1e9, 6)


    def law(N, E=1.69, A=406.4, alpha=0.34):        # Hoffmann et al.'s N-term
        return E + A * np.asarray(N, dtype=float) ** -alpha
    '''),
    check('''
    E, A, alpha = fit_power_law(sizes, law(sizes))
    if abs(alpha - 0.34) < 1e-3 and abs(A - 406.4) > 1.0:
        raise CheckFailed("alpha is right and A is not: A is the factor at N = 1, not at "
                          "the ladder's centre; recover it with A = B exp(alpha * centre)")
    expect_close("E, A, alpha of an exact ladder from 1e6 to 1e9", np.array([E, A, alpha]),
                 np.array([1.69, 406.4, 0.34]), rtol=1e-5)
    '''),
    check('''
    E, A, alpha = fit_power_law(sizes * 1000, law(sizes * 1000, E=0.0, A=50.0, alpha=0.1))
    expect_close("E = 0, sizes 1e9 to 1e12: E", E, 0.0, rtol=0, atol=1e-6)
    expect_close("E = 0, sizes 1e9 to 1e12: A, alpha", np.array([A, alpha]),
                 np.array([50.0, 0.1]), rtol=1e-4)
    '''),
    check('''
    rng = np.random.default_rng(111)
    noisy = law(sizes) + 0.01 * rng.standard_normal(6)
    loss, low, high = predict_interval(sizes, noisy, 1e10, 2.35)
    E, A, alpha = fit_power_law(sizes, noisy)
    expect_close("the prediction is the fitted curve at 1e10", loss, E + A * 1e10 ** -alpha,
                 rtol=1e-9)
    if not low < loss < high:
        raise CheckFailed(f"the interval ({low:.4f}, {high:.4f}) does not hold the "
                          f"prediction {loss:.4f}")
    half = (high - low) / 2
    if half < 1e-3:
        raise CheckFailed(f"a half-width of {half:.2g} for noise of 0.01 at 6 runs is too "
                          "narrow: the residual variance is the sum of squares over n - 3")
    # the interval is t * se: doubling t doubles it
    _, low2, high2 = predict_interval(sizes, noisy, 1e10, 4.7)
    expect_close("the half-width with t doubled", (high2 - low2) / 2, 2 * half, rtol=1e-9)
    '''),
    check('''
    rng = np.random.default_rng(112)
    noisy = law(sizes) + 0.01 * rng.standard_normal(6)
    E, A, alpha = fit_power_law(sizes, noisy)
    # the delta method in (E, A, alpha), well conditioned enough for sizes 1e6 to 1e9
    rows = lambda N: np.stack([np.ones_like(N), N ** -alpha,
                               -A * np.log(N) * N ** -alpha], -1)
    J, g = rows(sizes), rows(np.array([1e10]))[0]
    s2 = ((noisy - E - A * sizes ** -alpha) ** 2).sum() / (6 - 3)
    se = np.sqrt(s2 * g @ np.linalg.solve(J.T @ J, g))
    loss, low, high = predict_interval(sizes, noisy, 1e10, 2.35)
    got = (high - low) / 2 / 2.35
    if abs(got / se - np.sqrt(3 / 6)) < 1e-3:
        raise CheckFailed("the interval is too narrow by sqrt(3/6): the residual variance "
                          "is the sum of squares over n - 3, not n")
    if abs(got ** 2 - se ** 2 - s2) < 1e-3 * s2:
        raise CheckFailed("the interval holds the noise of one more run (s^2 added): it "
                          "bounds the curve, se^2 = g^T cov g alone")
    expect_close("se at 1e10 against the delta method in (E, A, alpha)", got, se, rtol=1e-4)
    '''),
    check('''
    expect_raises("three runs at two sizes", ValueError, fit_power_law, [1e6, 1e6, 1e7],
                  [3.0, 3.1, 2.8])
    expect_raises("a loss of 0", ValueError, fit_power_law, sizes, np.r_[law(sizes)[:5], 0])
    expect_raises("losses rising with N", ValueError, fit_power_law, sizes,
                  law(sizes)[::-1])
    expect_raises("an interval from 3 runs", ValueError, predict_interval, sizes[:3],
                  law(sizes[:3]), 1e10, 2.0)
    '''),
    md("""
    ## Compare with lib

    lib's version, which chapter 11 and `python -m lib.scaling fit` use (it also refuses
    ladders too narrow to tell $A$ from $\\alpha$, and computes the t quantile itself): open the
    cell below once your checks pass.
    """),
    collapsed('''
    from lib.display import show
    from lib.scaling import fit

    show(fit._profile, fit._best_alpha, fit.fit_power_law, fit.predict)
    '''),
    md("""
    ## Going further

    - The interval bounds the curve. The loss one more run at $N$ will measure also carries
      that run's own noise: add $s^2$ to $se^2$. How much wider is it at 6 runs?
    - Fit a ladder of 5 runs, predict the sixth, then fit all 6: does the sixth run fall inside
      the interval the 5 gave? Over many noisy ladders, how often?
    """),
]
