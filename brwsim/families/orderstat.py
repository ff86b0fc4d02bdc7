"""Normalised i.i.d. weights generated as order statistics (Dirichlet, SoftmaxNormal)."""

from __future__ import annotations

from brwsim.families.base import Component, Family
from brwsim.families.tables import N_INTERVALS, X_MAX, X_MIN, orderstat_table
from brwsim.kernels import dist as K

__all__ = ['LAZY_ABOVE', 'LAZY_HEAD']


#: Vocabularies above this are generated lazily (head plus a drawn tail sum).
LAZY_ABOVE = 1024


#: Number of exact leading order statistics generated per node in lazy mode.
LAZY_HEAD = 64


class _OrderStatFamily(Family):
    """Normalised i.i.d. weights over a vocabulary, generated as order statistics.

    Vocabularies up to ``LAZY_ABOVE`` are generated in full (exact). Larger ones generate
    the ``LAZY_HEAD`` largest weights exactly and draw the sum of the other n - 64, i.i.d.
    given that they lie below the 64th, from a gamma law with its exact mean and variance
    (a documented approximation, tested against exact sampling at vocab 4096-16384:
    KS tests on the top-1, top-2 and tail masses, and E[X] within standard errors).
    Ranks beyond 64 continue the exact order statistics under the same normaliser.
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
        return [Component(K.ORDERSTAT, [X_MIN, inv_h], [self.vocab, N_INTERVALS, n_head, int(lazy)],
                          data=table, head_cap=n_head)]
