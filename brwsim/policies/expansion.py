"""Static expansion trees (SpecInfer/Medusa style)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from brwsim.errors import UserError
from brwsim.families.base import check_int
from brwsim.policies.static import StaticPolicy

__all__ = ["Expansion"]


class Expansion(StaticPolicy):
    """A static expansion tree (SpecInfer/Medusa style), filled breadth-first, cut at P nodes.

    Every node of depth d - 1 has the top ``widths[d-1]`` children (ranks 0..w-1), so the
    full shape has w1 + w1 w2 + ... + w1...wD nodes and depth D = len(widths); a budget
    beyond that leaves the rest unused.

    Parameters
    ----------
    widths : list of int
        Children per node at each depth (each >= 1), e.g. ``[4, 2, 2]``.
    """

    name = "expansion"
    param_kinds = {"widths": "list"}

    def __init__(self, widths: Sequence[int]) -> None:
        if isinstance(widths, (str, bytes)) or not isinstance(widths, (Sequence, np.ndarray)) \
                or len(widths) == 0:
            raise UserError(f"widths must be a non-empty list of integers >= 1, got {widths!r}")
        self.widths = [check_int(f"widths[{i}]", w, 1) for i, w in enumerate(widths)]

    def params(self) -> dict[str, Any]:
        return {"widths": list(self.widths)}

    def priority(self, p_max):
        parents, ranks = [], []
        level = np.array([-1], np.int64)
        n = 0
        for w in self.widths:
            if n >= p_max:
                break
            # the first min(p_max - n, |level| w) children, in (parent, rank) order: never
            # more than p_max entries, however wide the level (widths of 10**9 included)
            idx = np.arange(min(p_max - n, level.size * w), dtype=np.int64)
            par = level[idx // w]
            parents.append(par)
            ranks.append(idx % w)
            level = np.arange(n, n + par.size, dtype=np.int64)
            n += par.size
        parent = np.concatenate(parents)[:p_max]
        return parent, np.concatenate(ranks)[:p_max]
