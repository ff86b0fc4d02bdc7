"""Static shapes: a fixed tree of rank paths, grown in a priority order that nests the budgets.

Static shapes (chain, k-ary, expansion, Sequoia) map to the random environment by rank
paths: "the child of rank r" is the target's r-th most likely token at that node.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from brwsim.engine import run_policy
from brwsim.errors import UserError
from brwsim.kernels import policies as _k
from brwsim.policies.base import Policy, new_outputs

__all__ = ["Shape", "StaticPolicy", "compile_shape"]

#: Budgets up to this many levels x head buffer entries are allowed for static shapes.
_MAX_LEVEL_CELLS = 1 << 27


class Shape(NamedTuple):
    """A static shape in pre-order, with the priority order that nests its budgets."""

    depth: np.ndarray      # int64, depth of each pre-order node (1 = child of the root)
    rank: np.ndarray       # int64, rank within its parent
    leaf: np.ndarray       # int8, 1 if no child of it is in the shape
    order: np.ndarray      # int32, order[j] = pre-order index of the node of priority j

    @property
    def size(self) -> int:
        return int(self.depth.size)


def compile_shape(parent: np.ndarray, rank: np.ndarray) -> Shape:
    """Pre-order arrays of nodes given in priority order as (parent priority, rank).

    ``parent[i] < i`` (-1 for a child of the root), so every prefix is prefix-closed.
    """
    n = parent.size
    children: list[list[int]] = [[] for _ in range(n + 1)]
    for i in range(n):
        children[parent[i] + 1].append(i)
    depth = np.empty(n, np.int64)
    pre: list[int] = []
    stack = [(i, 1) for i in sorted(children[0], key=lambda i: rank[i], reverse=True)]
    while stack:
        i, d = stack.pop()
        depth[i] = d
        pre.append(i)
        stack.extend((c, d + 1) for c in sorted(children[i + 1], key=lambda c: rank[c],
                                                   reverse=True))
    pre_arr = np.asarray(pre, dtype=np.int64)
    order = np.empty(n, np.int32)
    order[pre_arr] = np.arange(n, dtype=np.int32)
    leaf = np.array([0 if children[i + 1] else 1 for i in pre], dtype=np.int8)
    return Shape(np.ascontiguousarray(depth[pre_arr]), np.ascontiguousarray(rank[pre_arr]),
                  leaf, order)


class StaticPolicy(Policy):
    """A fixed shape of rank paths, grown in a priority order that nests the budgets."""

    def priority(self, p_max: int) -> tuple[np.ndarray, np.ndarray]:
        """(parent priority, rank) of the first <= p_max nodes, in priority order."""
        raise NotImplementedError

    def shape(self, p_max: int) -> list[tuple[int, ...]]:
        """Rank paths of the tree of budget ``p_max``, in priority order.

        When the policy's trees nest (all but an unsorted :class:`Sequoia`), the tree of
        any budget P <= ``p_max`` is the first P of them (all of them if fewer).
        """
        parent, rank = self.priority(p_max)
        paths: list[tuple[int, ...]] = []
        for p, r in zip(parent.tolist(), rank.tolist()):
            paths.append((paths[p] if p >= 0 else ()) + (r,))
        return paths

    def _compiled(self, p_max: int) -> Shape:
        cache = self.__dict__.setdefault("_shape_cache", {})
        if p_max not in cache:
            parent, rank = self.priority(p_max)
            if len(cache) >= 64:
                cache.clear()
            cache[p_max] = compile_shape(np.asarray(parent, np.int64), np.asarray(rank, np.int64))
        return cache[p_max]

    def run_roots(self, spec, budgets, roots):
        sh = self._compiled(int(budgets[-1]))
        out = new_outputs(budgets.size, roots.keys.size)
        levels = int(sh.depth.max()) + 1
        if levels * max(spec.head_cap, 1) > _MAX_LEVEL_CELLS:
            raise UserError(f"{self!r}: a tree of depth {levels - 1} is too deep for this "
                            "family's buffers; use a smaller budget")
        run_policy(_k.static_chunk, spec, roots, sh.depth, sh.rank, sh.leaf, sh.order,
                   np.minimum(budgets, sh.size), out)
        return out
