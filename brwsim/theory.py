"""The paper's bound and renewal-theory predictions of E[X].

Natural logarithms (nats) everywhere. The derivation is in ``docs/theory.md``; in short:

* A step of the *spine* is ``-log q_I`` with ``I ~ q``; its law F (the :class:`SpineSteps`)
  has total mass ``m = E[sum q]`` (``m < 1`` when a family leaves mass outside every tree),
  mean ``mu = E[H(q)]`` and second moment ``mu2 = E[sum q_i (log q_i)^2]``.
* Let ``U(t) = sum_{n>=1} F^{*n}[0, t]`` (the root, n = 0, is not counted) and
  ``M(t) = int_0^t e^s U(ds)``. By the many-to-one lemma, ``M(t)`` is the mean number of
  non-root nodes with ``S(v) <= t`` and ``U(t)`` is the mean of ``sum p(v)`` over them, i.e.
  E[X] for the threshold tree ``{S(v) <= t}``.
* The prediction for budget P fills the expected-count measure ``M(ds)`` from ``s = 0``
  upwards until P nodes' worth of mass is taken and collects ``e^{-s}`` per node: when M has
  no atoms this is ``U(t_P)`` with ``M(t_P) = P``. It is exact for deterministic families
  (``Fixed``, ``Uniform``, ``Geometric``, whose tree is not random) and first order otherwise:
  for ``m = 1`` the node count concentrates (``#{S <= t} e^{-t} -> 1/mu``) and the error of the
  deterministic threshold vanishes as P grows.
* Key renewal theorem, non-lattice steps, ``m = 1``:
  ``E[X] = log(mu P)/mu + mu2/(2 mu^2) - 1 + o(1)``.
  Sub-stochastic steps (``m < 1``): with ``theta`` solving ``E[sum q^theta] = 1`` and
  ``nu = E[sum q^theta (-log q)]``,
  ``E[X] = m/(1-m) - (theta nu P)^{-(1-theta)/theta} / ((1-theta) nu) + o(P^{-(1-theta)/theta})``.
  On a lattice the asymptotic does not apply (U and M are step functions), but the numerical
  prediction is exact there for deterministic families.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from scipy import optimize, signal

from brwsim.errors import UserError

__all__ = [
    "SpineSteps",
    "paper_bound",
    "prediction",
    "renewal_functions",
    "spine_steps",
]

_STOCHASTIC_TOL = 1e-9  # total mass m >= 1 - this counts as m = 1
_T_LIMIT = 700.0  # e^t overflows float64 near 709
_MAX_GRID = 1 << 23


def paper_bound(mu, mu2, P):
    """The paper's upper bound on E[X] with its O(1) term dropped.

    ``(mu + mu2) * log(P) / mu**2`` in nats, from Pankratov & Alistarh, "Speculative Decoding
    Speed-of-Light: Optimal Lower Bounds via Branching Random Walks", EACL 2026
    (arXiv:2512.11718), which proves ``E[X] <= (mu + mu2) log P / mu^2 + O(1)``. The constant
    is unknown, so this value is not itself a proven bound.

    Parameters
    ----------
    mu : float or array_like
        Mean spine step ``E[H(q)]`` in nats, > 0.
    mu2 : float or array_like
        Second moment of the spine step ``E[sum q_i (log q_i)^2]``, >= 0.
    P : float or array_like
        Budget (draft tokens per call), >= 1.

    Returns
    -------
    float or numpy.ndarray
        The bound, broadcast over the inputs; a float when all inputs are scalars.

    Raises
    ------
    brwsim.errors.UserError
        If ``mu <= 0``, ``mu2 < 0``, ``P < 1`` or any input is NaN.
    """
    mu_, mu2_, P_ = (np.asarray(a, dtype=float) for a in (mu, mu2, P))
    for name, a in (("mu", mu_), ("mu2", mu2_), ("P", P_)):
        if np.isnan(a).any():
            raise UserError(f"paper_bound: {name} is NaN")
    if (mu_ <= 0).any() or not np.isfinite(mu_).all():
        raise UserError(f"paper_bound: mu must be finite and > 0, got {mu}")
    if (mu2_ < 0).any():
        raise UserError(f"paper_bound: mu2 must be >= 0, got {mu2}")
    if (P_ < 1).any():
        raise UserError(f"paper_bound: budget P must be >= 1, got {P}")
    out = (mu_ + mu2_) * np.log(P_) / mu_**2
    return float(out) if out.ndim == 0 else out


@dataclass(frozen=True, eq=False)
class SpineSteps:
    """The law F of one spine step ``-log q_I``, ``I ~ q``, as weighted atoms.

    Parameters
    ----------
    values : array_like
        Step sizes ``-log q_i`` (nats, >= 0).
    weights : array_like
        Their masses, >= 0; the total is ``m = E[sum q] <= 1``.
    exact : bool
        True when the atoms are the exact law, False when they are a Monte Carlo sample.
    lattice_span : float or None
        The largest ``h`` with every value in ``h * Z`` (None for non-lattice laws).
        :meth:`atoms` detects it; a sample is never a lattice.

    Notes
    -----
    Lattice means the *support of the step law* lies in ``h * Z``. Uniform(k) (one atom,
    ``log k``) is a lattice law; Geometric(r) (atoms ``-log(1-r) - i log r``) is one only when
    ``log(1-r) / log(r)`` is rational (e.g. r = 1/2, span log 2), and is non-lattice otherwise.
    """

    values: np.ndarray
    weights: np.ndarray
    exact: bool = True
    lattice_span: float | None = None

    def __post_init__(self):
        v = np.asarray(self.values, dtype=float).ravel()
        w = np.asarray(self.weights, dtype=float).ravel()
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
            raise UserError(
                f"SpineSteps: total mass {w.sum():.12g} exceeds 1 (sum q <= 1)"
            )
        object.__setattr__(self, "values", v)
        object.__setattr__(self, "weights", w)

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
        """Total mass ``m = E[sum q]``."""
        return float(self.weights.sum())

    @property
    def mu(self) -> float:
        """``E[H(q)] = E[sum -q_i log q_i]``, the first moment of F."""
        return float(self.weights @ self.values)

    @property
    def mu2(self) -> float:
        """``E[sum q_i (log q_i)^2]``, the second moment of F."""
        return float(self.weights @ self.values**2)

    def malthusian(self) -> tuple[float, float]:
        """Malthusian parameter and mean of the tilted spine.

        Returns
        -------
        theta : float
            The root of ``E[sum q^theta] = sum_a w_a exp((1 - theta) v_a) = 1`` in (0, 1];
            1 when ``m = 1``.
        nu : float
            ``E[sum q^theta (-log q)]``, the mean step of the tilted (probability) law
            ``w_a exp((1 - theta) v_a)``; equal to ``mu`` when ``m = 1``.

        Raises
        ------
        brwsim.errors.UserError
            If no theta in (0, 1) exists (the mean number of children is <= 1, as for a tree
            that is a single path).
        """
        if self.mass >= 1 - _STOCHASTIC_TOL:
            return 1.0, self.mu
        v, w = self.values, self.weights
        shift = v.max()  # evaluate in log space: the count weights w e^v can be huge

        def log_laplace(theta):
            return (
                math.log(np.sum(w * np.exp((1 - theta) * (v - shift))))
                + (1 - theta) * shift
            )

        if log_laplace(1e-12) <= 0:
            raise UserError(
                "no Malthusian parameter: the mean number of children E[#{q_i > 0}] is <= 1"
            )
        theta = optimize.brentq(log_laplace, 1e-12, 1.0, xtol=1e-14, rtol=1e-14)
        tilt = w * np.exp((1 - theta) * v)
        return float(theta), float(tilt @ v / tilt.sum())


def _lattice_span(
    values: np.ndarray, max_den: int = 100, rtol: float = 1e-10
) -> float | None:
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


#: Exact spine-step laws with more atoms than this (e.g. Geometric with r near 1) are sampled.
MAX_EXACT_ATOMS = 4_000_000


def geometric_atom_count(r: float) -> int:
    """Atoms of the exact Geometric(r) spine-step law: ranks until r**count < 1e-16."""
    return max(1, math.ceil(math.log(1e-16) / math.log(r)))


def spine_steps(family, n: int = 200_000, seed: int = 0) -> SpineSteps:
    """The spine-step law of a family: exact atoms when it has them, else a sample.

    Parameters
    ----------
    family : object
        A :class:`SpineSteps` (returned as is) or a family. Exact atoms for ``Uniform`` (``.k``),
        ``Fixed`` (``.probs``), ``Geometric`` (``.r``; atoms truncated where the remaining mass
        drops below 1e-16; sampled when that needs more than 4 million atoms), ``Empirical`` (``.rows``, each row equally likely) and ``Zipf``
        with ``spread == 0``, recognised by class name and attribute; a family with a
        ``spine_steps()`` method (e.g. ``NGram``, ``EntropyTarget``) supplies its own, or returns
        None to be sampled. Any other family needs ``sample_full(rng)``.
    n : int
        Number of distributions to sample for a family without atoms (capped so that at most
        about 1e8 probabilities are drawn). The sampling error of the prediction scales as
        ``(t_P / mu^2) * sd(H) / sqrt(n)``.
    seed : int
        Seed of the ``numpy.random.Generator`` used for sampling.

    Returns
    -------
    SpineSteps

    Notes
    -----
    Sampled distributions keep their 32 largest probabilities as exact atoms
    (value ``-log q_i``, weight ``q_i / n``) and, when the vocabulary is larger, represent the
    rest by 8 draws ``J ~ q`` restricted to the tail, each of weight ``tail mass / (8 n)``:
    an unbiased estimate of F that needs O(1) memory per distribution.
    """
    if isinstance(family, SpineSteps):
        return family
    if callable(getattr(family, "spine_steps", None)):  # a family that may know its exact law
        steps = family.spine_steps()
        if steps is not None:        # None: too many atoms to list, sample instead
            return steps
    name = type(family).__name__
    if name == "Uniform" and hasattr(family, "k"):
        k = int(family.k)
        if k < 1:
            raise UserError(f"Uniform: k must be >= 1, got {k}")
        return SpineSteps.atoms([math.log(k)], [1.0])
    if name == "Fixed" and hasattr(family, "probs"):
        p = np.asarray(family.probs, dtype=float)
        p = p[p > 0]
        return SpineSteps.atoms(-np.log(p), p)
    if name == "Geometric" and hasattr(family, "r"):
        r = float(family.r)
        if not 0 < r < 1:
            raise UserError(f"Geometric: r must be in (0, 1), got {r}")
        count = geometric_atom_count(r)
        if count <= MAX_EXACT_ATOMS:                              # else: sampled below
            i = np.arange(count)
            return SpineSteps.atoms(-math.log1p(-r) - i * math.log(r), (1 - r) * r**i)
    if name == "Zipf" and getattr(family, "spread", None) == 0:  # the same q everywhere
        q = np.asarray(family.sample_full(np.random.default_rng(seed)), dtype=float)
        return SpineSteps.atoms(-np.log(q[q > 0]), q[q > 0])
    if name == "Empirical" and hasattr(family, "rows"):
        rows = np.asarray(family.rows, dtype=float)
        if rows.ndim != 2 or rows.shape[0] == 0:
            raise UserError("Empirical: rows must be a non-empty 2-D array")
        p = rows[rows > 0]
        return SpineSteps.atoms(-np.log(p), p / rows.shape[0])
    if not hasattr(family, "sample_full"):
        raise UserError(
            f"cannot get spine steps of {name}: no atoms and no sample_full(rng)"
        )
    return _sampled_steps(family, int(n), np.random.default_rng(seed))


def _sampled_steps(
    family, n: int, rng: np.random.Generator, head: int = 32, draws: int = 8
) -> SpineSteps:
    """Sampled spine steps: exact head atoms plus tail draws (see :func:`spine_steps`).

    Distributions are processed in chunks whose zero-padded size stays below 1e7 entries,
    so a family with occasional very long distributions cannot exhaust memory.
    """
    first = np.asarray(family.sample_full(rng), dtype=float)
    n = max(1, min(n, int(1e8) // max(first.size, 1)))
    values: list[np.ndarray] = []
    weights: list[np.ndarray] = []
    rows, width = [first], first.size
    for _ in range(n - 1):
        row = np.asarray(family.sample_full(rng), dtype=float)
        if (len(rows) + 1) * max(width, row.size) > 1e7:
            _chunk_steps(rows, n, head, draws, rng, values, weights)
            rows, width = [], 0
        rows.append(row)
        width = max(width, row.size)
    _chunk_steps(rows, n, head, draws, rng, values, weights)
    return SpineSteps(np.concatenate(values), np.concatenate(weights), exact=False)


def _chunk_steps(rows, n, head, draws, rng, values, weights) -> None:
    """Append the head atoms and tail draws of one chunk of sampled distributions."""
    q = np.zeros((len(rows), max(r.size for r in rows)))
    for i, r in enumerate(rows):
        q[i, : r.size] = r
    top = q[:, :head]
    values.append(-np.log(top[top > 0]))
    weights.append(top[top > 0] / n)
    tail = q[:, head:]
    mass = tail.sum(axis=1)
    rows_with_tail = np.flatnonzero(mass > 0)
    if rows_with_tail.size:
        # draws J ~ q restricted to the tail, all rows at once: row i searches in
        # [i, i + 1), below its last cdf value so that J never lands on a zero
        tail, mass = tail[rows_with_tail], mass[rows_with_tail]
        cdf = (np.cumsum(tail, axis=1) / mass[:, None]).clip(max=1.0)
        u = rng.random((len(tail), draws)) * cdf[:, -1:]
        offset = np.arange(len(tail))[:, None]
        flat = np.searchsorted((cdf + offset).ravel(), (u + offset).ravel(), side="right")
        values.append(-np.log(tail.ravel()[flat]))
        weights.append(np.repeat(mass / (draws * n), draws))


# --------------------------------------------------------------------------------------
# numerical renewal functions on a grid


def _grid_step(steps: SpineSteps, h: float | None) -> float:
    if steps.lattice_span is not None and h is None:
        return steps.lattice_span  # atoms sit on grid points: no discretisation error
    if h is None:
        h = min(1e-3, steps.mu / 100) if steps.mu > 0 else 1e-3
    if not h > 0:
        raise UserError(f"grid step h must be > 0, got {h}")
    return float(h)


def _discretise(steps: SpineSteps, h: float, size: int) -> np.ndarray:
    """Masses of F on the grid j*h, j < size.

    An atom at x between grid points a < x < a + h is split so that both its mass and its
    count mass ``w e^x`` are preserved (then ``int e^s F^{*n}(ds) = m(0)^n`` exactly for the
    discretised law); the mean is then off by at most ``h^2 / 8`` per atom (``x h / 2`` for
    atoms with ``x < h``). Atoms on grid points (lattice laws) are kept exactly.
    """
    x = steps.values / h
    j = np.rint(x)
    on_grid = np.abs(x - j) <= 1e-9 * np.maximum(x, 1.0)
    j = np.where(on_grid, j, np.floor(x))
    y = np.where(on_grid, 0.0, x - j)
    upper = np.expm1(y * h) / math.expm1(h)
    j = j.astype(np.int64)
    keep = j < size
    f = np.bincount(
        j[keep], weights=steps.weights[keep] * (1 - upper[keep]), minlength=size + 1
    )
    f += np.bincount(
        j[keep] + 1, weights=steps.weights[keep] * upper[keep], minlength=size + 1
    )
    return f[:size]


def _series_inverse(g: np.ndarray) -> np.ndarray:
    """First len(g) coefficients of 1/g(z) by Newton iteration with FFT products."""
    inv = np.array([1.0 / g[0]])
    while inv.size < g.size:
        k = min(2 * inv.size, g.size)
        err = -signal.fftconvolve(g[:k], inv)[:k]
        err[0] += 2.0
        inv = signal.fftconvolve(inv, err)[:k]
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


def _threshold_guess(steps: SpineSteps, budget: float) -> float:
    if steps.mass >= 1 - _STOCHASTIC_TOL:
        return max(math.log(max(steps.mu * budget, 1.0)), 0.0) + 3.0
    try:
        theta, nu = steps.malthusian()
        return max(math.log(max(theta * nu * budget, 1.0)) / theta, 0.0) + 3.0
    except UserError:
        return min(budget * steps.values.max(), _T_LIMIT)


def _grid(steps: SpineSteps, budget: float, h: float | None):
    """Grid s, masses u of U and cumulative counts C, extended until C reaches budget."""
    h = _grid_step(steps, h)
    t = min(_threshold_guess(steps, budget), _T_LIMIT)
    while True:
        s = np.arange(_grid_size(t, h)) * h
        u = _renewal_density(_discretise(steps, h, s.size))
        counts = np.cumsum(np.exp(s) * u)
        if counts[-1] >= budget:
            return s, u, counts
        if t >= _T_LIMIT:
            raise UserError(
                f"budget {budget:g} needs a threshold beyond {_T_LIMIT:g} nats"
            )
        t = min(2 * t, _T_LIMIT)


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
    steps : SpineSteps or family
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
    if np.isnan(t).any() or (t < 0).any() or (t > _T_LIMIT).any():
        raise UserError(f"renewal_functions: thresholds must be in [0, {_T_LIMIT:g}]")
    hh = _grid_step(steps, h)
    s = np.arange(_grid_size(t.max(initial=0.0), hh)) * hh
    u = _renewal_density(_discretise(steps, hh, s.size))
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


def _numerical(steps: SpineSteps, budgets: np.ndarray, h: float | None) -> np.ndarray:
    s, u, counts = _grid(steps, float(budgets.max()), h)
    cum_u = np.cumsum(u)
    j = np.searchsorted(counts, budgets, side="left")  # first point reaching P
    prev_c = np.where(j > 0, counts[j - 1], 0.0)
    prev_u = np.where(j > 0, cum_u[j - 1], 0.0)
    return prev_u + (budgets - prev_c) * np.exp(-s[j])


def _asymptotic(steps: SpineSteps, budgets: np.ndarray, moments=None) -> np.ndarray:
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
        return np.log(mu * budgets) / mu + mu2 / (2 * mu**2) - 1
    theta, nu = steps.malthusian()
    return m / (1 - m) - (theta * nu * budgets) ** (-(1 - theta) / theta) / (
        (1 - theta) * nu
    )


def prediction(
    family,
    budgets,
    method: str = "numerical",
    *,
    h: float | None = None,
    n: int = 200_000,
    seed: int = 0,
) -> np.ndarray:
    """Renewal-theory prediction of E[X], the accepted draft tokens of the optimal tree.

    Parameters
    ----------
    family : object
        A family or a :class:`SpineSteps` (see :func:`spine_steps`).
    budgets : array_like
        Budgets P >= 1 (draft tokens, root excluded).
    method : {"numerical", "asymptotic"}
        ``"numerical"``: fill the expected-count measure ``M(ds) = e^s U(ds)`` with P nodes from
        s = 0 upwards, collecting ``e^{-s}`` per node (``U(t_P)`` with ``M(t_P) = P`` when M
        has no atoms). Exact for deterministic families (Fixed, Uniform, Geometric) up to the
        O(h) grid error (none on a lattice; about 1e-4 tokens at the default grid up to
        P = 2^20, see the tests and ``docs/theory.md``); for random families it replaces the random size-P threshold by its deterministic
        counterpart, an error that vanishes as P grows.
        ``"asymptotic"``: the key renewal theorem, non-lattice laws only.
        With ``m = E[sum q] = 1``: ``log(mu P)/mu + mu2/(2 mu^2) - 1``.
        With ``m < 1``: ``m/(1-m) - (theta nu P)^(-(1-theta)/theta) / ((1-theta) nu)``
        (see :meth:`SpineSteps.malthusian`). The error is o(1) as P grows.
    h : float, optional
        Grid step of the numerical method (default ``min(1e-3, mu/100)``; the lattice span on
        a lattice).
    n, seed : int
        Passed to :func:`spine_steps` for families without exact atoms.

    Returns
    -------
    numpy.ndarray
        Predicted E[X] per budget (float64, the shape of ``budgets``).

    Raises
    ------
    brwsim.errors.UserError
        For budgets < 1 or NaN, an unknown method, or ``method="asymptotic"`` on a lattice law.
    """
    if method not in ("numerical", "asymptotic"):
        raise UserError(f"method must be 'numerical' or 'asymptotic', got {method!r}")
    P = np.asarray(budgets, dtype=float)
    if P.size == 0 or np.isnan(P).any() or (P < 1).any() or not np.isfinite(P).all():
        raise UserError(f"budgets must be finite and >= 1, got {budgets}")
    steps = spine_steps(family, n=n, seed=seed)
    if method == "numerical":
        return _numerical(steps, P.ravel(), h).reshape(P.shape)
    moments = None
    if not steps.exact and hasattr(family, "moments"):
        moments = family.moments()  # closed-form mu, mu2 beat the sampled ones
        if not getattr(moments, "exact", True):
            moments = None
    return _asymptotic(steps, P.ravel(), moments).reshape(P.shape)
