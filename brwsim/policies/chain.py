"""The greedy chain: the top-1 path."""

from __future__ import annotations

import numpy as np

from brwsim.policies.static import StaticPolicy

__all__ = ["Chain"]


class Chain(StaticPolicy):
    """The greedy top-1 path: P nodes, each the most likely child of the previous one."""

    name = "chain"

    def priority(self, p_max):
        return np.arange(p_max, dtype=np.int64) - 1, np.zeros(p_max, np.int64)
