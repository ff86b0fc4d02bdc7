"""Geometric: q_i = (1 - r) r**i over an infinite vocabulary."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from brwsim.errors import UserError
from brwsim.families.base import Component, Family, Moments, check_positive
from brwsim.kernels import dist as K
from brwsim.kernels.closed import GEOM_LOG_1MR, GEOM_LOG_R, GEOM_R
from brwsim.theory.laws import CdfLaw, SpineLaw, SpineSteps, geometric_atom_count

__all__ = ["Geometric"]


class Geometric(Family):
    """q_i = (1 - r) r**i, i = 0, 1, ...: an infinite vocabulary."""

    name = "geometric"
    example = "geometric(r=0.6)"

    def __init__(self, r: float) -> None:
        self.r = check_positive("r", r)
        if self.r >= 1.0:
            raise UserError(f"r must be in (0, 1), got {r!r}")

    def params(self) -> dict[str, Any]:
        return {"r": self.r}

    def components(self, beta: float = 1.0) -> list[Component]:
        r = self.r ** beta
        return [Component(K.GEOMETRIC, fpar={GEOM_R: r, GEOM_LOG_R: math.log(r),
                                                 GEOM_LOG_1MR: math.log1p(-r)})]

    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        r = self.r ** beta
        n = min(int(math.ceil(math.log(1e-17) / math.log(r))) + 1, 10_000_000)
        return (1.0 - r) * r ** np.arange(n)

    def moments(self, n: int | None = None, seed: int = 0) -> Moments:
        r = self.r
        a, b = math.log1p(-r), math.log(r)
        m1 = r / (1.0 - r)
        m2 = r * (1.0 + r) / (1.0 - r) ** 2
        mu = -(a + b * m1)
        mu2 = a * a + 2.0 * a * b * m1 + b * b * m2
        return Moments(mu, mu2, h2=mu * mu)

    def spine_law(self) -> SpineLaw:
        """Atoms ``-log(1-r) - i log r`` of weight ``(1-r) r^i`` (a lattice when r = 1/2).

        Listed until the remaining mass ``r^n`` is below 1e-16, which is put on the last
        atom (a lower position: the floor bound stays a bound). Beyond
        :data:`~brwsim.theory.laws.MAX_EXACT_ATOMS` atoms (r near 1) the closed-form
        cumulative functions are used: ``n(x)`` ranks lie below x, of mass ``1 - r^n``.
        """
        r = self.r
        count = geometric_atom_count(r)
        a, b = math.log1p(-r), math.log(r)
        if count <= 100_000:
            i = np.arange(count)
            w = (1 - r) * r ** i
            w[-1] += r ** count
            return SpineSteps.atoms(-a - i * b, w)
        mom = self.moments()

        def ranks(x):
            return np.clip(np.ceil((x + a) / -b), 0, None)   # i with -a - i b < x

        return CdfLaw(lambda x: -np.expm1(ranks(x) * b), ranks, 1.0, mom.mu, mom.mu2)

    def tempered_family(self, beta: float) -> Family:
        return Geometric(self.r ** beta)

    def top1_mean(self) -> float:
        return 1.0 - self.r
