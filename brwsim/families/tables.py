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

__all__ = ["orderstat_table", "zipf_norm_table", "N_INTERVALS", "X_MIN", "X_MAX"]

N_INTERVALS = 4096
X_MIN = -60.0
X_MAX = 4.5


def _spline_coef(u: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(n_int, 4) coefficients c0..c3 of a not-a-knot cubic spline, ascending powers."""
    from scipy import interpolate  # imported on use: 0.13 s at start-up

    cs = interpolate.CubicSpline(u, y)
    return np.ascontiguousarray(cs.c[::-1].T)


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


def zipf_norm_table(s_lo: float, s_hi: float, vocab: int, n_int: int = 1024) -> np.ndarray:
    """Spline of log sum_{i<=vocab} i**-s over s in [s_lo, s_hi] (relative error < 1e-12).

    A zero-width range gives one constant interval.
    """
    if s_hi <= s_lo:
        c = math.log(zipf_sum(vocab, s_lo, 0))
        return np.array([[c, 0.0, 0.0, 0.0]])
    s = np.linspace(s_lo, s_hi, n_int + 1)
    return _spline_coef(s, np.log([zipf_sum(vocab, v, 0) for v in s]))
