"""Fixed: one fixed probability vector at every node."""

from __future__ import annotations

from typing import Any

import numpy as np

from brwsim.errors import UserError
from brwsim.families.base import (
    Component,
    Family,
    Moments,
    log_or_minf,
    tempered_listed,
)
from brwsim.kernels import dist as K
from brwsim.theory.laws import SpineLaw, SpineSteps
from brwsim.validate import check_probabilities

__all__ = ["Fixed"]


class Fixed(Family):
    """One fixed vector at every node (e.g. a measured positional acceptance vector).

    ``probs`` is sorted internally; a sum below 1 leaves the remaining mass to a token
    outside any tree. Moments sum over the listed tokens only.
    """

    name = "fixed"
    param_kinds = {"probs": "list"}
    example = "fixed(probs=[0.5, 0.3, 0.15])"

    def __init__(self, probs: Any) -> None:
        q = check_probabilities("probs", probs)
        q = np.sort(q[q > 0])[::-1]
        if q[0] >= 1.0:
            raise UserError("probs has a token of probability 1: every tree would be a chain "
                            "of P nodes (X = P); brwsim needs max(probs) < 1")
        self.probs = q

    def params(self) -> dict[str, Any]:
        return {"probs": [float(x) for x in self.probs]}

    def components(self, beta: float = 1.0) -> list[Component]:
        return [Component(K.TABLE, data=log_or_minf(tempered_listed(self.probs, beta)))]

    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        return tempered_listed(self.probs, beta)

    def moments(self, n: int | None = None, seed: int = 0) -> Moments:
        lq = np.log(self.probs)
        mu = float(-(self.probs * lq).sum())
        return Moments(mu, float((self.probs * lq * lq).sum()), h2=mu * mu)

    def spine_law(self) -> SpineLaw:
        """Atoms -log q_i of weight q_i (mass sum q, possibly below 1)."""
        return SpineSteps.atoms(-np.log(self.probs), self.probs)

    def tempered_family(self, beta: float) -> Family:
        return self if beta == 1.0 else Fixed(tempered_listed(self.probs, beta))

    def top1_mean(self) -> float:
        return float(self.probs[0])
