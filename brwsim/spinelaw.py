"""Spine-step laws: the law F of one step ``-log q_I`` (``I ~ q``) of a family, on a grid.

Every renewal quantity of :mod:`brwsim.theory` depends on a family only through F, a
measure of total mass ``m = E[sum q] <= 1`` with first moment ``mu = E[H(q)]`` and second
moment ``mu2 = E[sum q (log q)^2]``. Each family builds its own law from the pieces here
(:meth:`brwsim.families.Family.spine_law`):

* :class:`SpineSteps`: weighted atoms (Uniform, Fixed, Geometric, Empirical, n-grams, ...).
* :class:`CdfLaw`: a law given by two cumulative functions, the mass ``F(x)`` and the
  expected token count ``N(x) = E[#{i: -log q_i < x}] = int_{[0, x)} e^y F(dy)``: the
  Beta laws of Dirichlet and Peaked, fixed-exponent Zipf laws without listing 10^5 atoms.
* :class:`SumLaw`: weighted sums (mixtures, quadrature over a Zipf exponent).
* :class:`ConvolvedLaw`: the law of a sum of two independent steps (Peaked's Zipf part).
* :class:`SampledLaw`: a Monte Carlo law drawn inside numba with the family's own
  kernels, in independent batches, so a prediction carries its standard error.

A law is used only through :meth:`SpineLaw.cells`, its masses on the grid ``j h``, in one
of two discretisations: ``"split"`` (mass and count mass ``w e^x`` preserved: the
prediction) or ``"floor"`` (every atom moved down to its grid point: the proven upper
bound, see ``docs/theory.md``). Exact laws are exact up to float round-off and the stated
quadrature error of their constructor.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy import special

from brwsim.convolution import fft_convolve
from brwsim.keys import seed_key
from brwsim.errors import UserError
from brwsim.kernels.dist import LEVEL_F, LEVEL_I, ORDERSTAT, OS_LOGW
from brwsim.kernels.special import spline_eval, zipf_sum
from brwsim.kernels.spine import (
    FLOOR,
    SPLIT,
    SWITCH_RATIO,
    SWITCH_RHO,
    TABLE_STEP,
    _os_tables,
    _sample_cells,
    _zipf_cdfs,
)

__all__ = [
    "MAX_EXACT_ATOMS",
    "MODES",
    "X_CAP",
    "BatchedAtoms",
    "CdfLaw",
    "ConvolvedLaw",
    "Moments",
    "SampledLaw",
    "SpineLaw",
    "SpineSteps",
    "SumLaw",
    "ZipfLaw",
    "beta_logit_expect",
    "log_sigmoids",
    "beta_step_law",
    "tempered_beta_law",
    "geometric_atom_count",
    "mixture_law",
    "sampled_law",
    "zipf_spread_law",
]

MODES = {"split": SPLIT, "floor": FLOOR}
#: Exact atom lists longer than this are replaced by closed-form or sampled laws.
MAX_EXACT_ATOMS = 4_000_000
#: Steps beyond this many nats are never below a threshold (budgets <= 2**26 need < 30).
X_CAP = 64.0
_STOCHASTIC_TOL = 1e-9


@dataclass(frozen=True)
class Moments:
    """Spine-step moments of a family (natural logarithms).

    Attributes
    ----------
    mu, mu2 : float
        E[H(q)] and E[sum_i q_i (log q_i)**2].
    mu_se, mu2_se : float
        Their standard errors (0 when exact).
    h2, h2_se : float
        E[H(q)**2] and its standard error: the other reading of the paper's "second
        moment" (docs/design.md, section 1).
    exact : bool
        True when computed in closed form or by quadrature (error below 1e-9).
    """

    mu: float
    mu2: float
    mu_se: float = 0.0
    mu2_se: float = 0.0
    h2: float = math.nan
    h2_se: float = 0.0
    exact: bool = True


def geometric_atom_count(r: float) -> int:
    """Atoms of the exact Geometric(r) spine-step law: ranks until r**count < 1e-16."""
    return max(1, math.ceil(math.log(1e-16) / math.log(r)))


def _mode(mode: str) -> int:
    if mode not in MODES:
        raise UserError(f"discretisation mode must be 'split' or 'floor', got {mode!r}")
    return MODES[mode]


class SpineLaw:
    """Base class of spine-step laws.

    Attributes
    ----------
    exact : bool
        False for a Monte Carlo law (:class:`SampledLaw`).
    lattice_span : float or None
        The span h of a lattice law (all atoms in ``h Z``), else None.
    """

    exact: bool = True
    lattice_span: float | None = None

    _mass: float = math.nan
    _mu: float = math.nan
    _mu2: float = math.nan

    @property
    def mass(self) -> float:
        """Total mass ``m = E[sum q]``."""
        return self._mass

    @property
    def mu(self) -> float:
        """First moment ``E[H(q)]`` (nats)."""
        return self._mu

    @property
    def mu2(self) -> float:
        """Second moment ``E[sum q (log q)^2]`` (nats^2)."""
        return self._mu2

    @property
    def grid_step(self) -> float | None:
        """A grid step this law needs (sampled laws are deposited on one), else None."""
        return None

    def cells(self, h: float, size: int, mode: str = "split") -> np.ndarray:
        """Masses of F on the grid points ``j h``, ``j < size``, discretised by ``mode``."""
        raise NotImplementedError

    def replicates(self) -> list[SpineLaw]:
        """Independent equal-size parts of a sampled law (empty for an exact law)."""
        return []

    def log_laplace(self, theta: float) -> float:
        """``log E[sum q^theta] = log int e^{(1 - theta) x} F(dx)``, for ``0 < theta <= 1``.

        The default integrates the floor and split discretisations on a fine grid; atoms
        override it with the exact sum.
        """
        h = 1e-3
        size = int(X_CAP / h)
        f = 0.5 * (self.cells(h, size, "split") + self.cells(h, size, "floor"))
        x = np.arange(size) * h
        return float(math.log(np.sum(f * np.exp((1 - theta) * x))))

    def malthusian(self) -> tuple[float, float]:
        """Malthusian parameter and the mean step of the tilted walk.

        Returns
        -------
        theta : float
            The root of ``E[sum q^theta] = 1`` in (0, 1]; 1 when ``m = 1``.
        nu : float
            ``E[sum q^theta (-log q)]``, the mean of the tilted probability law; ``mu``
            when ``m = 1``.

        Raises
        ------
        brwsim.errors.UserError
            If no such theta exists (at most one child on average, e.g. a single path).
        """
        if self.mass >= 1 - _STOCHASTIC_TOL:
            return 1.0, self.mu
        from scipy import optimize

        if self.log_laplace(1e-12) <= 0:
            raise UserError("no Malthusian parameter: the mean number of children "
                            "E[#{q_i > 0}] is <= 1")
        theta = optimize.brentq(self.log_laplace, 1e-12, 1.0, xtol=1e-14, rtol=1e-14)
        d = 1e-6 * min(theta, 1 - theta, 1e-2) or 1e-9
        nu = -(self.log_laplace(theta + d) - self.log_laplace(theta - d)) / (2 * d)
        return float(theta), float(nu)


class SpineSteps(SpineLaw):
    """A spine-step law given by weighted atoms.

    Parameters
    ----------
    values : array_like
        Step sizes ``-log q_i`` (nats, >= 0).
    weights : array_like
        Their masses, >= 0; the total is ``m = E[sum q] <= 1``.
    exact : bool
        True when the atoms are the exact law.
    lattice_span : float or None
        The largest ``h`` with every value in ``h * Z`` (None for non-lattice laws);
        :meth:`atoms` detects it.

    Notes
    -----
    Lattice means the *support of the step law* lies in ``h * Z``. Uniform(k) (one atom,
    ``log k``) is a lattice law; Geometric(r) (atoms ``-log(1-r) - i log r``) is one only when
    ``log(1-r) / log(r)`` is rational (e.g. r = 1/2, span log 2).
    """

    def __init__(self, values, weights, exact: bool = True,
                 lattice_span: float | None = None) -> None:
        v = np.asarray(values, dtype=float).ravel()
        w = np.asarray(weights, dtype=float).ravel()
        if v.shape != w.shape:
            raise UserError("SpineSteps: values and weights must have the same length")
        if not (np.isfinite(w).all() and (w >= 0).all()):
            raise UserError("SpineSteps: weights must be finite and >= 0")
        keep = w > 0
        v, w = v[keep], w[keep]
        if v.size == 0:
            raise UserError("SpineSteps: no atom with positive weight")
        if not (np.isfinite(v).all() and (v >= 0).all()):
            raise UserError("SpineSteps: values (-log q) must be finite and >= 0")
        if w.sum() > 1 + 1e-9:
            raise UserError(f"SpineSteps: total mass {w.sum():.12g} exceeds 1 (sum q <= 1)")
        self.values = v
        self.weights = w
        self.exact = exact
        self.lattice_span = lattice_span

    @classmethod
    def atoms(cls, values, weights) -> SpineSteps:
        """Exact atoms: merge equal values and detect a lattice."""
        v = np.asarray(values, dtype=float).ravel()
        w = np.asarray(weights, dtype=float).ravel()
        keep = (w > 0) & np.isfinite(v)
        uniq, inv = np.unique(v[keep], return_inverse=True)
        merged = np.bincount(inv, weights=w[keep], minlength=uniq.size)
        return cls(uniq, merged, exact=True, lattice_span=_lattice_span(uniq))

    @property
    def mass(self) -> float:
        return float(self.weights.sum())

    @property
    def mu(self) -> float:
        return float(self.weights @ self.values)

    @property
    def mu2(self) -> float:
        return float(self.weights @ self.values ** 2)

    def log_laplace(self, theta: float) -> float:
        v, w = self.values, self.weights
        shift = v.max()        # log space: the count weights w e^v can be huge
        return float(math.log(np.sum(w * np.exp((1 - theta) * (v - shift))))
                     + (1 - theta) * shift)

    def cells(self, h: float, size: int, mode: str = "split") -> np.ndarray:
        """Masses on the grid ``j h``.

        An atom exactly on a grid point (within 1e-9 relative; lattice laws) stays there in
        both modes. Otherwise ``"split"`` divides an atom at x in ``(a, a + h)`` between a
        and a + h so that its mass and count mass ``w e^x`` are preserved (the mean is then
        off by at most ``h^2 / 8`` per atom) and ``"floor"`` moves it to a.
        """
        m = _mode(mode)
        x = self.values / h
        j = np.rint(x)
        on_grid = np.abs(x - j) <= 1e-9 * np.maximum(x, 1.0)
        j = np.where(on_grid, j, np.floor(x))
        if m == FLOOR:
            upper = np.zeros_like(x)
        else:
            upper = np.where(on_grid, 0.0, np.expm1((x - j) * h) / math.expm1(h))
        j = j.astype(np.int64)
        keep = j < size
        f = np.bincount(j[keep], weights=self.weights[keep] * (1 - upper[keep]),
                        minlength=size + 1)
        f += np.bincount(j[keep] + 1, weights=self.weights[keep] * upper[keep],
                         minlength=size + 1)
        return f[:size]


class BatchedAtoms(SpineLaw):
    """A Monte Carlo law given as atoms in independent batches (each a whole law).

    The pooled law is the mean of the batches; :meth:`replicates` returns the batches, so a
    prediction from it carries its standard error. Used by families whose distributions
    are too costly for :class:`SampledLaw` (``charlstm``: 40 LSTM steps per root).
    """

    exact = False

    def __init__(self, batches: list[SpineSteps]) -> None:
        if len(batches) < 2:
            raise UserError("BatchedAtoms needs at least two batches")
        self.batches = batches
        n = len(batches)
        self.pooled = SpineSteps(np.concatenate([b.values for b in batches]),
                                 np.concatenate([b.weights for b in batches]) / n, exact=False)
        self._mass, self._mu, self._mu2 = self.pooled.mass, self.pooled.mu, self.pooled.mu2

    def cells(self, h: float, size: int, mode: str = "split") -> np.ndarray:
        return self.pooled.cells(h, size, mode)

    def log_laplace(self, theta: float) -> float:
        return self.pooled.log_laplace(theta)

    def replicates(self) -> list[SpineLaw]:
        return list(self.batches)


def _lattice_span(values: np.ndarray, max_den: int = 100, rtol: float = 1e-10) -> float | None:
    """Largest h with every positive value an integer multiple of h, or None."""
    v = np.unique(values[values > 0])
    if v.size == 0:
        return None
    v0, den = v[0], 1
    for ratio in v[1:] / v0:
        frac = Fraction(float(ratio)).limit_denominator(max_den)
        if abs(frac - ratio) > rtol * ratio:
            return None
        den = math.lcm(den, frac.denominator)
        if den > max_den:
            return None
    mult = np.rint(v * den / v0).astype(np.int64)
    return float(v0 * np.gcd.reduce(mult) / den)


def _cells_from_cdfs(mass: np.ndarray, count: np.ndarray, h: float, mode: int) -> np.ndarray:
    """Grid masses from a law's cumulative mass and count at the points ``j h`` (size + 1)."""
    a = np.diff(mass)
    if mode == FLOOR:
        return np.maximum(a, 0.0)
    c = np.diff(count)
    s = np.arange(a.size) * h
    with np.errstate(divide="ignore", invalid="ignore"):
        # the cell's conditional mean of e^x is e^{jh} (1 + upper expm1(h))
        upper = np.where(a > 0, (c * np.exp(-s) / a - 1.0) / math.expm1(h), 0.0)
    upper = np.clip(np.nan_to_num(upper), 0.0, 1.0)
    a = np.maximum(a, 0.0)
    f = a * (1 - upper)
    f[1:] += (a * upper)[:-1]
    return f


class CdfLaw(SpineLaw):
    """A law given by its cumulative mass and expected token count below x.

    Parameters
    ----------
    mass_cdf : callable
        ``x -> F([0, x))`` (vectorised over a numpy array of x >= 0).
    count_cdf : callable
        ``x -> E[#{i: -log q_i < x}] = int_{[0, x)} e^y F(dy)``.
    mass, mu, mu2 : float
        Total mass and the two moments, in closed form.

    Notes
    -----
    The cells are exact: a cell's mass and count mass are differences of the two
    functions, and the split between its end points that preserves both is the same as
    splitting each atom of the cell (both constraints are linear).
    """

    def __init__(self, mass_cdf: Callable[[np.ndarray], np.ndarray],
                 count_cdf: Callable[[np.ndarray], np.ndarray], mass: float, mu: float,
                 mu2: float) -> None:
        self._mass_cdf, self._count_cdf = mass_cdf, count_cdf
        self._mass, self._mu, self._mu2 = float(mass), float(mu), float(mu2)

    def cells(self, h: float, size: int, mode: str = "split") -> np.ndarray:
        x = np.arange(size + 1) * h
        return _cells_from_cdfs(self._mass_cdf(x), self._count_cdf(x), h, _mode(mode))


class SumLaw(SpineLaw):
    """``sum_k w_k F_k``: mixtures and quadratures (weights are not renormalised).

    ``mu`` and ``mu2`` may be given (e.g. in closed form) when the parts' moments are not
    known separately; otherwise they are the weighted sums of the parts'.
    """

    def __init__(self, laws: list[SpineLaw], weights, mu: float | None = None,
                 mu2: float | None = None) -> None:
        self.laws = list(laws)
        self.weights = np.asarray(weights, dtype=float)
        self.exact = all(law.exact for law in self.laws)
        self._mu, self._mu2 = mu, mu2
        steps = {law.grid_step for law in self.laws} - {None}
        if len(steps) > 1:
            raise UserError("cannot add sampled spine laws deposited on different grids")
        self._grid_step = steps.pop() if steps else None

    @property
    def mass(self) -> float:
        return float(sum(w * law.mass for w, law in zip(self.weights, self.laws)))

    @property
    def mu(self) -> float:
        if self._mu is not None:
            return self._mu
        return float(sum(w * law.mu for w, law in zip(self.weights, self.laws)))

    @property
    def mu2(self) -> float:
        if self._mu2 is not None:
            return self._mu2
        return float(sum(w * law.mu2 for w, law in zip(self.weights, self.laws)))

    @property
    def grid_step(self) -> float | None:
        return self._grid_step

    def cells(self, h: float, size: int, mode: str = "split") -> np.ndarray:
        out = np.zeros(size)
        for w, law in zip(self.weights, self.laws):
            if w > 0:
                out += w * law.cells(h, size, mode)
        return out

    def log_laplace(self, theta: float) -> float:
        terms = [math.log(w) + law.log_laplace(theta)
                 for w, law in zip(self.weights, self.laws) if w > 0]
        return float(special.logsumexp(terms))

    def replicates(self) -> list[SpineLaw]:
        reps = [law.replicates() for law in self.laws]
        n = max((len(r) for r in reps), default=0)
        if n == 0:
            return []
        parts = [r if r else [law] * n for r, law in zip(reps, self.laws)]
        return [SumLaw([p[b] for p in parts], self.weights) for b in range(n)]


class ConvolvedLaw(SpineLaw):
    """The law of ``Y + Z`` for independent steps of laws ``a`` and ``b``: ``(a * b)(dx)``.

    Both discretisations survive the convolution: split cells preserve mass and count
    mass (``e^{(j + k) h} = e^{j h} e^{k h}``), and floor positions add up to at most the
    floor of the sum. ``mu`` and ``mu2`` must be given.
    """

    def __init__(self, a: SpineLaw, b: SpineLaw, mu: float, mu2: float) -> None:
        self.a, self.b = a, b
        self._mu, self._mu2 = float(mu), float(mu2)
        self.exact = a.exact and b.exact

    @property
    def mass(self) -> float:
        return self.a.mass * self.b.mass

    def cells(self, h: float, size: int, mode: str = "split") -> np.ndarray:
        f = fft_convolve(self.a.cells(h, size, mode), self.b.cells(h, size, mode))[:size]
        return np.maximum(f, 0.0)


def mixture_law(laws: list[SpineLaw], weights, mu: float | None = None,
                mu2: float | None = None) -> SpineLaw:
    """``sum w_k F_k``; merged into one :class:`SpineSteps` when every part is exact atoms."""
    w = np.asarray(weights, dtype=float)
    if all(isinstance(law, SpineSteps) and law.exact for law in laws):
        return SpineSteps.atoms(np.concatenate([law.values for law in laws]),
                                np.concatenate([law.weights * wk for law, wk in zip(laws, w)]))
    return SumLaw(laws, w, mu, mu2)


# ----------------------------------------------------------------------------------------
# closed-form laws


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


class ZipfLaw(SpineLaw):
    """The exact law of a fixed-exponent Zipf distribution ``q_i = i^-s / Z``, i = 1..vocab.

    No atom is listed: the cumulative mass and count at each grid point come from the
    rank ``n(x) = #{i: s log i + log Z < x}`` and the Euler-Maclaurin sum
    ``sum_{i <= n} i^-s`` (relative error below 1e-11), so a vocabulary of 262,144 costs
    one pass over the grid. Ranks ``1..skip`` are left out (mass ``1 - sum_{i<=skip} q_i``).
    ``mu`` and ``mu2`` are the moments of the whole law (given by the family).
    """

    def __init__(self, s: float, vocab: int, skip: int = 0, mu: float = math.nan,
                 mu2: float = math.nan) -> None:

        self.s, self.vocab, self.skip = float(s), int(vocab), int(skip)
        self.log_z = math.log(zipf_sum(self.vocab, self.s, 0))
        self._mass = 1.0 - (zipf_sum(self.skip, self.s, 0) / math.exp(self.log_z)
                            if self.skip else 0.0)
        self._mu, self._mu2 = float(mu), float(mu2)

    def cells(self, h: float, size: int, mode: str = "split") -> np.ndarray:
        cached = getattr(self, "_cdfs", None)
        if cached is None or cached[0] != h or cached[1].size < size + 1:
            mass, count = np.empty(size + 1), np.empty(size + 1)
            _zipf_cdfs(self.s, self.vocab, self.log_z, self.skip, float(h), mass, count)
            self._cdfs = cached = (h, mass, count)
        return _cells_from_cdfs(cached[1][:size + 1], cached[2][:size + 1], h, _mode(mode))


def zipf_spread_law(lo: float, hi: float, vocab: int, mu: float, mu2: float,
                    head: int = 64, n_fine: int = 1024, n_gauss: int = 16) -> SpineLaw:
    """The law of a Zipf distribution whose exponent is uniform on ``[lo, hi]``.

    The ``head`` largest ranks, whose atoms are far apart, are integrated over the
    exponent by the midpoint rule on ``n_fine`` points (atoms); the tail ranks, each of
    mass below ``head^-lo / Z``, by ``n_gauss``-point Gauss-Legendre quadrature of their
    exact cumulative functions (:class:`ZipfLaw`). Tested against a 16,384-point
    midpoint rule over every rank (``tests/unit/test_spine_laws.py``).
    """

    head = min(head, vocab)
    s_fine = lo + (np.arange(n_fine) + 0.5) / n_fine * (hi - lo)
    log_z = np.log([zipf_sum(vocab, s, 0) for s in s_fine])
    log_i = np.log(np.arange(1, head + 1))
    x = s_fine[:, None] * log_i[None, :] + log_z[:, None]
    atoms = SpineSteps(x.ravel(), np.exp(-x).ravel() / n_fine, exact=True)
    parts: list[SpineLaw] = [atoms]
    weights = [1.0]
    if vocab > head:
        g, gw = np.polynomial.legendre.leggauss(n_gauss)
        for gi, wi in zip(g, gw):
            parts.append(ZipfLaw(lo + (gi + 1) / 2 * (hi - lo), vocab, skip=head))
            weights.append(wi / 2)
    return SumLaw(parts, weights, mu, mu2)


# ----------------------------------------------------------------------------------------
# sampled laws


class SampledLaw(SpineLaw):
    """A Monte Carlo spine-step law: whole node distributions drawn in numba, in batches.

    Parameters
    ----------
    family : Family
        An i.i.d. family (its compiled spec is what the tree kernels use).
    rank_budget : int
        About this much work in all: generated ranks plus walked grid steps (the number
        of distributions follows from a pilot of 16); at least ``16 * batches`` and at
        most 200,000 distributions. Where the pilot missed a heavy tail of costly
        distributions, sampling stops once the work reaches 1.5 times the budget, at the
        end of a round of ``batches`` distributions (a rule on work counts only, whose
        bias is of order 1/n against the law's standard error of order 1/sqrt(n)).
    batches : int
        Independent batches; the prediction's standard error is their spread.
    seed : int
        Seed of the draws (a function of (seed, distribution index), like the trees).
    eps : float
        A distribution is generated until its remaining mass is below this.
    walk : bool
        Walk the grid through the tails of large vocabularies (below); False generates
        every rank (the reference the walk is tested against).
    switch_ratio : float
        A lazy order-statistic tail is walked once its last rank's probability is below
        this fraction of the expected remaining tail mass.
    n_distributions : int, optional
        Use this many distributions instead of the pilot's choice (tests).
    tail_noise : bool
        Draw the number of a walked order-statistic tail's ranks in each step (Poisson or
        normal with the binomial's moments) so that its correction factor follows a
        random path like the kernels'; the default follows the expected path (lower
        variance, bias measured below).

    Notes
    -----
    Each batch is deposited on the grid ``j h`` with ``h = min(1e-3, mu / 100)`` (mu from the
    pilot) up to :data:`X_CAP` nats, in both discretisations, once, and normalised to mass
    1 (every family sampled here has ``sum q = 1``); :meth:`cells` then slices. The pooled
    law is the mean of the batches. The same pass records every
    distribution's entropy and ``sum q (log q)^2``: :attr:`moments` (mu, mu2, E[H^2] with
    standard errors).

    A cell's ranks enter the law only through their total mass and count (the split that
    keeps both is the same as splitting each rank), so once a distribution's ranks are
    dense the sampler walks the grid instead of generating them
    (``brwsim/kernels/spine.py``; ``docs/theory.md``, section 2b):

    * lazy order statistics (SoftmaxNormal, tempered Dirichlet, vocab > 1024): after the
      exact head, and exact tail ranks until the last one's probability is below
      ``switch_ratio`` (1e-3) of the expected remaining tail mass mu (and the drawn tail
      is within 25% of mu), each cell gets the *expected* count and mass of the remaining
      i.i.d. weights, from tables of the kernels' own weight law, while the lazy scheme's
      state follows its expected path. This is the conditional expectation of the
      cells given the switch state (so it also lowers the variance), up to the random
      path of the tail's correction factor, whose remaining relative variance is below
      ``switch_ratio``;
    * deterministic tails (Zipf, Peaked's Zipf part, geometric ranks finer than h/2),
      from rank 1000: closed-form cell masses (Euler-Maclaurin, geometric sums), exact;
    * where little mass is left, one step spans several cells, split between its end
      points so that mass and count mass are kept (adds < 3e-7 to the law's mean).

    Floor deposits stay floors (a walked cell's mass goes to its lower grid point; what
    is left at the end goes to the last position), so the upper bound remains a bound on
    the sampled law. Measured against ``walk=False`` on 2000 paired distributions at
    vocab 32,000 (SoftmaxNormal sigma 1 and 3, tempered Dirichlet and SoftmaxNormal), the
    predictions and bounds differ by at most 6e-5 tokens at budgets 1 to 2^20 (each
    within 3 of its paired SE), at most 0.16 of the standard error this law reports with
    its default sample; deterministic tails agree to 1e-8.
    """

    exact = False

    def __init__(self, family, rank_budget: int = 600_000, batches: int = 10, seed: int = 0,
                 eps: float = 1e-9, walk: bool = True, switch_ratio: float = SWITCH_RATIO,
                 n_distributions: int | None = None, tail_noise: bool = False) -> None:
        spec = family.spec()
        if len(spec.cprog) > 1:
            raise UserError(f"{family!r}: a context-dependent family has no i.i.d. spine law "
                            "to sample; use its marginal")
        key = seed_key(seed)
        lf = np.empty((1, LEVEL_F))
        li = np.empty((1, LEVEL_I), np.int64)
        head = np.empty((1, max(spec.head_cap, 1)))
        tables = _orderstat_tables(spec, TABLE_STEP) if walk else _no_tables(spec)
        ratio = float(switch_ratio) if walk else 0.0

        def run(n, h, batches, cap=np.iinfo(np.int64).max):
            size = math.ceil(X_CAP / h)
            split, floor = np.zeros((batches, size)), np.zeros((batches, size))
            ranks, cells = np.empty(n, np.int64), np.empty(n, np.int64)
            ent, ent2 = np.empty(n), np.empty(n)
            done = _sample_cells(spec.kinds, spec.cw, spec.fpar, spec.ipar, spec.data,
                                 spec.cprog, key, n, 16 * batches, cap, h, eps, lf, li, head,
                                 *tables, TABLE_STEP, ratio, SWITCH_RHO, bool(tail_noise),
                                 split, floor, ranks, cells, ent, ent2)
            return split, floor, ranks[:done], cells[:done], ent[:done], ent2[:done]

        _, _, ranks, cells, ent, _ = run(16, 1.0, 1)
        self.h = min(1e-3, max(float(ent.mean()), 1e-6) / 100)
        if cells.any() and n_distributions is None:
            # walked tails: their cost (ranks + steps) depends on h, so pilot again there
            _, _, ranks, cells, _, _ = run(16, self.h, 1)
        per = max(float(ranks.mean() + cells.mean()), 1.0)
        n = int(np.clip(rank_budget / per, 16 * batches, 200_000))
        if n_distributions is not None:
            n = max(int(n_distributions), 2 * batches)
        n -= n % batches
        # a pilot of 16 can miss a heavy tail of costly distributions: stop at 1.5 x the
        # budget (after a whole round of batches; never below 16 per batch)
        cap = max(int(1.5 * rank_budget), 1) if n_distributions is None else np.iinfo(np.int64).max
        split, floor, ranks, cells, ent, ent2 = run(n, self.h, batches, cap)
        n = ranks.size
        # every sampled family has sum q = 1: normalise away the eps remainder and round-off
        self._grids = {"split": split / split.sum(axis=1, keepdims=True),
                       "floor": floor / floor.sum(axis=1, keepdims=True)}
        self.n_distributions = n
        self.batches = batches
        self.work = (int(ranks.sum()), int(cells.sum()))
        self._ent = ent
        se = lambda v: float(v.std(ddof=1) / math.sqrt(n))
        self.moments = Moments(float(ent.mean()), float(ent2.mean()), se(ent), se(ent2),
                               float((ent * ent).mean()), se(ent * ent), exact=False)
        g = self._grids["split"].mean(axis=0)
        self._mass, self._mu, self._mu2 = float(g.sum()), self.moments.mu, self.moments.mu2

    @property
    def grid_step(self) -> float:
        return self.h

    def cells(self, h: float, size: int, mode: str = "split") -> np.ndarray:
        _mode(mode)
        return _slice(self._grids[mode].mean(axis=0), self.h, h, size)

    def replicates(self) -> list[SpineLaw]:
        return [_Replicate(self, b) for b in range(self.batches)]


class _Replicate(SpineLaw):
    """One batch of a :class:`SampledLaw`, scaled to a whole law."""

    exact = False

    def __init__(self, parent: SampledLaw, b: int) -> None:
        self.parent, self.b = parent, b

    @property
    def mass(self) -> float:
        return float(self.parent._grids["split"][self.b].sum())

    @property
    def mu(self) -> float:
        g = self.parent._grids["split"][self.b]
        return float(g @ (np.arange(g.size) * self.parent.h))

    @property
    def mu2(self) -> float:
        g = self.parent._grids["split"][self.b]
        return float(g @ (np.arange(g.size) * self.parent.h) ** 2)

    @property
    def grid_step(self) -> float:
        return self.parent.h

    def cells(self, h: float, size: int, mode: str = "split") -> np.ndarray:
        _mode(mode)
        return _slice(self.parent._grids[mode][self.b], self.parent.h, h, size)


def _no_tables(spec) -> tuple:
    k = len(spec.kinds)
    return np.zeros((k, 2)), np.zeros((k, 2)), np.zeros(k), np.zeros(k, np.int64)


def _orderstat_tables(spec, tau: float) -> tuple:
    """Cumulative weight tables of the lazy ORDERSTAT components (``_os_tables``).

    Component c's table spans ``y = -log w`` from the weight at A = 0.1 * head / n (below
    any rank after the head, except with probability below 1e-38) to ``X_CAP + 3`` nats
    past the weight at A = 50 / n (below the largest weight, hence the normaliser, except
    with probability e^-50): every cell of the grid a tail can reach with f <= e^3.
    """
    logu, logp, y0, valid = _no_tables(spec)
    todo = [c for c in range(len(spec.kinds))
            if spec.kinds[c] == ORDERSTAT and spec.ipar[c, 5] == 1]
    if not todo:
        return logu, logp, y0, valid
    lw = lambda c, t: spline_eval(spec.data, int(spec.ipar[c, 0] + OS_LOGW * spec.ipar[c, 3] * 4),
                                  int(spec.ipar[c, 3]), spec.fpar[c, 0], spec.fpar[c, 1], t)
    lims = {}
    for c in todo:
        n, n_head = int(spec.ipar[c, 2]), int(spec.ipar[c, 4])
        t_lo = math.log(0.1 * n_head / n)
        y_lo = -lw(c, t_lo)
        y_hi = X_CAP + 3.0 - lw(c, math.log(50.0 / n))
        lims[c] = (t_lo, y_lo, math.ceil((y_hi - y_lo) / tau) + 2)
    size = max(v[2] for v in lims.values())
    logu, logp = np.zeros((len(spec.kinds), size)), np.zeros((len(spec.kinds), size))
    for c, (t_lo, y_lo, n_pts) in lims.items():
        y0[c] = y_lo
        t_max = spec.fpar[c, 0] + spec.ipar[c, 3] / spec.fpar[c, 1]    # the splines' end
        valid[c] = _os_tables(spec.data, spec.fpar, spec.ipar, c, t_lo, t_max, y_lo,
                              tau, logu[c, :n_pts], logp[c, :n_pts])
    return logu, logp, y0, valid


def _slice(grid: np.ndarray, own_h: float, h: float, size: int) -> np.ndarray:
    if abs(h - own_h) > 1e-12 * own_h:
        raise UserError(f"a sampled spine law is deposited on the grid step {own_h:.3g}; "
                        f"got h = {h:.3g}")
    out = np.zeros(size)
    n = min(size, grid.size)
    out[:n] = grid[:n]
    return out


def sampled_law(family, seed: int = 0) -> SampledLaw:
    """The Monte Carlo spine-step law of an i.i.d. family (see :class:`SampledLaw`)."""
    return SampledLaw(family, seed=seed)
