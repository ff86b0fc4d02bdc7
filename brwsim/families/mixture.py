"""Mixture: each node picks one component family."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from brwsim.errors import UserError
from brwsim.families.base import Component, Family, Moments
from brwsim.theory.laws import mixture_law
from brwsim.validate import check_vector, echo

__all__ = ["Mixture"]


def _as_family(obj: Any, what: str) -> Family:
    if not isinstance(obj, Family):
        raise UserError(f"{what} must be a family, got {echo(obj)}")
    return obj


class Mixture(Family):
    """Each node picks one component family with the given weights.

    Moments are the weighted component moments (standard errors combined).
    """

    name = "mixture"
    param_kinds = {"families": "families", "weights": "list"}
    example = "mixture(families=[uniform(k=3), geometric(r=0.5)], weights=[0.5, 0.5])"

    def __init__(self, families: Any, weights: Any = None) -> None:
        if not isinstance(families, (list, tuple)) or not families:
            raise UserError("mixture needs a non-empty list of families")
        self.families = [_as_family(f, f"families[{i}]") for i, f in enumerate(families)]
        for i, f in enumerate(self.families):
            if len(f.context_program()) > 1:
                raise UserError(f"families[{i}]: a mixture of context-dependent families is not "
                                "supported; use markovregime(persistence=0) for an i.i.d. mix")
        w = np.ones(len(families)) if weights is None else check_vector("weights", weights)
        if w.size != len(self.families):
            raise UserError(f"mixture has {len(self.families)} families but {w.size} weights")
        if w.max() <= 0:
            raise UserError("mixture weights must be finite, non-negative and not all zero")
        w = w / w.max()                       # no overflow of the sum (weights up to 1e308)
        self.weights = w / w.sum()

    def params(self) -> dict[str, Any]:
        return {"families": list(self.families), "weights": [float(x) for x in self.weights]}

    def components(self, beta: float = 1.0) -> list[Component]:
        out = []
        for fam, w in zip(self.families, self.weights):
            for comp in fam.components(beta):
                comp.weight *= w
                out.append(comp)
        return out

    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        i = rng.choice(len(self.families), p=self.weights)
        return self.families[i].sample_full(rng, beta)

    def moments(self, n: int | None = None, seed: int = 0) -> Moments:
        ms = [f.moments(n=n, seed=seed) for f in self.families]
        w = self.weights
        comb = lambda xs: float(np.dot(w, xs))  # noqa: E731
        se = lambda xs: float(math.sqrt(np.dot(w * w, np.square(xs))))  # noqa: E731
        return Moments(comb([m.mu for m in ms]), comb([m.mu2 for m in ms]),
                       se([m.mu_se for m in ms]), se([m.mu2_se for m in ms]),
                       comb([m.h2 for m in ms]), se([m.h2_se for m in ms]),
                       exact=all(m.exact for m in ms))

    def spine_law(self):
        """The weighted sum of the components' laws (merged atoms when all are atoms)."""

        return mixture_law([f.spine_law() for f in self.families], self.weights)

    def top1_mean(self) -> float | None:
        parts = [f.top1_mean() for f in self.families]
        return None if any(p is None for p in parts) else float(np.dot(self.weights, parts))

    def tempered_family(self, beta: float) -> "Mixture | None":
        parts = [f.tempered_family(beta) for f in self.families]
        return None if any(p is None for p in parts) else Mixture(parts, self.weights)
