"""Spine laws and moments of a neural environment, from the whole distributions of drawn roots.

Neural families (``charlstm``, ``transformer``) cost a forward pass per distribution, so
their root marginal is summarised once per instance from ``ROOT_SAMPLES`` drawn roots
(:meth:`~brwsim.families.Family.sample_full`, exact atoms of each) rather than by the
generic numba sampler.
"""

from __future__ import annotations

import numpy as np

from brwsim.theory.laws import BatchedAtoms, Moments, SpineSteps

__all__ = ["RootSampled", "ROOT_SAMPLES"]

#: Drawn roots behind ``moments()`` and ``spine_law()``.
ROOT_SAMPLES = 1000


class RootSampled:
    """Mixin: ``spine_law`` and ``moments`` of a family's root marginal from drawn roots.

    The family sets ``_ROOT_SPAWN`` (the spawn key of its root draws) and implements
    ``sample_full``.
    """

    _ROOT_SPAWN = 0
    _root_count = ROOT_SAMPLES

    def _root_rows(self, n: int, seed: int) -> np.ndarray:
        """Whole sorted distributions of ``n`` uniformly drawn roots (cached)."""
        key = (n, seed)
        if getattr(self, "_rows_key", None) != key:
            rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(self._ROOT_SPAWN,)))
            self._rows = np.array([self.sample_full(rng) for _ in range(n)])
            self._rows_key = key
        return self._rows

    def spine_law(self) -> BatchedAtoms:
        """The spine-step law of the root marginal from drawn roots (exact atoms of each),
        in 10 batches so that predictions carry their standard error."""
        rows = self._root_rows(self._root_count, 0)
        batches = []
        for part in np.array_split(rows, 10):
            p = part[part > 0]
            batches.append(SpineSteps(-np.log(p), p / part.shape[0], exact=False))
        return BatchedAtoms(batches)

    def moments(self, n: int | None = None, seed: int = 0) -> Moments:
        """Monte Carlo moments over ``n`` drawn roots (default: the family's root count)."""
        rows = self._root_rows(self._root_count if n is None else int(n), seed)
        with np.errstate(divide="ignore", invalid="ignore"):
            lq = np.where(rows > 0, np.log(rows), 0.0)
        h = -(rows * lq).sum(1)
        m2 = (rows * lq * lq).sum(1)
        se = lambda x: float(x.std(ddof=1) / np.sqrt(x.size))  # noqa: E731
        return Moments(float(h.mean()), float(m2.mean()), se(h), se(m2), float((h * h).mean()),
                       se(h * h), exact=False)
