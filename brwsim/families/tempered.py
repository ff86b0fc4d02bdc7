"""Tempered: q**(1/T) renormalised at every node."""

from __future__ import annotations

from typing import Any

import numpy as np

from brwsim.families.base import Component, Family, Moments, check_positive
from brwsim.families.mixture import _as_family

__all__ = ["Tempered"]


class Tempered(Family):
    """q**(1/T) renormalised at every node: sampling at temperature ``T``.

    For families with tail mass outside any tree (Fixed, Empirical) the tail is tempered
    as one lumped token. Moments are Monte Carlo (exact ones when T == 1).
    """

    name = "tempered"
    param_kinds = {"family": "family"}
    example = "tempered(family=dirichlet(alpha=0.3, vocab=20), T=0.7)"

    def __init__(self, family: Any, T: float) -> None:
        self.family = _as_family(family, "family")
        self.T = check_positive("T", T)

    def params(self) -> dict[str, Any]:
        return {"family": self.family, "T": self.T}

    def components(self, beta: float = 1.0) -> list[Component]:
        return self.family.components(beta / self.T)

    def context_program(self, beta: float = 1.0) -> np.ndarray:
        return self.family.context_program(beta / self.T)

    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        return self.family.sample_full(rng, beta / self.T)

    def _equivalent(self) -> Family | None:
        """The family of the tempered law where one exists (e.g. Geometric(r**(1/T)))."""
        if self.T == 1.0:
            return self.family
        return self.family.tempered_family(1.0 / self.T)

    def tempered_family(self, beta: float) -> Family | None:
        return self.family.tempered_family(beta / self.T)

    def top1_mean(self) -> float | None:
        eq = self._equivalent()
        return None if eq is None else eq.top1_mean()

    def spine_law(self):
        """The equivalent family's exact law where one exists, else sampled in numba."""
        eq = self._equivalent()
        return eq.spine_law() if eq is not None else super().spine_law()

    def moments(self, n: int | None = None, seed: int = 0) -> Moments:
        eq = self._equivalent()
        if eq is not None:
            return eq.moments(n=n, seed=seed)
        return super().moments(n=n, seed=seed)
