"""Spline tables built once with scipy: order-statistic quantiles and Zipf normalisers.

A node of ``Dirichlet(alpha, n)`` or ``SoftmaxNormal(sigma, n)`` normalises n i.i.d.
weights W (Gamma(alpha), or exp(sigma Z)). The kernels generate their descending order
statistics through A = -log CDF (a sum of scaled exponential spacings) and need, at any
quantile, log W**beta and the log partial moments log E[W**(k beta) 1{W < w}], k = 1, 2.
Each is a cubic spline in x = log A over [-60, 4.5] (4096 intervals; beyond the ends the
spline is clamped, which only touches events of probability below 1e-20 or weights below
1e-23 of the largest). Relative error on the weights is below 1e-8 (tested against scipy).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import special

from brwsim.kernels.special import zipf_sum

__all__ = ["orderstat_table", "orderstat_bounds", "bound_weights", "zipf_norm_table",
           "spline_starts_floors", "N_INTERVALS", "X_MIN", "X_MAX"]

N_INTERVALS = 4096
X_MIN = -60.0
X_MAX = 4.5


def _spline_coef(u: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(n_int, 4) coefficients c0..c3 of a not-a-knot cubic spline, ascending powers.

    The arithmetic of ``scipy.interpolate.CubicSpline(u, y)`` (not-a-knot, at least four
    points: the tridiagonal system for the slopes, solved by ``scipy.linalg.solve_banded``,
    then the Hermite coefficients), so the same numbers (``tests/unit/test_families.py``),
    without importing ``scipy.interpolate``, which costs 0.3 s at start-up.
    """
    from scipy.linalg import solve_banded

    n = u.size
    if n < 4 or y.shape != u.shape:
        raise ValueError(f"a not-a-knot spline here needs >= 4 points and matching y, got {n}")
    if not (np.isfinite(u).all() and np.isfinite(y).all()):
        raise ValueError("spline points must be finite")     # as CubicSpline's check
    dx = np.diff(u)
    slope = np.diff(y) / dx
    A = np.zeros((3, n))
    b = np.empty(n)
    A[1, 1:-1] = 2 * (dx[:-1] + dx[1:])           # the diagonal
    A[0, 2:] = dx[:-1]                            # the upper diagonal
    A[-1, :-2] = dx[1:]                           # the lower diagonal
    b[1:-1] = 3 * (dx[1:] * slope[:-1] + dx[:-1] * slope[1:])
    A[1, 0] = dx[1]                               # not-a-knot at both ends
    A[0, 1] = u[2] - u[0]
    d = u[2] - u[0]
    b[0] = ((dx[0] + 2 * d) * dx[1] * slope[0] + dx[0] ** 2 * slope[1]) / d
    A[1, -1] = dx[-2]
    A[-1, -2] = u[-1] - u[-3]
    d = u[-1] - u[-3]
    b[-1] = (dx[-1] ** 2 * slope[-2] + (2 * d + dx[-1]) * dx[-2] * slope[-1]) / d
    s = solve_banded((1, 1), A, b.reshape(n, -1), overwrite_ab=True, overwrite_b=True,
                     check_finite=False).reshape(n)
    t = (s[:-1] + s[1:] - 2 * slope) / dx
    return np.ascontiguousarray(np.stack([y[:-1], s[:-1], (slope - s[:-1]) / dx - t, t / dx],
                                         axis=1))


def _gamma_log_quantile(alpha: float, log_tail: np.ndarray, upper: bool) -> np.ndarray:
    tail = np.exp(log_tail)
    if upper:
        return np.log(special.gammainccinv(alpha, tail))
    x = special.gammaincinv(alpha, tail)
    # tiny quantiles: P(alpha, x) ~ x**alpha / Gamma(alpha + 1)
    asym = (log_tail + special.gammaln(alpha + 1.0)) / alpha
    with np.errstate(divide="ignore"):
        return np.where(x > 1e-250, np.log(np.maximum(x, 1e-300)), asym)


def _gamma_log_partial_moment(alpha: float, power: float, log_w: np.ndarray) -> np.ndarray:
    """log E[G**power 1{G < w}] for G ~ Gamma(alpha), given log w."""
    a = alpha + power
    w = np.exp(log_w)
    pa = special.gammainc(a, w)
    asym = a * log_w - special.gammaln(a + 1.0)
    with np.errstate(divide="ignore"):
        log_p = np.where(pa > 1e-280, np.log(np.maximum(pa, 1e-300)), asym)
    return special.gammaln(a) - special.gammaln(alpha) + log_p


@lru_cache(maxsize=64)
def orderstat_table(law: str, param: float, beta: float) -> np.ndarray:
    """Three stacked splines in log A: log W**beta, log partial moments of order 1 and 2.

    Parameters
    ----------
    law : {"gamma", "lognormal"}
        Gamma(param) weights, or exp(param * Z) with Z standard normal.
    param : float
        alpha of the gamma law, or sigma of the log-normal law.
    beta : float
        Tempering exponent (1 / temperature).

    Returns
    -------
    numpy.ndarray
        Flat (3, N_INTERVALS, 4) coefficients, in the order of the ``OS_*`` constants of
        :mod:`brwsim.kernels.dist`.
    """
    x = np.linspace(X_MIN, X_MAX, N_INTERVALS + 1)
    a = np.exp(x)                                  # A = -log CDF
    upper = a < math.log(2.0)                      # CDF > 1/2: use the survival function
    log_tail = np.where(upper, np.log(-np.expm1(-a)), -a)
    log_w = np.empty_like(x)
    if law == "gamma":
        log_w[upper] = _gamma_log_quantile(param, log_tail[upper], True)
        log_w[~upper] = _gamma_log_quantile(param, log_tail[~upper], False)
        m1 = _gamma_log_partial_moment(param, beta, log_w)
        m2 = _gamma_log_partial_moment(param, 2.0 * beta, log_w)
    elif law == "lognormal":
        z = np.where(upper, -special.ndtri(np.exp(log_tail)), special.ndtri(np.exp(-a)))
        log_w = param * z
        b = param * beta
        m1 = b * b / 2.0 + special.log_ndtr(z - b)
        m2 = 2.0 * b * b + special.log_ndtr(z - 2.0 * b)
    else:
        raise ValueError(f"unknown law {law!r}")
    return np.concatenate([_spline_coef(x, y).ravel() for y in (beta * log_w, m1, m2)])


def _spline_non_increasing(coef: np.ndarray, h: float) -> bool:
    """Whether the cubic spline ``coef`` ((n_int, 4) as :func:`_spline_coef`, interval
    width ``h``) is non-increasing over its whole grid.

    Each interval's derivative c1 + 2 c2 d + 3 c3 d**2 is a quadratic in d on [0, h]: its
    maximum is at an end or at its vertex, all checked in float64 (a derivative a few ulps
    above 0 fails the check).
    """
    c1, c2, c3 = coef[:, 1], coef[:, 2], coef[:, 3]
    der = lambda d: c1 + d * (2.0 * c2 + 3.0 * c3 * d)
    with np.errstate(divide="ignore", invalid="ignore"):
        vertex = np.where(c3 != 0.0, -c2 / (3.0 * c3), 0.0)
    vertex = np.clip(np.nan_to_num(vertex), 0.0, h)
    return bool(np.all(der(0.0) <= 0.0) and np.all(der(h) <= 0.0) and np.all(der(vertex) <= 0.0))


def _spline_at(coef: np.ndarray, x0: float, inv_h: float, x: np.ndarray) -> np.ndarray:
    """:func:`brwsim.kernels.special.spline_eval` in numpy (the same operations)."""
    f = (x - x0) * inv_h
    i = np.clip(np.trunc(f), 0, coef.shape[0] - 1).astype(np.int64)
    i = np.where(f < 0.0, 0, i)
    d = x - (x0 + i / inv_h)
    c = coef[i]
    return c[:, 0] + d * (c[:, 1] + d * (c[:, 2] + d * c[:, 3]))


def orderstat_bounds(table: np.ndarray, e_min: int, e_max: int, cell_bits: int
                     ) -> tuple[np.ndarray, float] | None:
    """Cell-end values of the log-weight spline of an :func:`orderstat_table`, and their slack.

    The kernel (``brwsim.kernels.orderstat.orderstat_below``) bounds the spline at A by the
    values at the ends of A's cell, A in [2**e (1 + k / 2**cell_bits),
    2**e (1 + (k + 1) / 2**cell_bits)) for e in [e_min, e_max): valid when the spline is
    non-increasing in log A, which is checked here over the whole grid. The slack covers
    the rounding of log A (1 ulp, times the spline's largest slope over the cells'
    range) and of the spline's evaluation (ulps of its value), both by orders of
    magnitude: 1e-10 times the largest slope plus 1e-9 (1 + the largest |value|).

    Returns
    -------
    (values, slack) or None
        ``(e_max - e_min) * 2**cell_bits + 1`` values at the cell ends, in increasing A,
        and the slack; None when the spline is not non-increasing (no bounds then).
    """
    h = (X_MAX - X_MIN) / N_INTERVALS
    coef = np.asarray(table[:N_INTERVALS * 4], dtype=np.float64).reshape(-1, 4)
    if not _spline_non_increasing(coef, h):
        return None
    k = np.arange(((e_max - e_min) << cell_bits) + 1)
    ends = np.ldexp(1.0 + (k & ((1 << cell_bits) - 1)) / (1 << cell_bits), e_min + (k >> cell_bits))
    x = np.log(ends)
    values = _spline_at(coef, X_MIN, 1.0 / h, x)
    i0 = max(int((x[0] - X_MIN) / h) - 1, 0)
    i1 = min(int((x[-1] - X_MIN) / h) + 2, N_INTERVALS)
    c = coef[i0:i1]
    slope = np.max(np.abs(c[:, 1]) + 2.0 * h * np.abs(c[:, 2]) + 3.0 * h * h * np.abs(c[:, 3]))
    slack = 1e-10 * float(slope) + 1e-9 * (1.0 + float(np.max(np.abs(values))))
    return values, slack


def bound_weights(values: np.ndarray) -> np.ndarray:
    """The weights exp(v - values[0]) of :func:`orderstat_bounds`'s cell-end log-weights
    (non-increasing, so at most 1), 0 where below exp(-700): no subnormal weight, whose
    rounding would be large relative to it (0 bounds a weight from below, and the kernel
    gives no proof from a first rank whose bound is 0)."""
    rel = np.asarray(values, dtype=np.float64) - values[0]
    return np.where(rel > -700.0, np.exp(np.maximum(rel, -700.0)), 0.0)


def spline_starts_floors(coef: np.ndarray, x0: float, inv_h: float) -> tuple[np.ndarray, np.ndarray]:
    """Each interval's start and a lower bound of the spline on it, for a table lookup.

    ``coef`` is (n_int, 4) as :func:`_spline_coef` on the grid x0 + i / inv_h. The
    starts are the numbers :func:`brwsim.kernels.special.spline_eval` computes (x0 +
    i / inv_h, the same operations), so a kernel reading them instead of dividing gets
    the same bits. The floors bound c0 + d (c1 + d (c2 + d c3)) for |d| up to two grid
    steps (a clamped or rounded offset stays within that) by c0 - h (|c1| + h (|c2| +
    h |c3|)) with h twice the step, less 1e-9 (1 + |bound|) for rounding.
    """
    coef = np.asarray(coef, dtype=np.float64).reshape(-1, 4)
    starts = x0 + np.arange(coef.shape[0]) / inv_h
    h = 2.0 / inv_h
    c0, c1, c2, c3 = coef.T
    v = c0 - h * (np.abs(c1) + h * (np.abs(c2) + h * np.abs(c3)))
    return starts, v - 1e-9 * (1.0 + np.abs(v))


_NARROW = 1e-6     # ranges of exponents narrower than this: a Taylor polynomial, no spline


def zipf_norm_table(s_lo: float, s_hi: float, vocab: int, n_int: int = 1024) -> np.ndarray:
    """Spline of log sum_{i<=vocab} i**-s over s in [s_lo, s_hi] (relative error < 1e-12).

    A zero-width range gives one constant interval, and one narrower than ``_NARROW`` one
    interval of log Z's Taylor polynomial at s_lo (its terms beyond the square are below
    1e-16 there): the grid of a spline would repeat floating-point values.
    """
    if s_hi <= s_lo:
        c = math.log(zipf_sum(vocab, s_lo, 0))
        return np.array([[c, 0.0, 0.0, 0.0]])
    if s_hi - s_lo < _NARROW:
        z0, z1, z2 = (zipf_sum(vocab, s_lo, k) for k in range(3))
        m1 = z1 / z0
        return np.array([[math.log(z0), -m1, 0.5 * (z2 / z0 - m1 * m1), 0.0]])
    s = np.linspace(s_lo, s_hi, n_int + 1)
    return _spline_coef(s, np.log([zipf_sum(vocab, v, 0) for v in s]))
