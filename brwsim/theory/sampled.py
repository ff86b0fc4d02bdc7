"""Sampled spine-step laws: whole node distributions drawn in numba, in batches.

The one law of :mod:`brwsim.theory` that runs the families' own kernels: where a family
has no closed-form law (tempered Dirichlet, SoftmaxNormal, ...), :class:`SampledLaw`
deposits the steps of independently drawn distributions on the grid, in batches, so a
prediction carries its standard error.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator

import numpy as np

from brwsim.errors import UserError
from brwsim.engine import law
from brwsim.interrupt import answering
from brwsim.kernels.dist import DATA_OFF, LEVEL_F, LEVEL_I, ORDERSTAT
from brwsim.kernels.orderstat import OS_INV_H, OS_LAZY, OS_LOGW, OS_N_HEAD, OS_N_INT, OS_VOCAB, OS_X0
from brwsim.kernels.special import spline_eval
from brwsim.kernels.spine import (
    SWITCH_RATIO,
    SWITCH_RHO,
    TABLE_STEP,
    _os_tables,
    _sample_cells,
)
from brwsim.keys import seed_key
from brwsim.theory.laws import X_CAP, Moments, SpineLaw, mode_code

__all__ = ["SampledLaw", "sampled_law", "law_seed", "current_law_seed"]

#: The seed a :class:`SampledLaw` draws with when none is given: 0 unless a caller asks
#: for another draw of the law (:func:`law_seed`).
_LAW_SEED: contextvars.ContextVar[int] = contextvars.ContextVar("brwsim_law_seed", default=0)


def current_law_seed() -> int:
    """The seed sampled spine laws are drawn with here (0 outside :func:`law_seed`)."""
    return _LAW_SEED.get()


@contextlib.contextmanager
def law_seed(seed: int) -> Iterator[None]:
    """Draw every sampled spine law built inside with ``seed`` (another draw of the law).

    Families memoise their laws per seed (:meth:`~brwsim.families.Family.cached_spine_law`),
    so a composite family (mixture, regimes, tempered) redraws every sampled part.
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise UserError(f"the spine law's seed must be an integer >= 0, got {seed!r}")
    token = _LAW_SEED.set(int(seed))
    try:
        yield
    finally:
        _LAW_SEED.reset(token)


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
    seed : int, optional
        Seed of the draws (a function of (seed, distribution index), like the trees);
        default :func:`current_law_seed` (0 unless inside :func:`law_seed`).
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

    def __init__(self, family, rank_budget: int = 600_000, batches: int = 10,
                 seed: int | None = None,
                 eps: float = 1e-9, walk: bool = True, switch_ratio: float = SWITCH_RATIO,
                 n_distributions: int | None = None, tail_noise: bool = False) -> None:
        spec = family.spec()
        if len(spec.cprog) > 1:
            raise UserError(f"{family!r}: a context-dependent family has no i.i.d. spine law "
                            "to sample; use its marginal")
        key = seed_key(current_law_seed() if seed is None else seed)
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
            done = answering(_sample_cells, law(spec), key, n, 16 * batches, cap, (h, eps),
                             (lf, li, head), (*tables, TABLE_STEP),
                             (ratio, SWITCH_RHO, bool(tail_noise)), (split, floor),
                             (ranks, cells, ent, ent2))
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
        mode_code(mode)
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
        mode_code(mode)
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
            if spec.kinds[c] == ORDERSTAT and spec.ipar[c, OS_LAZY] == 1]
    if not todo:
        return logu, logp, y0, valid
    ip, fp = spec.ipar, spec.fpar
    lw = lambda c, t: spline_eval(spec.data, int(ip[c, DATA_OFF] + OS_LOGW * ip[c, OS_N_INT] * 4),
                                  int(ip[c, OS_N_INT]), fp[c, OS_X0], fp[c, OS_INV_H], t)
    lims = {}
    for c in todo:
        n, n_head = int(ip[c, OS_VOCAB]), int(ip[c, OS_N_HEAD])
        t_lo = math.log(0.1 * n_head / n)
        y_lo = -lw(c, t_lo)
        y_hi = X_CAP + 3.0 - lw(c, math.log(50.0 / n))
        lims[c] = (t_lo, y_lo, math.ceil((y_hi - y_lo) / tau) + 2)
    size = max(v[2] for v in lims.values())
    logu, logp = np.zeros((len(spec.kinds), size)), np.zeros((len(spec.kinds), size))
    for c, (t_lo, y_lo, n_pts) in lims.items():
        y0[c] = y_lo
        t_max = fp[c, OS_X0] + ip[c, OS_N_INT] / fp[c, OS_INV_H]    # the splines' end
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
