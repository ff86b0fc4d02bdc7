"""The k-ary tree filled breadth-first."""

from __future__ import annotations

from typing import Any

import numpy as np

from brwsim.families.base import check_int
from brwsim.policies.static import StaticPolicy

__all__ = ["KAry"]


class KAry(StaticPolicy):
    """The k-ary tree filled breadth-first (ranks 0..k-1 under every node), cut at P nodes.

    Parameters
    ----------
    k : int
        Children per node (>= 1; k = 1 is the chain).
    """

    name = "kary"

    def __init__(self, k: int) -> None:
        self.k = check_int("k", k, 1)

    def params(self) -> dict[str, Any]:
        return {"k": self.k}

    def priority(self, p_max):
        i = np.arange(p_max, dtype=np.int64)
        return i // self.k - 1, i % self.k
