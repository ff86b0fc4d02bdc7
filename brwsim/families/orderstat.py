"""Normalised i.i.d. weights generated as order statistics (Dirichlet, SoftmaxNormal)."""

from __future__ import annotations

import math

import numpy as np

from brwsim.families.base import Component, Family
from brwsim.families.tables import N_INTERVALS, X_MAX, X_MIN, bound_weights, orderstat_bounds, orderstat_table
from brwsim.kernels import dist as K
from brwsim.kernels import orderstat as OS

__all__ = ['LAZY_ABOVE', 'LAZY_HEAD']


#: Vocabularies above this are generated lazily (head plus a drawn tail sum).
LAZY_ABOVE = 1024


#: Number of exact leading order statistics generated per node in lazy mode.
LAZY_HEAD = 64


class _OrderStatFamily(Family):
    """Normalised i.i.d. weights over a vocabulary, generated as order statistics.

    Vocabularies up to ``LAZY_ABOVE`` are generated in full (exact). Larger ones generate
    the ``LAZY_HEAD`` largest weights exactly and draw the sum R of the other n - 64, i.i.d.
    given that they lie below the 64th, from a gamma law with its exact mean and variance,
    capped at (n - 64) times the 64th weight; the normaliser is Z = head + R. This is a
    documented approximation, tested against exact sampling at vocab 1536-32000: KS tests
    on the top-1, top-2 and tail masses, on the per-tree law of E[X | T_P], and E[X]
    within standard errors (``tests/statistical/test_lazy_*.py``).

    The tail ranks r = 64 .. n - 1 share R exactly, so every node's distribution sums to
    1 (to rounding, about 1e-14). With M the probability not yet emitted (R / Z at rank
    64), mu the conditional mean of the probability of ranks >= r given the previous order
    statistic ((n - r) E[W | W < w_{r-1}] / Z, from the tabulated partial moments) and w
    the exact r-th order statistic (Renyi's sum continues), rank r gets
    ``w * (1 + g * (M - mu) / mu)`` clipped to [M / (n - r), min(M, q_{r-1})], and the
    last rank gets all of M. The clip keeps ranks non-increasing and M <= (n - r) q_{r-1}
    at every step, so it is never empty and the last rank fits. The gain
    g = 2 - 1.4 (mu / mu_64)**0.1 rises from 0.6 at rank 64 to 2 deep in the tail: 0.6
    spreads the drawn R's departure from its mean over the upper tail about as exact
    sampling does (SD of the mass of ranks 0-127 of Dirichlet(0.05, 2048): 0.0146 against
    0.0165 exactly; a constant gain of 0, i.e. the old scheme's R independent of the tail
    ranks, gives 0.027 and sums of 0.93-1.04; constant 1 or 2 give 0.012 and 0.009), and
    a gain > 1 makes the departure die out deep in the tail (relative to mu it scales as
    mu**(g - 1)), so small probabilities keep their exact means. The power 0.1 was chosen
    on the per-tree SD of E[X | T_P] against exact sampling (Dirichlet(0.05, .) at vocab
    2048 / 4096 / 32000 and P = 256 / 1024 / 4096: SD ratios 0.94 / 1.02 / 1.35, the last
    with 15 exact trees; constant 0.6 gives 2.8 at 32000, power 0.2 gives 0.53). Tail
    ranks cost O(1) each (two spline evaluations; the power from a table, within 2e-14 of
    libm's), generated in blocks of up to ``brwsim.kernels.orderstat.TAIL_BLOCK`` ranks.

    A threshold pass mostly meets nodes whose rank 0 is below its cut-off; a table of the
    log-weight spline at the ends of cells of A (read off A's bits) proves that from the
    first few ranks' bounds, without their exact numbers (``_orderstat_below``), and the
    node is not set up; undecided nodes run the exact test.
    """

    _law = ""
    vocab: int

    def _param(self) -> float:
        raise NotImplementedError

    def components(self, beta: float = 1.0) -> list[Component]:
        lazy = self.vocab > LAZY_ABOVE
        n_head = LAZY_HEAD if lazy else self.vocab
        table = orderstat_table(self._law, self._param(), float(beta))
        inv_h = N_INTERVALS / (X_MAX - X_MIN)
        # the weights (relative to the first) at the ends of a grid of cells in A, from
        # the log-weight spline, for orderstat_below's cheap proofs that a node's rank 0
        # is below a cut-off
        bounds = orderstat_bounds(table, OS.OS_EMIN, OS.OS_EMAX, OS.OS_CELL_BITS)
        slack = ratio = 0.0
        if bounds is not None:
            table = np.concatenate([table, bound_weights(bounds[0])])
            slack = bounds[1]
            ratio = math.exp(2.0 * slack) * (1.0 + OS.OS_BOUND_WIDEN)
        return [Component(K.ORDERSTAT,
                          fpar={OS.OS_X0: X_MIN, OS.OS_INV_H: inv_h, OS.OS_BOUND_SLACK: slack,
                                OS.OS_BOUND_RATIO: ratio},
                          ipar={OS.OS_VOCAB: self.vocab, OS.OS_N_INT: N_INTERVALS,
                                OS.OS_N_HEAD: n_head, OS.OS_LAZY: int(lazy)},
                          data=table,
                          head_cap=OS.orderstat_head_cap(n_head, lazy))]
