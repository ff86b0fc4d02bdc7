"""Sequoia's static tree from a positional acceptance vector."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any

import numpy as np

from brwsim.errors import UserError
from brwsim.families.base import Family, check_int
from brwsim.kernels import policies as _k
from brwsim.policies.base import new_outputs, optional_int
from brwsim.policies.static import StaticPolicy

__all__ = ["Sequoia"]


class Sequoia(StaticPolicy):
    """The static tree that Sequoia's dynamic programme builds for a positional acceptance vector.

    Under the positional assumption, the child of rank r of any node is accepted with
    probability ``acceptance[r]``, and a node may have the child of rank r only together
    with the children of ranks 0..r-1 (Sequoia's DP, ``tree_search.py`` of
    Infini-AI-Lab/Sequoia: a node with b children has the children 1..b of its 1-indexed
    vector). The tree of budget P is the DP's best tree of P draft nodes (P + 1 with the
    root, which Sequoia counts) and at most ``max_depth`` draft levels (Sequoia's "depth"
    d counts the root too: its tree of (size n, depth d) is ``Sequoia(a, max_depth=d -
    1)`` at P = n - 1), applied to the random environment by rank paths.

    * A non-increasing vector: the DP's tree is the top P nodes by path product (ties by
      depth, then rank path), i.e. the optimal tree of the environment ``Fixed(acceptance)``,
      grown best-first with ``heapq``; the trees of the budgets nest. Ranks of acceptance 0
      are never used.
    * Any other vector: the tree is the DP's own (O(P^2 L B) time for L levels and B
      ranks), computed per budget, and the trees of different budgets need not nest. It
      is *not* the optimal tree of ``Fixed(acceptance)``, which sorts its vector: for
      ``[0.3, 0.35, 0.1]`` at P = 1 the DP takes rank 0 (0.3), never rank 1 alone.

    Parameters
    ----------
    acceptance : list of float
        Acceptance probability of the child of each rank (each in [0, 1], sum <= 1,
        one of them positive), in rank order 0, 1, ...
    max_depth : int, optional
        Cap on the draft depth (>= 1; the root is depth 0).
    """

    name = "sequoia"
    param_kinds = {"acceptance": "list"}
    #: Largest DP size (m^2 L B / 2 steps) accepted for an unsorted vector.
    MAX_DP_STEPS = 4_000_000_000

    def __init__(self, acceptance: Sequence[float], max_depth: int | None = None) -> None:
        try:
            a = np.asarray(acceptance, dtype=np.float64).ravel()
        except (TypeError, ValueError):
            a = None
        if a is None or isinstance(acceptance, str) or a.size == 0:
            raise UserError(f"acceptance must be a non-empty list of probabilities, "
                            f"got {acceptance!r}")
        if not np.all(np.isfinite(a)) or np.any(a < 0) or np.any(a > 1):
            raise UserError("acceptance must hold probabilities in [0, 1]")
        if a.sum() > 1.0 + 1e-9:
            raise UserError(f"acceptance must sum to at most 1, got {a.sum():.12g}")
        if not np.any(a > 0):
            raise UserError("acceptance must contain a positive probability")
        self.acceptance = a
        self.max_depth = optional_int("max_depth", max_depth, 1)

    @property
    def nested(self) -> bool:
        """True when the trees of all budgets nest (a non-increasing vector)."""
        return bool(np.all(np.diff(self.acceptance) <= 0))

    @classmethod
    def from_family(cls, family: Family, size: int = 32, samples: int = 2000, seed: int = 0,
                    max_depth: int | None = None) -> "Sequoia":
        """Sequoia fitted to a family: the mean of its sorted top-``size`` probabilities.

        Parameters
        ----------
        family : Family
            The environment whose node distributions are averaged (``sample_full``).
        size : int, default 32
            Length of the acceptance vector.
        samples : int, default 2000
            Node distributions averaged.
        seed : int, default 0
            Seed of the sampler.
        max_depth : int, optional
            Passed to the policy.
        """
        size = check_int("size", size, 1)
        samples = check_int("samples", samples, 1)
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0x5E0,)))
        tot = np.zeros(size)
        for _ in range(samples):
            q = np.asarray(family.sample_full(rng))[:size]
            tot[:q.size] += q
        return cls([float(x) for x in tot / samples], max_depth)

    def params(self) -> dict[str, Any]:
        return {"acceptance": [float(x) for x in self.acceptance], "max_depth": self.max_depth}

    def priority(self, p_max):
        if not self.nested:
            return self._dp_tree(p_max)
        a = self.acceptance
        ranks = np.argsort(-a, kind="stable")
        ranks = ranks[a[ranks] > 0]
        cost = -np.log(a[ranks])                 # S step of the j-th best child
        top = self.max_depth
        # entries (S, depth, rank path, parent priority, j, parent S): ties by depth then path
        heap = [(cost[0], 1, (int(ranks[0]),), -1, 0, 0.0)]
        parent, rank = [], []
        while heap and len(parent) < p_max:
            s, d, path, par, j, s_par = heapq.heappop(heap)
            me = len(parent)
            parent.append(par)
            rank.append(path[-1])
            if top is None or d < top:
                heapq.heappush(heap, (s + cost[0], d + 1, path + (int(ranks[0]),), me, 0, s))
            if j + 1 < ranks.size:
                heapq.heappush(heap, (s_par + cost[j + 1], d, path[:-1] + (int(ranks[j + 1]),),
                                      par, j + 1, s_par))
        return np.asarray(parent, np.int64), np.asarray(rank, np.int64)

    def _dp_tree(self, p_max: int) -> tuple[np.ndarray, np.ndarray]:
        """(parent, rank) of the DP's tree of ``p_max`` draft nodes, breadth-first."""
        nb = self.acceptance.size
        levels = (self.max_depth if self.max_depth is not None else p_max) + 1
        cap, width = 1, 1                        # nodes (root included) within the levels
        for _ in range(levels - 1):
            width *= nb
            cap += width
            if cap > p_max:
                break
        m = min(p_max + 1, cap)
        if m * m / 2 * levels * nb > self.MAX_DP_STEPS:
            raise UserError(f"{self!r}: Sequoia's DP for an unsorted vector at P = {p_max} "
                            f"needs ~{m * m // 2 * levels * nb:.3g} steps; give max_depth or a "
                            "non-increasing vector")
        p = np.concatenate([[0.0], self.acceptance])
        _, Y, _, arg = _k.sequoia_dp(p, m, levels)
        parent, rank = [], []
        queue = [(m, levels, int(arg[m, levels]))]   # DP states, breadth-first
        head = 0
        while head < len(queue):
            mm, ll, b = queue[head]
            me = head - 1                        # priority index of this node (root: -1)
            head += 1
            kids = []
            while b >= 2:
                y = int(Y[mm, ll, b])
                kids.append((mm - y, ll - 1, int(arg[mm - y, ll - 1])))
                mm, b = y, b - 1
            if b == 1:
                kids.append((mm - 1, ll - 1, int(arg[mm - 1, ll - 1])))
            for r, (cm, cl, cb) in enumerate(reversed(kids)):
                parent.append(me)
                rank.append(r)
                queue.append((cm, cl, cb))
        return np.asarray(parent, np.int64), np.asarray(rank, np.int64)

    def run_roots(self, spec, budgets, roots):
        if self.nested:
            return super().run_roots(spec, budgets, roots)
        acc, exp, dep = new_outputs(budgets.size, roots.keys.size)
        for j, b in enumerate(budgets.tolist()):
            one = super().run_roots(spec, np.array([b], np.int64), roots)
            acc[j], exp[j], dep[j] = one[0][0], one[1][0], one[2][0]
        return acc, exp, dep
