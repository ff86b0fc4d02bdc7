"""Plain-Python reference: best-first search with ``heapq`` over any node distribution.

Two uses, one implementation:

* the oracle of the tests: with :func:`env_provider` it reads the very environment the
  numba kernels see, so both must give identical trees, accepted counts and depths;
* the baseline of the benchmarks: with :func:`sampling_provider` it draws every popped
  node's full distribution with numpy (``family.sample_full``), the straightforward way
  to simulate the model, and the speed-up of the kernels is measured against it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence

import numpy as np

from brwsim.environment import node_logprobs
from brwsim.families.base import Family
from brwsim.kernels.select import TIE_REL

__all__ = ["best_first", "env_provider", "sampling_provider"]

Provider = Callable[[tuple[int, ...]], np.ndarray]


class _Node:
    """Heap entry ordered as the kernels order nodes: position (ties within TIE_REL of the
    larger), then depth, then lexicographic rank path."""

    __slots__ = ("s", "depth", "path")

    def __init__(self, s: float, path: tuple[int, ...]) -> None:
        self.s, self.depth, self.path = s, len(path), path

    def __lt__(self, other: "_Node") -> bool:
        a, b = self.s, other.s
        if a != b and (math.isinf(a) or math.isinf(b)
                       or abs(a - b) > TIE_REL * max(abs(a), abs(b))):
            return a < b
        return (self.depth, self.path) < (other.depth, other.path)



def env_provider(family: Family, seed: int, iteration: int, k: int = 64) -> Provider:
    """Log-probabilities of a node of the counter-based environment (first ``k`` ranks)."""

    spec = family.spec()
    cache: dict[tuple[int, ...], np.ndarray] = {}

    def provide(path: tuple[int, ...]) -> np.ndarray:
        if path not in cache:
            cache[path] = node_logprobs(spec, seed, iteration, path, k)
        return cache[path]

    return provide


def sampling_provider(family: Family, rng: np.random.Generator) -> Provider:
    """Log-probabilities of a fresh exact numpy sample at every node (the baseline)."""
    cache: dict[tuple[int, ...], np.ndarray] = {}

    def provide(path: tuple[int, ...]) -> np.ndarray:
        if path not in cache:
            q = family.sample_full(rng)
            with np.errstate(divide="ignore"):
                cache[path] = np.log(q)
        return cache[path]

    return provide


def best_first(provide: Provider, budgets: Sequence[int],
               path_uniform: Callable[[tuple[int, ...]], float] | None = None,
               max_depth: int | None = None):
    """Top-P nodes by path probability, popped in order from a binary heap.

    Ties (positions within ``TIE_REL`` of the larger) break by depth, then lexicographic
    rank path (the kernels' order). With
    ``max_depth`` only nodes of depth <= max_depth are candidates.

    Parameters
    ----------
    provide : callable
        path -> sorted log-probabilities of that node's next-token distribution.
    budgets : sequence of int
        Budgets P, ascending.
    path_uniform : callable, optional
        path -> the target's sampling uniform at that node; gives the accepted counts.
    max_depth : int, optional
        Depth cap of the tree (None: unconstrained).

    Returns
    -------
    tuple of lists
        (E[X | T_P], X_P or None, depth of T_P) for each budget.
    """
    p_max = max(budgets)
    heap: list[_Node] = []

    def push(parent_s: float, path: tuple[int, ...]) -> None:
        lq = provide(path[:-1])
        r = path[-1]
        if max_depth is not None and len(path) > max_depth:
            return
        if r < lq.size and lq[r] > -math.inf:
            heapq.heappush(heap, _Node(parent_s - lq[r], path))

    push(0.0, (0,))
    popped: list[tuple[float, int, tuple[int, ...]]] = []
    pos_of: dict[tuple[int, ...], float] = {(): 0.0}
    while heap and len(popped) < p_max:
        node = heapq.heappop(heap)
        s, depth, path = node.s, node.depth, node.path
        popped.append((s, depth, path))
        pos_of[path] = s
        push(s, path + (0,))
        push(pos_of[path[:-1]], path[:-1] + (path[-1] + 1,))
    index = {path: i for i, (_, _, path) in enumerate(popped)}
    sampled: list[int] = []
    if path_uniform is not None:
        path: tuple[int, ...] = ()
        while True:
            lq = provide(path)
            u = path_uniform(path)
            cum = 0.0
            nxt = None
            for r, v in enumerate(lq):
                if v == -math.inf:
                    break
                cum += math.exp(v)
                if u <= cum:
                    nxt = path + (r,)
                    break
            if nxt is None or nxt not in index:
                break
            sampled.append(index[nxt])
            path = nxt
    expected, accepted, depths = [], [], []
    for p in budgets:
        top = popped[:p]
        expected.append(math.fsum(math.exp(-s) for s, _, _ in top))
        accepted.append(sum(1 for i in sampled if i < p) if path_uniform is not None else None)
        depths.append(max(d for _, d, _ in top))
    return expected, accepted, depths
