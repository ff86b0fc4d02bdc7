"""Bounds of the entropy and of the second log-moment of a distribution known by its top-k.

For a position with stored probabilities ``p_1 >= ... >= p_k > 0``, tail mass ``r`` and
``q = p_k``, every token outside the stored ones has probability in ``[0, q]`` and these
probabilities sum to ``r``. With ``f(t) = -t log t`` and ``g(t) = t (log t)^2``,
``H = sum_i f(p_i) + sum_tail f(t)`` and ``mu2 = sum_i g(p_i) + sum_tail g(t)``; only the tail
sums are unknown. Let ``n = floor(r / q)``, ``rho = r - n q`` and ``m = vocab - k`` (the number
of tokens outside the stored ones; unbounded when ``vocab`` is None).

* Entropy, lower: ``n f(q) + f(rho)``. ``f`` is concave, so its sum over the polytope
  {0 <= t_j <= q, sum t_j = r} is smallest at a vertex: the tail as concentrated as allowed,
  ``n`` tokens of probability ``q`` and one remainder ``rho``. Exact (attained).
* Entropy, upper: ``r log(m / r)``, the tail spread evenly over the ``m`` tokens (Jensen; exact
  and attained). It requires ``r <= m q`` (else the position is inconsistent with ``vocab``)
  and is ``+inf`` when ``vocab`` is None and ``r > 0``: ``r log(m / r)`` grows without bound
  in ``m``.
* Second log-moment, lower: when ``q <= 1/e``, ``g`` is concave on [0, q] and the bound is the
  vertex value ``n g(q) + g(rho)`` (exact, attained). When ``q > 1/e`` (only possible for
  k <= 2), ``g(t) / t = (log t)^2`` decreases in t, so ``sum g(t) >= r (log q)^2``, a valid
  (attained when ``r / q`` is an integer) bound.
* Second log-moment, upper: ``m G(r / m)`` with ``G`` the least concave majorant of ``g`` on
  [0, q]. When ``q <= 1/e``, ``G = g`` and the bound is ``r (log(r / m))^2`` (exact, attained by
  the even spread). When ``q > 1/e``, ``g`` is concave on [0, 1/e] and convex beyond, ``G``
  follows ``g`` up to the point ``a`` where the tangent of ``g`` passes through ``(q, g(q))``
  and is that tangent line beyond; the bound is still ``r (log(r / m))^2`` when ``r / m <= a``.
  ``+inf`` when ``vocab`` is None and ``r > 0`` (``(log t)^2`` is unbounded as t -> 0).

When ``r = 0``, or ``m = 0`` (the stored entries are the whole vocabulary, so ``r`` is
rounding), both tail terms are 0. To absorb rounding, each upper bound is finally raised to
at least its lower bound.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import entr

__all__ = ["entropy_bounds"]

_INV_E = math.exp(-1.0)


def _g(t: np.ndarray) -> np.ndarray:
    """``g(t) = t (log t)^2`` elementwise, with ``g(0) = 0``."""
    t = np.asarray(t, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = t * np.log(t) ** 2
    return np.where(t > 0, out, 0.0)


def _tangent_point(q: float) -> float:
    """Point ``a`` in (0, 1/e] where the tangent of ``g`` passes through ``(q, g(q))``, q > 1/e."""
    gq = float(_g(np.array(q)))

    def gap(a: float) -> float:
        la = math.log(a)
        return a * la * la + la * (la + 2.0) * (q - a) - gq

    if gap(_INV_E) >= 0.0:  # q == 1/e up to rounding
        return _INV_E
    from scipy.optimize import brentq  # imported on use: 0.2 s at start-up

    return brentq(gap, 1e-300, _INV_E, xtol=1e-15, rtol=1e-12)


def _g_majorant(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Least concave majorant of ``g`` on [0, q], evaluated at ``x`` (0 <= x <= q)."""
    out = _g(x)
    for i in np.flatnonzero(q > _INV_E):
        a = _tangent_point(float(q[i]))
        if x[i] > a:
            ga, gq = float(_g(np.array(a))), float(_g(np.array(q[i])))
            out[i] = ga + (x[i] - a) * (gq - ga) / (q[i] - a)
    return out


def entropy_bounds(probs: np.ndarray, tail_mass: np.ndarray,
                   vocab: int | None = None) -> tuple[np.ndarray, np.ndarray,
                                                      np.ndarray, np.ndarray]:
    """Bounds of the entropy and of the second log-moment from top-k probabilities.

    The formulas and their proofs are in the docstring of :mod:`brwsim.bank.bounds`.

    Parameters
    ----------
    probs : numpy.ndarray
        Shape (positions, k): top probabilities sorted in descending order, zero padded;
        every row has at least one positive entry.
    tail_mass : numpy.ndarray
        Shape (positions,): probability outside the stored entries, in [0, 1].
    vocab : int, optional
        Vocabulary size. Without it the upper bounds are ``inf`` wherever the tail mass is
        positive.

    Returns
    -------
    entropy_lower, entropy_upper, mu2_lower, mu2_upper : numpy.ndarray
        Shape (positions,), in nats and nats squared.
    """
    p = np.asarray(probs, dtype=float)
    r = np.asarray(tail_mass, dtype=float)
    count = (p > 0).sum(axis=1)
    q = p[np.arange(p.shape[0]), np.maximum(count - 1, 0)]
    h_top = entr(p).sum(axis=1)
    m_top = _g(p).sum(axis=1)
    if vocab is not None:
        m = (int(vocab) - count).astype(float)
        r = np.where(m > 0, r, 0.0)
    else:
        m = np.full(r.shape, np.inf)
    n = np.floor(r / q)
    rho = np.clip(r - n * q, 0.0, None)
    h_lo = h_top + n * entr(q) + entr(rho)
    m_lo = m_top + np.where(q <= _INV_E, n * _g(q) + _g(rho), r * np.log(q) ** 2)
    if vocab is None:
        h_hi = np.where(r > 0, np.inf, h_top)
        m_hi = np.where(r > 0, np.inf, m_top)
    else:
        safe_m = np.where(m > 0, m, 1.0)
        x = np.minimum(r / safe_m, q)
        h_hi = h_top + safe_m * entr(x)
        m_hi = m_top + safe_m * _g_majorant(x, q)
    return h_lo, np.maximum(h_hi, h_lo), m_lo, np.maximum(m_hi, m_lo)
