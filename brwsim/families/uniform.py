"""Uniform: the lattice family, where exact answers exist."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from brwsim.families.base import Component, Family, Moments, check_int
from brwsim.kernels import dist as K
from brwsim.theory.laws import SpineLaw, SpineSteps

__all__ = ["Uniform"]


class Uniform(Family):
    """q uniform over ``k`` tokens: the lattice case, where exact answers exist.

    With k**1 + ... + k**d nodes the optimal tree holds the first d full levels and
    E[X | T] = d exactly.
    """

    name = "uniform"
    example = "uniform(k=3)"

    def __init__(self, k: int) -> None:
        self.k = check_int("k", k, 2)

    def params(self) -> dict[str, Any]:
        return {"k": self.k}

    def components(self, beta: float = 1.0) -> list[Component]:
        return [Component(K.UNIFORM, [-math.log(self.k)], [self.k])]

    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        return np.full(self.k, 1.0 / self.k)

    def moments(self, n: int | None = None, seed: int = 0) -> Moments:
        lk = math.log(self.k)
        return Moments(lk, lk * lk, h2=lk * lk)

    def spine_law(self) -> SpineLaw:
        """One atom at log k (a lattice law)."""
        return SpineSteps.atoms([math.log(self.k)], [1.0])

    def tempered_family(self, beta: float) -> Family:
        return self

    def top1_mean(self) -> float:
        return 1.0 / self.k
