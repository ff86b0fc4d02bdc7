"""Closed-form Beta spine-step laws: Dirichlet's and Peaked's top mass, plain and tempered.

A symmetric Dirichlet's size-biased coordinate is Beta(alpha + 1, (K - 1) alpha), and
Peaked's top-1 mass is Beta(a, b); tempering keeps the shape through the log-odds
(``docs/theory.md``, Section 2b). The laws are :class:`~brwsim.theory.laws.CdfLaw`
objects built from incomplete beta functions and Gauss rules per grid cell.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import numpy as np
from scipy import special

from brwsim.errors import UserError
from brwsim.theory.laws import CdfLaw

__all__ = ["beta_logit_expect", "beta_step_law", "log_sigmoids", "tempered_beta_law"]

_BLOCK = 16                          # grid cells per exactly evaluated Beta tail point
_GAUSS2 = (0.5 - 0.5 / math.sqrt(3.0), 0.5 + 0.5 / math.sqrt(3.0))
_NEAR = 256                          # cells near y = 0 whose e^-y mean takes 8 Gauss points


def _gauss01(n: int) -> tuple[np.ndarray, np.ndarray]:
    t, w = np.polynomial.legendre.leggauss(n)
    return (t + 1.0) / 2.0, w / 2.0


_GL2, _GL8 = (np.array(_GAUSS2), np.array([0.5, 0.5])), _gauss01(8)   # (nodes, weights) on [0, 1]


def _log_tail(a: float, b: float, x: np.ndarray) -> np.ndarray:
    """``log P(-log B < x)`` is not needed; this is the log density of ``-log B`` at x > 0."""
    return -a * x + (b - 1.0) * np.log(-np.expm1(-x)) - special.betaln(a, b)


def log_sigmoids(z: float | np.ndarray) -> tuple:
    """``(log sigma(z), log sigma(-z))``, ``sigma(z) = 1 / (1 + e^-z)``, without overflow:
    the log-odds ``z`` of a mass m gives ``(log m, log(1 - m))``."""
    return -np.logaddexp(0.0, -z), -np.logaddexp(0.0, z)


def _odds_threshold(x: np.ndarray, beta: float, log_c: float) -> tuple[np.ndarray, np.ndarray]:
    """``log m`` and ``log(1 - m)`` of the m where ``log(1 + c (m / (1 - m))^-beta) = x``.

    ``Y = log(1 + c U^-beta)`` with ``U = B / (1 - B)`` decreases in B, so ``Y < x`` is
    ``B > m(x)``; for ``beta = 1, c = 1``, ``Y = -log B`` and ``m = e^-x``.
    """
    with np.errstate(divide="ignore"):
        log_odds = (log_c - np.log(np.expm1(x))) / beta
    return log_sigmoids(log_odds)


def _log_density(a: float, b: float, y: np.ndarray, beta: float, log_c: float) -> np.ndarray:
    """Log density of ``Y = log(1 + c U^-beta)`` at y > 0 (``_log_tail`` when beta = c = 1).

    With ``m(y)`` from :func:`_odds_threshold`, ``|dm/dy| = m (1 - m) / (beta (1 - e^-y))``.
    """
    if beta == 1.0 and log_c == 0.0:
        return _log_tail(a, b, y)
    log_m, log_1m = _odds_threshold(y, beta, log_c)
    return (a * log_m + b * log_1m - special.betaln(a, b) - math.log(beta)
            - np.log(-np.expm1(-y)))


def _beta_step_cdf(a: float, b: float, x: np.ndarray, beta: float = 1.0,
                   log_c: float = 0.0) -> np.ndarray:
    """``P(Y < x)`` for ``Y = log(1 + c (B / (1 - B))^-beta)``, B ~ Beta(a, b), on the uniform
    grid ``x = j h``; ``Y = -log B`` for ``beta = c = 1``.

    ``P(Y < x) = P(B > m(x))`` (``scipy.special.betaincc``) is evaluated exactly at every
    point of the first block and at every ``_BLOCK``-th point after it; inside a block its
    exact mass is shared among the cells in proportion to two-point Gauss quadratures of
    the density (``tests/unit/test_spine_laws.py``: relative error below 1e-7 against
    ``betaincc`` at every point). This is 10x faster than ``betaincc`` at every point,
    which costs 2-4 microseconds per call.
    """
    plain = beta == 1.0 and log_c == 0.0

    def exact(xs):
        return special.betaincc(a, b, np.exp(-xs) if plain else
                                np.exp(_odds_threshold(xs, beta, log_c)[0]))

    n = x.size
    if n <= 2 * _BLOCK:
        return exact(x)
    h = x[1] - x[0]
    out = np.empty(n)
    out[:_BLOCK + 1] = exact(x[:_BLOCK + 1])
    knots = np.arange(_BLOCK, n, _BLOCK)
    if knots[-1] != n - 1:
        knots = np.append(knots, n - 1)
    at_knots = exact(x[knots])
    left = x[_BLOCK:-1]                                   # cell starts after the first block
    dens = sum(np.exp(_log_density(a, b, left + g * h, beta, log_c)) for g in _GAUSS2) * (h / 2)
    block = (np.arange(left.size)) // _BLOCK              # block index of each cell
    block = np.minimum(block, knots.size - 2)
    totals = np.bincount(block, weights=dens, minlength=knots.size - 1)
    share = np.where(totals[block] > 0, dens / np.where(totals[block] > 0, totals[block], 1.0),
                     0.0)
    mass = np.diff(at_knots)[block] * share
    out[_BLOCK + 1:] = at_knots[0] + np.concatenate([[0.0], np.cumsum(mass)])[1:][:n - _BLOCK - 1]
    # pin every knot to its exact value (the cumulative sum of shares reproduces them)
    out[knots] = at_knots
    return out


def beta_step_law(a: float, b: float, count_a: float, count_b: float, scale: float,
                  tokens: float, mu: float, mu2: float) -> CdfLaw:
    """The law of ``-log B``, ``B ~ Beta(a, b)``, with mass ``scale``.

    Its count measure ``e^x F(dx)`` is ``tokens`` times the law of ``-log B'``,
    ``B' ~ Beta(count_a, count_b)``. Used for the size-biased component of a symmetric
    Dirichlet (``q_I ~ Beta(alpha + 1, (K - 1) alpha)``, ``K`` tokens each
    ``Beta(alpha, (K - 1) alpha)``) and for Peaked's top-1 mass. Cumulative values come
    from :func:`_beta_step_cdf` (exact ``betaincc`` at every 16th grid point).
    """
    def cum(pa, pb, factor):
        cache: dict = {}

        def f(x):
            key = (x.size, float(x[-1]))
            if key not in cache:
                cache.clear()
                cache[key] = factor * _beta_step_cdf(pa, pb, x)
            return cache[key]
        return f

    return CdfLaw(cum(a, b, scale), cum(count_a, count_b, tokens), scale, mu, mu2)


def tempered_beta_law(a: float, b: float, beta: float, log_c: float) -> CdfLaw:
    """The law of ``Y = log(1 + c U^-beta)`` weighted by ``e^-Y``, ``U = B / (1 - B)``,
    B ~ Beta(a, b): a Beta top-1 mass tempered at ``beta = 1 / T``.

    A token of mass B beside a rest of mass 1 - B whose own tempered weights sum to ``c``
    relative to ``(1 - B)^beta`` has tempered mass ``r = B^beta / (B^beta + c (1 - B)^beta)
    = e^-Y``; its spine step is Y with weight r, and its count measure ``e^y F(dy)`` is the
    law of Y itself (:func:`_beta_step_cdf`). With ``beta = c = 1`` this is
    ``beta_step_law(a + 1, b, a, b, a / (a + b), 1, ...)``. The rest, ``-log(1 - r)`` with
    weight ``1 - r``, is this law at ``(b, a, beta, -log_c)``.

    A cell's mass is its count times the cell's mean of ``e^-y`` under the density
    (Gauss-Legendre: 8 points in the 256 cells nearest y = 0, where the density may be
    singular, 2 beyond); the first cell's is ``P(Y < h) - E[1 - r; Y < h]``, the second
    term by quadrature over the log-odds (:func:`beta_logit_expect`). Cumulative masses
    are within 1e-7 relative of direct quadrature, and at ``beta = c = 1`` within 3e-9 of
    the exact Beta law (``tests/unit/test_spine_laws.py``).
    ``mu`` and ``mu2`` are not known separately (NaN); the family gives the whole law's.
    """
    if not (a > 0 and b > 0 and 0 < beta < math.inf and math.isfinite(log_c)):
        raise UserError(f"tempered_beta_law needs a, b, beta > 0 and a finite log c, got "
                        f"{(a, b, beta, log_c)}")
    mean = _tempered_beta_mean(a, b, beta, log_c)
    cache: dict = {}

    def both(x):
        key = (x.size, float(x[-1]))
        if key not in cache:
            count = _beta_step_cdf(a, b, x, beta, log_c)
            ratio = np.concatenate([_cell_mean_exp(a, b, beta, log_c, x[1:_NEAR + 1], _GL8),
                                    _cell_mean_exp(a, b, beta, log_c, x[_NEAR + 1:-1], _GL2)])
            cells = np.empty(x.size - 1)
            cells[0] = count[1] - _tempered_beta_rest(a, b, beta, log_c, float(x[1]))
            cells[1:] = np.diff(count)[1:] * ratio
            mass = np.concatenate([[0.0], np.cumsum(np.maximum(cells, 0.0))])
            cache.clear()
            cache[key] = (mass, count)
        return cache[key]

    return CdfLaw(lambda x: both(x)[0], lambda x: both(x)[1], mean, math.nan, math.nan)


def _cell_mean_exp(a: float, b: float, beta: float, log_c: float, left: np.ndarray,
                   nodes: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Mean of ``e^-y`` under the density of Y over each cell ``[left, left + h)``
    (Gauss-Legendre ``nodes`` on [0, 1]); the cell midpoint where the density is 0."""
    if left.size == 0:
        return left
    h = left[1] - left[0] if left.size > 1 else 1.0
    t, w = nodes
    y = left[:, None] + t[None, :] * h
    g = np.exp(_log_density(a, b, y, beta, log_c)) * w
    den = g.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (g * np.exp(-y)).sum(axis=1) / den, np.exp(-(left + h / 2)))


def beta_logit_expect(a: float, b: float, f: Callable[[float], float],
                      lower: float = -math.inf, upper: float = math.inf) -> float:
    """``E[f(L); lower < L < upper]`` for the log-odds ``L = log(B / (1 - B))``, B ~ Beta(a, b).

    In L the Beta law has the smooth density ``sigma(L)^a sigma(-L)^b / B(a, b)`` with
    exponential tails, and a tempered top-1 mass ``r = sigma(beta L - log c)`` is smooth
    too, so adaptive quadrature (``scipy.integrate.quad``) converges without the endpoint
    powers that make it stall in B. Relative error below 1e-10 in the tests.

    Raises
    ------
    ArithmeticError
        If the quadrature does not converge (degenerate parameters in float64).
    """
    from scipy import integrate

    lb = float(special.betaln(a, b))

    def g(L):
        log_s, log_1s = log_sigmoids(L)
        log_w = a * log_s + b * log_1s - lb
        return f(L) * math.exp(log_w) if log_w > -745.0 else 0.0

    with warnings.catch_warnings():
        warnings.simplefilter("error", integrate.IntegrationWarning)
        try:
            val, _ = integrate.quad(g, lower, upper, epsabs=1e-15, epsrel=1e-11, limit=400)
        except integrate.IntegrationWarning as exc:
            raise ArithmeticError(f"quadrature over the Beta({a:g}, {b:g}) log-odds did not "
                                  f"converge: {str(exc).splitlines()[0]}") from None
    return float(val)


def _tempered_beta_rest(a: float, b: float, beta: float, log_c: float, x: float) -> float:
    """``E[1 - r; Y < x]`` of :func:`tempered_beta_law`: ``Y < x`` is ``L > log odds m(x)``."""
    lower = (log_c - math.log(math.expm1(x))) / beta
    return beta_logit_expect(a, b, lambda L: math.exp(log_sigmoids(log_c - beta * L)[0]), lower)


def _tempered_beta_mean(a: float, b: float, beta: float, log_c: float) -> float:
    """``E[r]``, ``r = sigma(beta L - log c)``: the total mass of :func:`tempered_beta_law`."""
    return beta_logit_expect(a, b, lambda L: math.exp(log_sigmoids(beta * L - log_c)[0]))
