"""CorrelatedEntropy: AR(1) entropies along each path (Gaussian copula)."""

from __future__ import annotations

from typing import Any

import numpy as np

from brwsim.errors import UserError
from brwsim.families.entropytarget import EntropyTarget
from brwsim.kernels import dist as K
from brwsim.theory.contextual import DominatedSpine, NoTheory

__all__ = ["CorrelatedEntropy"]


class CorrelatedEntropy(EntropyTarget):
    """Entropy following an AR(1) process along each path (Gaussian copula).

    A latent z is N(0, 1) at the root and rho * z_parent + sqrt(1 - rho^2) N(0, 1) below;
    the node's entropy is the stationary law's quantile at Phi(z), and its distribution
    has the given shape with exactly that entropy (as :class:`EntropyTarget`). rho = 0 is
    the i.i.d. EntropyTarget; rho -> 1 makes long easy and hard stretches.
    """

    name = "correlatedentropy"
    param_kinds = {"entropies": "list"}
    example = "correlatedentropy(entropies=[0.5, 1.0, 2.0], rho=0.9)"
    iid = False

    def __init__(self, entropies: Any, rho: float, shape: str = "geometric",
                 vocab: int | None = None) -> None:
        try:
            r = float(rho)
        except (TypeError, ValueError):
            raise UserError(f"rho must be a number in (-1, 1), got {rho!r}") from None
        if not -1.0 < r < 1.0:
            raise UserError(f"rho must be in (-1, 1), got {rho!r}")
        super().__init__(entropies, shape, vocab)
        order = np.argsort(self.entropies, kind="stable")   # quantile map needs sorted values
        self.entropies = self.entropies[order]
        self.params_per_value = self.params_per_value[order]
        self.rho = r

    def params(self) -> dict[str, Any]:
        return {**super().params(), "rho": self.rho}

    def context_program(self, beta: float = 1.0) -> np.ndarray:
        return np.array([K.CTX_AR1, self.rho])

    def context_spine(self) -> DominatedSpine:
        """Every step is stochastically at least the smallest of the values' step laws.

        Whatever the latent path, a node's distribution is one of the values' (a
        geometric or Zipf law of that entropy), so the steps dominate the law whose
        distribution function is the largest of theirs: a proven bound, loose when the
        entropies are far apart (``docs/theory.md``, Section 7.3).
        """
        parts = self.value_laws()
        if parts is None:
            raise NoTheory(f"{self.name}: its {self.entropies.size} entropy values need more "
                           "exact atoms than the theory builds: no proven bound")
        return DominatedSpine(parts[0])
