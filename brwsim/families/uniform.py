"""Uniform: the lattice family, where exact answers exist."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from brwsim.families.base import Component, Family, Moments
from brwsim.kernels import dist as K
from brwsim.kernels.closed import UNIFORM_K, UNIFORM_LOGQ
from brwsim.theory.laws import SpineLaw, SpineSteps
from brwsim.validate import check_range

__all__ = ["Uniform", "MAX_UNIFORM_K"]

#: Largest k: the kernels draw the sampled token at a node by walking its ranks (O(k) per
#: node, capped at 2**24 ranks), so a larger k would be both wrong and endless.
MAX_UNIFORM_K = 1 << 24


class Uniform(Family):
    """q uniform over ``k`` tokens: the lattice case, where exact answers exist.

    With k**1 + ... + k**d nodes the optimal tree holds the first d full levels and
    E[X | T] = d exactly.

    ``k`` is at most :data:`MAX_UNIFORM_K` (2**24): drawing the sampled token walks the
    ranks, O(k) per node, so simulations slow down in proportion to k (the theory,
    ``brwsim theory``, answers at once for any k).
    """

    name = "uniform"
    example = "uniform(k=3)"

    def __init__(self, k: int) -> None:
        self.k = check_range("k", k, 2, MAX_UNIFORM_K, integer=True,
                             why="the kernels draw a node's sampled token by walking its ranks, "
                                 "at most 2**24 of them")

    def params(self) -> dict[str, Any]:
        return {"k": self.k}

    def components(self, beta: float = 1.0) -> list[Component]:
        return [Component(K.UNIFORM, fpar={UNIFORM_LOGQ: -math.log(self.k)}, ipar={UNIFORM_K: self.k})]

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
