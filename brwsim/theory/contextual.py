"""Proven bounds for context-dependent environments: the mean measure of a typed spine.

The Lagrangian bound ``E[X] <= min_t U(t) - e^{-t} M(t) + e^{-t} P`` of
:func:`brwsim.theory.upper_bound` holds for any environment; only the mean measure
``U(ds) = E[sum_{v != root} p(v) 1{S(v) in ds}]`` changes (``docs/theory.md``, Section 7).
Each context-dependent family describes its spine by one of these objects (its
``context_spine()`` hook), and :func:`context_values` turns it into the bound (and, where
the measure is exact, the renewal prediction) on a grid:

* :class:`RegimeSpine` (``markovregime``): a multi-type branching random walk. By the
  many-to-one lemma for several types, ``1 + U = pi^T (I - D T)^{-1} 1`` with
  ``D = diag(F_k)`` the regimes' spine laws and T the transition matrix, a K x K matrix
  power series inverted by Newton's iteration with FFT products.
* :class:`DepthSpine` (``depthdrift``): the level-d law differs per depth:
  ``U = sum_{n>=1} F_0 * ... * F_{n-1}``, the last law repeating (a renewal tail).
* :class:`DominatedSpine` (``correlatedentropy``): the spine's steps depend on a latent
  Markov chain, but every step is stochastically larger than one law G (the largest
  distribution function of the values' laws), so the i.i.d. renewal measure of G bounds
  the Lagrangian functional from above. A bound, not a prediction.

Every law is discretised *down* (the floor grid) for the bound, which can only raise the
functional, so the values are proven bounds up to float round-off and the sampling error
of sampled laws (reported as a standard error over the laws' replicates).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import fft as sp_fft

from brwsim.errors import UserError
from brwsim.theory.convolution import fft_convolve
from brwsim.theory.laws import SpineLaw
from brwsim.theory.renewal import fill_mean_measure, lagrangian_min

__all__ = ["NoTheory", "ContextSpine", "RegimeSpine", "DepthSpine", "DominatedSpine",
           "context_values"]

_T_LIMIT = 700.0          # e^t overflows float64 near 709
_MAX_GRID = 1 << 22


class NoTheory(UserError):
    """A theory value that does not exist for this family (the message says why).

    Raised for a context-dependent family without a proven bound, or a prediction asked of
    a spine known only through a dominating law. Datasets store NaN and the message as the
    variable's ``reason`` attribute; the CLI prints it on one line.
    """


class ContextSpine:
    """The spine of a context-dependent environment: component laws and how they chain.

    Attributes
    ----------
    laws : list of SpineLaw
        The spine-step laws the environment switches between.
    exact_measure : bool
        True when :meth:`density` is the environment's own mean measure (so the renewal
        prediction exists); False for a dominating measure (a bound only).
    what : str
        A short description of the measure, for the table and the dataset attributes.
    """

    exact_measure = True
    what = ""

    def __init__(self, laws: list[SpineLaw]) -> None:
        if not laws or not all(isinstance(law, SpineLaw) for law in laws):
            raise UserError("a context spine needs a non-empty list of spine-step laws")
        self.laws = list(laws)

    def density(self, laws: list[SpineLaw], h: float, size: int, mode: str) -> np.ndarray:
        """Masses ``u_j`` of U on the grid ``j h`` (root excluded) from the given laws."""
        raise NotImplementedError

    @property
    def min_mu(self) -> float:
        mus = [law.mu for law in self.laws if law.mu > 0 and math.isfinite(law.mu)]
        return min(mus) if mus else math.nan

    @property
    def grid_mu(self) -> float:
        """The mean step the default grid step is set from (``h = min(1e-3, grid_mu / 100)``);
        the smallest of the laws' unless the spine knows how often each law is used."""
        return self.min_mu


class RegimeSpine(ContextSpine):
    """A Markov regime along every path: node of regime i draws q from law i, and each
    child's regime is drawn from row i of ``transition``; the root's from ``initial``.

    Parameters
    ----------
    laws : list of SpineLaw
        Spine-step law of each regime's family.
    transition : (K, K) array_like
        Row-stochastic transition matrix (parent regime, child regime).
    initial : (K,) array_like
        The root's regime law.
    """

    what = "multi-type renewal measure of the regime chain"

    def __init__(self, laws, transition, initial) -> None:
        super().__init__(laws)
        k = len(self.laws)
        self.transition = np.asarray(transition, dtype=float)
        self.initial = np.asarray(initial, dtype=float).ravel()
        if self.transition.shape != (k, k) or self.initial.shape != (k,):
            raise UserError(f"a regime spine needs a {k}x{k} transition and {k} initial weights")

    @property
    def grid_mu(self) -> float:
        """The regimes' mean steps weighted by the root's regime law (the stationary law of
        a ``markovregime``), as the i.i.d. mixture of the same parts sets its grid.

        The floor grid gives a bound at any step; a near-deterministic regime (mean step
        near 0) would otherwise set a grid so fine that the bound takes minutes, while
        tightening it only by about ``h / (2 mu)`` relative.
        """
        mus = np.array([law.mu for law in self.laws])
        ok = (mus > 0) & np.isfinite(mus)
        w = self.initial[ok]
        if not ok.any() or not w.sum() > 0:
            return self.min_mu
        return float(w @ mus[ok] / w.sum())

    def density(self, laws, h, size, mode):
        f = np.stack([law.cells(h, size, mode) for law in laws])          # (K, N)
        g = -f[:, None, :] * self.transition[:, :, None]                   # -D T
        g[np.arange(len(laws)), np.arange(len(laws)), 0] += 1.0
        inv = _matrix_series_inverse(g)                                   # (I - D T)^{-1}
        u = np.einsum("i,ijn->n", self.initial, inv)
        u[0] -= 1.0
        return np.maximum(u, 0.0)


class DepthSpine(ContextSpine):
    """A law per depth below the root: nodes at depth d draw from ``laws[min(d, D - 1)]``."""

    what = "depth-inhomogeneous convolution of the per-depth laws"

    def density(self, laws, h, size, mode):
        u = np.zeros(size)
        prefix = np.zeros(size)
        prefix[0] = 1.0                                   # F_0 * ... * F_{n-1}, n = 0
        for law in laws[:-1]:
            prefix = np.maximum(fft_convolve(prefix, law.cells(h, size, mode))[:size], 0.0)
            u += prefix
        tail = _renewal_from(laws[-1].cells(h, size, mode))          # 1 + sum F_last^{*k}
        u += np.maximum(fft_convolve(prefix, tail)[:size], 0.0)
        u -= prefix                                        # the n = len(laws) - 1 term twice
        return np.maximum(u, 0.0)


class DominatedSpine(ContextSpine):
    """Steps that are, given any context, stochastically at least the law G whose
    distribution function is the largest of the ``laws``' (each normalised to mass 1).

    The renewal measure of G bounds the Lagrangian functional ``E[sum (p - lambda)^+]``
    from above (``docs/theory.md``, Section 7.3): a proven bound, not a prediction.
    """

    exact_measure = False
    what = "the renewal measure of the stochastically smallest step law"

    def density(self, laws, h, size, mode):
        # The largest distribution function: each law's is a step function that changes
        # only at its nonzero cells, so the largest at j is the largest value any law
        # reaches at a cell <= j (the same numbers as cumulative sums over the whole grid:
        # adding the zero cells changes no sum).
        where, value = [], []
        for law in laws:
            c = law.cells(h, size, mode)
            total = c.sum()
            if not total > 0:
                raise UserError("a dominated spine needs laws of positive mass")
            # normalised to mass 1 (only raises the functional); mass beyond the grid stays out
            m = law.mass if math.isfinite(law.mass) and law.mass >= total else total
            nz = np.flatnonzero(c)
            where.append(nz)
            value.append(np.cumsum(c[nz]) / m)
        top = np.zeros(size)
        np.maximum.at(top, np.concatenate(where), np.concatenate(value))
        cdf = np.minimum(np.maximum.accumulate(top), 1.0)
        f = np.diff(np.concatenate([[0.0], cdf]))
        return _renewal_from(f, root=False)


def _matrix_series_inverse(g: np.ndarray) -> np.ndarray:
    """First N coefficients of the inverse of a K x K matrix power series g (K, K, N).

    Newton's iteration ``X <- X (2 I - g X)`` doubles the correct coefficients each round;
    the products are FFT convolutions evaluated entry-wise in frequency space.
    """
    k, _, n = g.shape
    eye = np.eye(k)
    try:
        inv = np.linalg.inv(g[:, :, 0])[:, :, None]
    except np.linalg.LinAlgError:
        inv = np.full((k, k, 1), np.nan)
    if not np.isfinite(inv).all():
        raise NoTheory("a spine step is 0 with probability 1 in a closed set of contexts "
                       "(q = [1] there): those paths are chains and the renewal sum diverges")
    while inv.shape[2] < n:
        m = min(2 * inv.shape[2], n)
        size = sp_fft.next_fast_len(2 * m - 1, real=True)
        G = sp_fft.rfft(g[:, :, :m], size, axis=2)
        X = sp_fft.rfft(inv, size, axis=2)
        err = -sp_fft.irfft(np.einsum("ijw,jlw->ilw", G, X), size, axis=2)[:, :, :m]
        err[:, :, 0] += 2.0 * eye
        inv = sp_fft.irfft(np.einsum("ijw,jlw->ilw", X, sp_fft.rfft(err, size, axis=2)),
                           size, axis=2)[:, :, :m]
    return inv


def _renewal_from(f: np.ndarray, root: bool = True) -> np.ndarray:
    """``1 + sum_{k>=1} F^{*k}`` on the grid (without the leading 1 when ``root`` is False)."""
    if f[0] >= 1 - 1e-12:
        raise NoTheory("the spine step is 0 with probability 1 (q = [1]): every tree is a "
                       "chain (E[X] = P)")
    g = -f[None, None, :].copy()
    g[0, 0, 0] += 1.0
    u = _matrix_series_inverse(g)[0, 0]
    if not root:
        u[0] -= 1.0
    return np.maximum(u, 0.0)


def _grid_step(spine: ContextSpine, h: float | None) -> float:
    own = {law.grid_step for law in spine.laws if law.grid_step is not None}
    if len(own) > 1:
        raise NoTheory("its sampled component laws live on different grids "
                       f"({', '.join(f'{x:.4g}' for x in sorted(own))}): no common floor grid")
    if own:
        step = own.pop()
        if h is not None and abs(h - step) > 1e-12 * step:
            raise UserError(f"this family's sampled spine laws live on the grid step "
                            f"{step:.4g}; do not pass h")
        return step
    if h is None:
        mu = spine.grid_mu
        if mu < 1e-6:
            raise NoTheory(f"a component's mean step is {mu:.3g} nats (an entropy near 0: "
                           "its paths are nearly chains); the grid the bound needs is too fine")
        h = min(1e-3, mu / 100) if mu > 0 else 1e-3
    if not h > 0:
        raise UserError(f"grid step h must be > 0, got {h}")
    return float(h)


def _solve(spine: ContextSpine, laws, budget: float, h: float, mode: str):
    """Grid, masses of U and cumulative counts, the grid extended until counts reach budget."""
    t = max(math.log(max(budget, 1.0)) + 4.0, 8.0)
    while True:
        size = math.floor(t / h) + 2
        if size > _MAX_GRID:
            raise NoTheory(f"budget {budget:g} needs a grid of {size} points (t = {t:.4g}, "
                           f"h = {h:.3g})")
        s = np.arange(size) * h
        u = spine.density(laws, h, size, mode)
        counts = np.cumsum(np.exp(s) * u)
        if counts[-1] >= budget:
            return s, u, counts
        if t >= _T_LIMIT:
            raise NoTheory(f"budget {budget:g} needs a threshold beyond {_T_LIMIT:g} nats")
        t = min(2 * t, _T_LIMIT)


def context_values(spine: ContextSpine, budgets: np.ndarray, h: float | None = None,
                   mode: str = "floor") -> tuple[np.ndarray, np.ndarray]:
    """The proven bound (``mode="floor"``) or the prediction (``"split"``) per budget.

    Parameters
    ----------
    spine : ContextSpine
        The environment's spine (a family's ``context_spine()``).
    budgets : numpy.ndarray
        Budgets P >= 1 (validated by the caller).
    h : float, optional
        Grid step (default ``min(1e-3, mu / 100)``, mu the spine's ``grid_mu``: the
        smallest mean step of the laws, or for regimes their mean under the root's regime
        law; a sampled law's own step).
    mode : {"floor", "split"}
        ``"floor"``: the Lagrangian minimum on the floor grid, a proven upper bound.
        ``"split"``: the mean-measure fill (the renewal prediction), exact measures only.

    Returns
    -------
    value, se : numpy.ndarray
        Per budget; ``se`` is the standard deviation over the sampled laws' replicates
        divided by their square root (0 when every law is exact).

    Raises
    ------
    NoTheory
        For a prediction of a dominating measure, or a grid that cannot be built.
    """
    if mode == "split" and not spine.exact_measure:
        raise NoTheory(f"no renewal prediction: the theory knows only a dominating law "
                       f"({spine.what}), which bounds E[X] but does not predict it")
    flat = np.asarray(budgets, dtype=float).ravel()
    h = _grid_step(spine, h)
    read = fill_mean_measure if mode == "split" else lagrangian_min

    def value(laws):
        s, u, counts = _solve(spine, laws, float(flat.max()), h, mode)
        return read(s, u, counts, flat)[0]

    with np.errstate(over="ignore", under="ignore"):
        out = value(spine.laws)
        reps = [law.replicates() for law in spine.laws]
        n_rep = min((len(r) for r in reps if r), default=0)
        if n_rep < 2:
            return out.reshape(np.shape(budgets)), np.zeros(np.shape(budgets))
        vals = np.stack([value([r[b] if r else law for law, r in zip(spine.laws, reps)])
                         for b in range(n_rep)])
    se = vals.std(axis=0, ddof=1) / math.sqrt(n_rep)
    return out.reshape(np.shape(budgets)), se.reshape(np.shape(budgets))
