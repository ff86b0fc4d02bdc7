"""DepthDrift: the distribution changes with depth below the root."""

from __future__ import annotations

from typing import Any

import numpy as np

from brwsim.families.base import Component, Family, Moments, check_positive
from brwsim.families.context import _families, _ranges
from brwsim.families.tempered import Tempered
from brwsim.kernels import dist as K
from brwsim.theory.contextual import DepthSpine

__all__ = ["DepthDrift"]


class DepthDrift(Family):
    """The distribution changes with depth below the current root (drafts get harder further out).

    Parameters
    ----------
    families : list of Family
        ``families[d]`` generates the children of nodes at depth d below the root (the
        root, d = 0, uses ``families[0]``); depths beyond the list use the last one.

    ``DepthDrift.tempered(family, temperatures)`` builds the common case of one family at
    rising temperatures. Moments and ``sample_full`` are those of the root's family.
    """

    name = "depthdrift"
    param_kinds = {"families": "families"}
    example = "depthdrift(families=[geometric(r=0.3), dirichlet(alpha=0.3, vocab=50)])"
    iid = False

    def __init__(self, families: Any) -> None:
        self.families = _families(families, "depthdrift")

    @classmethod
    def tempered(cls, family: Family, temperatures: Any) -> "DepthDrift":
        """One family at temperature ``temperatures[d]`` at depth d."""

        return cls([Tempered(family, check_positive("temperature", t)) for t in temperatures])

    def params(self) -> dict[str, Any]:
        return {"families": list(self.families)}

    def components(self, beta: float = 1.0) -> list[Component]:
        return _ranges(self.families, beta)[0]

    def context_program(self, beta: float = 1.0) -> np.ndarray:
        return np.concatenate([[K.CTX_DEPTH, len(self.families)], _ranges(self.families, beta)[1]])

    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        return self.families[0].sample_full(rng, beta)

    def moments(self, n: int | None = None, seed: int = 0) -> Moments:
        return self.families[0].moments(n=n, seed=seed)

    def spine_law(self):
        """The root family's law (``families[0]``)."""
        return self.families[0].spine_law()

    def context_spine(self) -> DepthSpine:
        """One spine law per depth below the root, the last repeating."""
        return DepthSpine([f.cached_spine_law() for f in self.families])
