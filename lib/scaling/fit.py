"""A scaling law fitted to a ladder of runs, L(N) = E + A N^-alpha, and the loss it predicts for the
next run, with an interval.

E is the loss no size removes, A N^-alpha what size does; the form is the N-term of Hoffmann et
al.'s L(N, D) = E + A / N^alpha + B / D^beta [hoffmann2022training] (their fit: E = 1.69,
A = 406.4, alpha = 0.34), and Kaplan et al.'s L = (N_c / N)^alpha_N [kaplan2020scaling] is its
E = 0 case.

The fit is least squares in the loss. For a fixed alpha the model is linear in E and A, so those
come from a straight-line regression of L on N^-alpha, and only alpha is searched: over a grid of
alpha times the ladder's span of ln N from 1e-3 to 20, then by golden section around the grid's
best (the "variable projection" of a separable least-squares problem). A best alpha at either end
of the grid (losses that do not bend, or only the smallest run differing), a fitted A <= 0 (losses
that do not fall as N grows) or a ladder whose sizes lie too close together to tell the three
parameters apart is a fit that did not converge: ValueError.

The interval is the delta method's: the parameter covariance s^2 (J^T J)^-1 at the optimum
(J: the derivatives of the fitted losses by the parameters, s^2: the residual variance over
n - 3 degrees of freedom) carried to the prediction through its gradient, with a Student t
quantile for n - 3 degrees of freedom. It is exact for a model linear in its parameters and
near enough for this one (tests/test_scaling.py measures its coverage on noisy synthetic ladders
of known truth). By default it bounds the curve L(N); `new_run=True` widens it by the noise of
one more run, for the loss such a run will measure. Internally the fit works in u = ln N minus
the ladder's mean ln N, with ln B (B: the power term at that centre, B = A exp(-alpha * centre))
in place of A: the three parameters are then on comparable scales and B stays positive.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

N_PARAMETERS = 3                   # E, A, alpha
_ALPHA_SPAN = (1e-3, 20.0)         # the grid of alpha * (span of ln N): 20, the power term falls e^20-fold
_GRID = 400
_MAX_CONDITION = 1e6               # of the column-scaled Jacobian in (E, ln A, alpha); see fit_power_law


@dataclass(frozen=True)
class PowerLawFit:
    """L(N) = E + A N^-alpha fitted to `n` runs, with what an interval needs: the covariance of
    (E, ln B, alpha), B the power term at N = exp(center), and the residual spread s (nan, and the
    covariance None, when n = 3 leaves no degree of freedom to measure the noise)."""
    E: float
    A: float
    alpha: float
    center: float
    covariance: np.ndarray | None  # (3, 3)
    s: float
    n: int

    @property
    def dof(self) -> int:
        return self.n - N_PARAMETERS


def _ladder(params, losses) -> tuple[np.ndarray, np.ndarray]:
    """The runs as two float arrays (n,), checked: finite, positive, at least 3 distinct sizes."""
    N, L = np.asarray(params, dtype=float), np.asarray(losses, dtype=float)
    if N.ndim != 1 or N.shape != L.shape:
        raise ValueError(f"params and losses must be two lists of equal length, got shapes {N.shape} and {L.shape}")
    for name, values in (("params", N), ("losses", L)):
        bad = values[~(np.isfinite(values) & (values > 0))]
        if bad.size:
            raise ValueError(f"{name} must be positive numbers, got {float(bad[0])!r}")
    if len(np.unique(N)) < N_PARAMETERS:
        raise ValueError(f"a fit of E, A and alpha needs runs at {N_PARAMETERS} or more distinct sizes, "
                         f"got {len(np.unique(N))} ({len(N)} runs)")
    return N, L


def _profile(u, L, alphas):
    """For each alpha (K,): the least-squares E and B of L = E + B exp(-alpha u), and the residual
    sum of squares; u, L (n,) -> three arrays (K,)."""
    p = np.exp(-np.outer(alphas, u))                              # (K, n)
    p_centered = p - p.mean(axis=1, keepdims=True)
    B = p_centered @ (L - L.mean()) / (p_centered ** 2).sum(axis=1)
    E = L.mean() - B * p.mean(axis=1)
    rss = ((L - E[:, None] - B[:, None] * p) ** 2).sum(axis=1)
    return E, B, rss


def _golden_section(f, lo, hi, iterations=50):
    """The minimizer of f on [lo, hi], f unimodal there; 50 steps shrink the bracket by 0.618^50 ~ 4e-11."""
    g = (np.sqrt(5) - 1) / 2
    a, b = lo + (1 - g) * (hi - lo), lo + g * (hi - lo)
    fa, fb = f(a), f(b)
    for _ in range(iterations):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = lo + (1 - g) * (hi - lo)
            fa = f(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = f(b)
    return (lo + hi) / 2


def _best_alpha(u, L) -> float:
    """alpha minimising the profiled residual among fits with A > 0: the grid's best, refined by golden section."""
    alphas = np.geomspace(*_ALPHA_SPAN, _GRID) / np.ptp(u)
    _, B, rss = _profile(u, L, alphas)
    if not np.any(B > 0):
        raise ValueError("the power-law fit did not converge: the losses do not fall as N grows (A > 0 fits none)")
    k = int(np.argmin(np.where(B > 0, rss, np.inf)))
    if k in (0, _GRID - 1):
        edge = ("alpha -> 0: the losses do not bend as log N grows" if k == 0 else
                "alpha -> infinity: only the smallest run stands apart from the rest")
        raise ValueError(f"the power-law fit did not converge ({edge}); it needs runs over a wider range of sizes")
    return _golden_section(lambda a: _profile(u, L, np.array([a]))[2][0], alphas[k - 1], alphas[k + 1])


def _jacobian(u, E, log_B, alpha):
    """d L / d (E, ln B, alpha) at each point: (n, 3)."""
    power = np.exp(log_B - alpha * u)
    return np.stack([np.ones_like(u), power, -u * power], axis=-1)


def _separability(log_N, E, log_A, alpha) -> float:
    """The condition number of the Jacobian in (E, ln A, alpha), columns scaled to unit length: how
    nearly a change of ln A can be undone by one of alpha. On exact ladders of Hoffmann et al.'s
    N-term it measures about 70 for sizes from 1e6 to 1e9, 1.6e4 for sizes spanning 1.5x around 1e8
    and 2.5e7 for 1% around 1e8: the limit of 1e6 passes the second and refuses the third."""
    J = _jacobian(log_N, E, log_A, alpha)
    return float(np.linalg.cond(J / np.linalg.norm(J, axis=0)))


def fit_power_law(params, losses) -> PowerLawFit:
    """Fit L(N) = E + A N^-alpha to runs of `params` parameters reaching `losses` (two sequences (n,),
    n >= 3 distinct sizes). E is not held >= 0: for a truth with E = 0 it lands near 0, on either side."""
    N, L = _ladder(params, losses)
    center = np.log(N).mean()
    u = np.log(N) - center
    alpha = _best_alpha(u, L)
    E, B, rss = (x[0] for x in _profile(u, L, np.array([alpha])))
    log_A = np.log(B) + alpha * center
    condition = _separability(np.log(N), E, log_A, alpha)
    if not condition < _MAX_CONDITION:
        raise ValueError(f"the power-law fit did not converge: sizes from {N.min():.6g} to {N.max():.6g} lie too close "
                         f"together to tell A from alpha (condition number {condition:.2g})")
    J = _jacobian(u, E, np.log(B), alpha)
    dof = len(N) - N_PARAMETERS
    s = np.sqrt(rss / dof) if dof else np.nan
    covariance = s ** 2 * np.linalg.inv(J.T @ J) if dof else None
    return PowerLawFit(E=float(E), A=float(np.exp(log_A)), alpha=float(alpha), center=float(center),
                       covariance=covariance, s=float(s), n=len(N))


def standard_errors(fit: PowerLawFit) -> dict:
    """{"E", "A", "alpha"}: each one's standard error by the delta method (A = B exp(alpha * center)),
    or None without degrees of freedom."""
    if fit.covariance is None:
        return {"E": None, "A": None, "alpha": None}
    to_A = fit.A * np.array([0.0, 1.0, fit.center])               # dA / d(E, ln B, alpha)
    return {"E": float(np.sqrt(fit.covariance[0, 0])), "A": float(np.sqrt(to_A @ fit.covariance @ to_A)),
            "alpha": float(np.sqrt(fit.covariance[2, 2]))}


@lru_cache
def t_quantile(q: float, dof: int) -> float:
    """The q-quantile of Student's t with `dof` degrees of freedom (0 < q < 1), numpy only. With
    t = sqrt(dof) tan(theta), theta's density is proportional to cos(theta)^(dof - 1) on (-pi/2, pi/2),
    so its distribution function is a cumulative integral over a fine grid, inverted by interpolation
    (it matches printed tables to their four decimals: tests/test_scaling.py)."""
    if not (0 < q < 1 and dof >= 1):
        raise ValueError(f"t_quantile needs 0 < q < 1 and dof >= 1, got q={q!r}, dof={dof!r}")
    theta = np.linspace(0, np.pi / 2, 200_001)
    density = np.cos(theta) ** (dof - 1)
    cdf = np.concatenate([[0], np.cumsum((density[1:] + density[:-1]) / 2)])
    cdf /= cdf[-1]                                                # P(0 <= T <= t) * 2
    angle = np.interp(abs(2 * q - 1), cdf, theta)
    return float(np.sign(q - 0.5) * np.sqrt(dof) * np.tan(angle))


def predict(fit: PowerLawFit, n_params, level: float = 0.9, new_run: bool = False) -> dict:
    """The fitted loss at `n_params` (a number or an array) and its `level` interval:
    {"loss", "interval": (low, high) or None when the fit has no degrees of freedom, "level"}.
    The interval bounds the curve L(N); with new_run=True, the loss one more run at N will measure."""
    if not 0 < level < 1:
        raise ValueError(f"level must be between 0 and 1, got {level!r}")
    N = np.asarray(n_params, dtype=float)
    if not np.all(np.isfinite(N) & (N > 0)):
        raise ValueError(f"n_params must be positive numbers, got {n_params!r}")
    u = np.log(N) - fit.center
    log_B = np.log(fit.A) - fit.alpha * fit.center
    loss = fit.E + np.exp(log_B - fit.alpha * u)
    if fit.covariance is None:
        return {"loss": loss, "interval": None, "level": level}
    g = _jacobian(u, fit.E, log_B, fit.alpha)                     # (..., 3)
    variance = np.einsum("...i,ij,...j->...", g, fit.covariance, g) + (fit.s ** 2 if new_run else 0.0)
    half = t_quantile((1 + level) / 2, fit.dof) * np.sqrt(variance)
    return {"loss": loss, "interval": (loss - half, loss + half), "level": level}
