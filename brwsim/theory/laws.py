"""Spine-step laws: the law F of one step ``-log q_I`` (``I ~ q``) of a family, on a grid.

Every renewal quantity of :mod:`brwsim.theory` depends on a family only through F, a
measure of total mass ``m = E[sum q] <= 1`` with first moment ``mu = E[H(q)]`` and second
moment ``mu2 = E[sum q (log q)^2]``. Each family builds its own law from the pieces of
this package (:meth:`brwsim.families.Family.spine_law`):

* :class:`SpineSteps`: weighted atoms (Uniform, Fixed, Geometric, Empirical, n-grams, ...).
* :class:`CdfLaw`: a law given by two cumulative functions, the mass ``F(x)`` and the
  expected token count ``N(x) = E[#{i: -log q_i < x}] = int_{[0, x)} e^y F(dy)``: the
  Beta laws of Dirichlet and Peaked (:mod:`brwsim.theory.beta_laws`), fixed-exponent Zipf
  laws (:mod:`brwsim.theory.zipf_laws`) without listing 10^5 atoms.
* :class:`SumLaw`: weighted sums (mixtures, quadrature over a Zipf exponent).
* :class:`ConvolvedLaw`: the law of a sum of two independent steps (Peaked's Zipf part).
* :class:`~brwsim.theory.sampled.SampledLaw`: a Monte Carlo law drawn inside numba with the
  family's own kernels, in independent batches, so a prediction carries its standard error.

A law is used only through :meth:`SpineLaw.cells`, its masses on the grid ``j h``, in one
of two discretisations: ``"split"`` (mass and count mass ``w e^x`` preserved: the
prediction) or ``"floor"`` (every atom moved down to its grid point: the proven upper
bound, see ``docs/theory.md``). Exact laws are exact up to float round-off and the stated
quadrature error of their constructor.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy import special

from brwsim.errors import UserError
from brwsim.kernels.spine import (
    FLOOR,
    SPLIT,
)
from brwsim.theory.convolution import fft_convolve

__all__ = ["MAX_EXACT_ATOMS", "MODES", "X_CAP", "BatchedAtoms", "CdfLaw", "ConvolvedLaw", "Moments",
           "SpineLaw", "SpineSteps", "SumLaw", "geometric_atom_count", "mixture_law"]

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


def mode_code(mode: str) -> int:
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
        m = mode_code(mode)
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


def cells_from_cdfs(mass: np.ndarray, count: np.ndarray, h: float, mode: int) -> np.ndarray:
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
        return cells_from_cdfs(self._mass_cdf(x), self._count_cdf(x), h, mode_code(mode))


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
