"""Closed-form Zipf spine-step laws: a fixed exponent, and an exponent spread uniformly."""

from __future__ import annotations

import math

import numpy as np

from brwsim.kernels.special import zipf_sum
from brwsim.kernels.spine import (
    _zipf_cdfs,
)
from brwsim.theory.laws import SpineLaw, SpineSteps, SumLaw, cells_from_cdfs, mode_code

__all__ = ["ZipfLaw", "zipf_spread_law"]


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
        return cells_from_cdfs(cached[1][:size + 1], cached[2][:size + 1], h, mode_code(mode))


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
