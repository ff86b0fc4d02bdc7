"""The optimal tree (the oracle): the P nodes of highest true path probability."""

from __future__ import annotations

from typing import Any

from brwsim.engine import check_grow_status, grow_root, run_iterations, start_threshold
from brwsim.kernels.tree import NO_DEPTH_CAP, new_workspace
from brwsim.policies.base import Policy, new_outputs, optional_int

__all__ = ["Optimal"]


class Optimal(Policy):
    """The optimal tree: the P nodes of highest true path probability (the default).

    Ties break by depth, then rank path; this is :func:`brwsim.engine.run_iterations`.

    Parameters
    ----------
    max_depth : int, optional
        Only nodes of depth <= ``max_depth`` may enter: the oracle under a draft-depth cap
        such as EAGLE-2's 6 or EAGLE-3's 8 (still the top P by path probability among
        them, since the restriction is prefix-closed). Errors when fewer than P nodes of
        positive probability exist within the cap.
    """

    name = "optimal"

    def __init__(self, max_depth: int | None = None) -> None:
        self.max_depth = optional_int("max_depth", max_depth, 1)

    def params(self) -> dict[str, Any]:
        return {"max_depth": self.max_depth}

    @property
    def depth_cap(self) -> int:
        """The kernels' depth cap (``NO_DEPTH_CAP`` when unconstrained)."""

        return NO_DEPTH_CAP if self.max_depth is None else self.max_depth

    def run(self, spec, budgets, key, first, count):
        acc, exp, dep, _, _ = run_iterations(spec, budgets, key, first, count,
                                             max_depth=self.depth_cap)
        return acc, exp, dep

    def run_roots(self, spec, budgets, roots):
        out = new_outputs(budgets.size, roots.keys.size)
        ws = new_workspace(budgets[-1], spec.head_cap)
        t = start_threshold(budgets[-1])
        for i in range(roots.keys.size):
            if i < roots.head.shape[0]:          # a preset root's recurrent state
                ws.levels.head[0, :roots.head.shape[1]] = roots.head[i]
            v, t, ws = grow_root(spec, roots, i, budgets, self.depth_cap, t, ws, out, i)
            check_grow_status(v, self.depth_cap)
        return out
