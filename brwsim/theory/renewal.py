"""Renewal functions of a spine-step law on a grid, and the threshold fill they give.

``U(t) = sum_{n>=1} F^{*n}[0, t]`` and ``M(t) = int_0^t e^s U(ds)`` (the root not counted):
by the many-to-one lemma, M(t) is the mean number of non-root nodes with ``S(v) <= t``
and U(t) the mean of ``sum p(v)`` over them (``docs/theory.md``, Section 1). Here they are
solved on the grid ``j h`` by a power series inverse (FFT products), and read off for
budgets: the mean-measure fill (the prediction), the Lagrangian minimum over thresholds
(the proven bound, on the floor grid) and the key renewal asymptotic.
"""

from __future__ import annotations

import math

import numpy as np

from brwsim.errors import UserError
from brwsim.theory.convolution import fft_convolve
from brwsim.theory.laws import (
    X_CAP,
    SpineLaw,
)

__all__ = ["renewal_functions", "renewal_grid", "fill_mean_measure", "lagrangian_min",
           "renewal_asymptotic", "spine_steps"]

_STOCHASTIC_TOL = 1e-9  # total mass m >= 1 - this counts as m = 1
_T_LIMIT = 700.0  # e^t overflows float64 near 709
_MAX_GRID = 1 << 23


def spine_steps(family) -> SpineLaw:
    """The spine-step law of a family (a :class:`~brwsim.theory.laws.SpineLaw`).

    Parameters
    ----------
    family : Family or SpineLaw
        A law is returned as is; a family gives :meth:`~brwsim.families.Family.spine_law`,
        computed once per instance: exact (closed form, atoms or quadrature) where the
        family has such a law, else sampled inside numba (:class:`~brwsim.theory.sampled.SampledLaw`).

    Returns
    -------
    SpineLaw
    """
    if isinstance(family, SpineLaw):
        return family
    cached = getattr(family, "cached_spine_law", None)
    if not callable(cached):
        raise UserError(f"cannot get the spine-step law of {family!r}: not a brwsim family")
    return cached()



# --------------------------------------------------------------------------------------
# numerical renewal functions on a grid


def _grid_step(steps: SpineLaw, h: float | None) -> float:
    own = steps.grid_step
    if own is not None:
        if h is not None and abs(h - own) > 1e-12 * own:
            raise UserError(f"this sampled spine law lives on the grid step {own:.4g}; "
                            f"do not pass h")
        return own
    if steps.lattice_span is not None and h is None:
        return steps.lattice_span  # atoms sit on grid points: no discretisation error
    if h is None:
        h = min(1e-3, steps.mu / 100) if steps.mu > 0 else 1e-3
    if not h > 0:
        raise UserError(f"grid step h must be > 0, got {h}")
    return float(h)


def _series_inverse(g: np.ndarray) -> np.ndarray:
    """First len(g) coefficients of 1/g(z) by Newton iteration with FFT products."""
    inv = np.array([1.0 / g[0]])
    while inv.size < g.size:
        k = min(2 * inv.size, g.size)
        err = -fft_convolve(g[:k], inv)[:k]
        err[0] += 2.0
        inv = fft_convolve(inv, err)[:k]
    return inv


def _renewal_density(f: np.ndarray) -> np.ndarray:
    """Masses u_j of U = sum_{n>=1} F^{*n} on the grid: 1 + U = 1 / (1 - F)."""
    if f[0] >= 1 - 1e-12:
        raise UserError(
            "the spine step is 0 with probability 1 (q = [1]): E[X] = P, no renewal"
        )
    g = -f
    g[0] += 1.0
    u = _series_inverse(g)
    u[0] -= 1.0
    return np.maximum(u, 0.0)  # remove FFT round-off (~1e-17) below zero


def _threshold_guess(steps: SpineLaw, budget: float) -> float:
    if steps.mass >= 1 - _STOCHASTIC_TOL:
        return max(math.log(max(steps.mu * budget, 1.0)), 0.0) + 3.0
    try:
        theta, nu = steps.malthusian()
        return max(math.log(max(theta * nu * budget, 1.0)) / theta, 0.0) + 3.0
    except UserError:
        return _T_LIMIT


def _t_limit(steps: SpineLaw) -> float:
    return X_CAP if steps.grid_step is not None else _T_LIMIT


def renewal_grid(steps: SpineLaw, budget: float, h: float | None, mode: str = "split"):
    """Grid s, masses u of U and cumulative counts C, extended until C reaches budget."""
    h = _grid_step(steps, h)
    limit = _t_limit(steps)
    t = min(_threshold_guess(steps, budget), limit)
    while True:
        s = np.arange(_grid_size(t, h)) * h
        u = _renewal_density(steps.cells(h, s.size, mode))
        counts = np.cumsum(np.exp(s) * u)
        if counts[-1] >= budget:
            return s, u, counts
        if t >= limit:
            raise UserError(
                f"budget {budget:g} needs a threshold beyond {limit:g} nats"
            )
        t = min(2 * t, limit)


def _grid_size(t: float, h: float) -> int:
    size = math.floor(t / h * (1 + 1e-12)) + 2
    if size > _MAX_GRID:
        raise UserError(
            f"grid of {size} points (t = {t:.4g}, h = {h:.3g}): pass a larger h"
        )
    return size


def renewal_functions(steps, t_grid, h: float | None = None):
    """U and M of the spine-step law, evaluated at the thresholds ``t_grid``.

    Parameters
    ----------
    steps : SpineLaw or family
        The step law (a family is converted by :func:`spine_steps`).
    t_grid : array_like
        Thresholds t >= 0 (nats).
    h : float, optional
        Grid step; default ``min(1e-3, mu/100)``, or the lattice span for a lattice law.

    Returns
    -------
    U : numpy.ndarray
        ``sum_{n>=1} P(S_n <= t)`` (n = 0, the root, not counted): E[X] for the threshold
        tree ``{v != root: S(v) <= t}``.
    M : numpy.ndarray
        ``int_0^t e^s U(ds)``: the mean number of non-root nodes with ``S(v) <= t``.

    Notes
    -----
    Computed by solving ``1 + U = 1 / (1 - F)`` as a power series on the grid ``j*h`` (Newton
    iteration, FFT products). Exact step functions on a lattice law (default h); otherwise
    the mass at grid point j is spread over its cell and interpolated linearly, which is
    accurate to O(h^2) where U has a density and smears atoms of U over one cell.
    """
    steps = spine_steps(steps)
    t = np.asarray(t_grid, dtype=float)
    if np.isnan(t).any() or (t < 0).any() or (t > _t_limit(steps)).any():
        raise UserError(f"renewal_functions: thresholds must be in [0, {_t_limit(steps):g}]")
    hh = _grid_step(steps, h)
    s = np.arange(_grid_size(t.max(initial=0.0), hh)) * hh
    u = _renewal_density(steps.cells(hh, s.size, "split"))
    cum_u, cum_m = np.cumsum(u), np.cumsum(np.exp(s) * u)
    if steps.lattice_span is not None and hh == steps.lattice_span:
        # atoms on grid points: exact right-continuous step functions
        idx = np.floor(t / hh * (1 + 1e-12)).astype(np.int64)
        return cum_u[idx], cum_m[idx]
    knots = np.concatenate([[-hh / 2], s + hh / 2])  # grid mass j spread over its cell
    return (
        np.interp(t, knots, np.concatenate([[0.0], cum_u])),
        np.interp(t, knots, np.concatenate([[0.0], cum_m])),
    )


# --------------------------------------------------------------------------------------
# predictions


def fill_mean_measure(s: np.ndarray, u: np.ndarray, counts: np.ndarray, budgets: np.ndarray):
    """The mean-measure fill on a solved grid: values, last full grid index and its rate point.

    Nodes at grid points ``0 .. j - 1`` are taken whole and the rest of the budget at
    ``s_j``: the value is ``cum_u[j-1] + (P - counts[j-1]) e^{-s_j}``.
    """
    cum_u = np.cumsum(u)
    j = np.searchsorted(counts, budgets, side="left")  # first point reaching P
    prev_c = np.where(j > 0, counts[j - 1], 0.0)
    prev_u = np.where(j > 0, cum_u[j - 1], 0.0)
    return prev_u + (budgets - prev_c) * np.exp(-s[j]), j - 1, s[j]


def lagrangian_min(s: np.ndarray, u: np.ndarray, counts: np.ndarray, budgets: np.ndarray):
    """min over t of U(t) + e^{-t} (P - M(t)) on a solved (floor) grid, exact lattice sums.

    On ``[s_j, s_j + h)`` the bound is ``cum_u_j + e^{-t} gap_j`` with ``gap_j = P - M_j``: its
    infimum is at the right end when ``gap_j >= 0`` and at ``s_j`` otherwise. Returns the
    values, the minimising index and the minimising t (t < 0 gives the trivial bound P).
    """
    hh = s[1] - s[0] if s.size > 1 else 1.0
    cum_u = np.cumsum(u)
    out, idx, at = np.empty(budgets.size), np.empty(budgets.size, np.int64), np.empty(budgets.size)
    for k, P in enumerate(budgets):
        gap = P - counts
        t = np.where(gap >= 0, s + hh, s)
        val = cum_u + np.exp(-t) * gap
        j = int(np.argmin(val))
        if val[j] < P:
            out[k], idx[k], at[k] = val[j], j, t[j]
        else:
            out[k], idx[k], at[k] = P, -1, 0.0
    return out, idx, at


def renewal_asymptotic(steps: SpineLaw, budgets: np.ndarray, moments=None) -> np.ndarray:
    if steps.lattice_span is not None:
        raise UserError(
            f"the renewal asymptotic does not apply to a lattice step law (span "
            f"{steps.lattice_span:.6g} nats): E[X] oscillates in log P; use "
            f"method='numerical', which is exact for deterministic lattice families"
        )
    m = steps.mass
    if m >= 1 - _STOCHASTIC_TOL:
        mu, mu2 = (
            (moments.mu, moments.mu2) if moments is not None else (steps.mu, steps.mu2)
        )
        if not (mu > 0 and math.isfinite(mu) and math.isfinite(mu2)):
            raise UserError(f"the renewal asymptotic needs a finite mean step > 0, got {mu!r}")
        return np.log(mu * budgets) / mu + mu2 / (2 * mu**2) - 1
    theta, nu = steps.malthusian()
    return m / (1 - m) - (theta * nu * budgets) ** (-(1 - theta) / theta) / (
        (1 - theta) * nu
    )


