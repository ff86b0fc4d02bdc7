"""Drafting policies: how a drafter chooses its tree of P draft nodes.

A policy is evaluated on the very environment of the optimal tree (same seed, iteration
and node keys) and against the same sampled target path, so policies compare on common
random numbers. For each budget P it records the sampled accepted count X (path nodes
inside its tree), E[X | T] (the sum of TRUE path probabilities over its tree) and the
depth of its tree. A policy's trees are prefix-closed sets of at most P nodes, so no policy
can beat :class:`Optimal` on E[X | T] in any iteration; they are also nested (the tree of P
inside the tree of P + 1) except for :class:`Sequoia` with an unsorted vector, whose DP
trees of different budgets need not nest.
A policy may use fewer than P nodes (a static shape smaller than P, a dynamic tree with
fewer candidates); the rest of its budget is wasted.

String forms (for the CLI and configs), parsed by :func:`parse_policy`::

    optimal()   chain()   kary(k=4)   expansion(widths=[4, 2, 2])
    sequoia(acceptance=[0.6, 0.15, 0.05], max_depth=8)
    dynamic(depth=6, topk=10, total=59)   noisy(sigma=0.5, T=1.0, gamma=0.5)

Static shapes (chain, k-ary, expansion, Sequoia) map to the random environment by rank
paths: "the child of rank r" is the target's r-th most likely token at that node.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from brwsim.engine import check_grow_status, run_iterations, start_threshold
from brwsim.errors import UserError
from brwsim.families.base import Family, Spec, _fmt, check_int, check_positive
from brwsim.families.parse import bind_call, parse_text
from brwsim.kernels import policies as _k
from brwsim.kernels.dist import ROOT_DRAW, ROOT_PRESET
from brwsim.kernels.rng import root_key
from brwsim.kernels.tree import NO_DEPTH_CAP, grow_tree, new_workspace

__all__ = ["Policy", "Roots", "Optimal", "Chain", "KAry", "Expansion", "Sequoia", "Dynamic", "Noisy",
           "POLICIES", "DEFAULT_POLICY", "parse_policy", "run_policy"]

#: Budgets up to this many levels x head buffer entries are allowed for static shapes.
_MAX_LEVEL_CELLS = 1 << 27


class Policy:
    """Base class of drafting policies.

    Subclasses set ``name`` (the lower-case string-form name), store their parameters and
    implement :meth:`params` and :meth:`run`.
    """

    name: str = "policy"

    def params(self) -> dict[str, Any]:
        """Parameters as a JSON-serialisable dict (the string form's arguments)."""
        return {}

    def run(self, spec: Spec, budgets: np.ndarray, key: np.uint64, first: int,
            count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Iterations ``first .. first + count - 1``: see :func:`run_policy`."""
        return self.run_roots(spec, budgets, Roots.stationary(key, first, count))

    def run_roots(self, spec: Spec, budgets: np.ndarray,
                  roots: "Roots") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The policy's trees below explicit roots (one output column per root)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={_fmt(v)}" for k, v in self.params().items() if v is not None)
        return f"{self.name}({args})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and repr(other) == repr(self)

    def __hash__(self) -> int:
        return hash(repr(self))


class Roots(NamedTuple):
    """Roots of trees: keys, and how their context is set (see ``brwsim.kernels.dist``).

    ``mode`` is ROOT_DRAW (each root's context drawn from the stationary law; ``ci``/``cf``
    ignored) or ROOT_PRESET (context ``ci[i]``, latent ``cf[i]``: generation runs). ``head``
    holds one preset head row per root where the family keeps a recurrent state there
    (``charlstm``), or no rows.
    """

    keys: np.ndarray
    mode: int
    ci: np.ndarray
    cf: np.ndarray
    head: np.ndarray = np.empty((0, 1))

    @classmethod
    def stationary(cls, key: np.uint64, first: int, count: int) -> "Roots":
        """The roots of iterations first .. first + count - 1 of a seed key."""

        keys = np.array([root_key(np.uint64(key), np.uint64(first + i)) for i in range(count)],
                        dtype=np.uint64)
        return cls(keys, ROOT_DRAW, np.zeros(count, np.int64), np.zeros(count))

    @classmethod
    def preset(cls, key: int, ci: int, cf: float, head: np.ndarray | None = None) -> "Roots":
        """One root with a given context (the next call of a generation run).

        ``head``: the root's head row, where the family carries a recurrent state.
        """
        rows = np.empty((0, 1)) if head is None else np.ascontiguousarray(head, np.float64)[None, :]
        return cls(np.array([key], np.uint64), ROOT_PRESET, np.array([ci], np.int64),
                   np.array([cf], np.float64), rows)


def _outputs(m: int, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (np.empty((m, count), np.int32), np.empty((m, count)), np.empty((m, count), np.int32))


def _optional_int(name: str, value: Any, minimum: int) -> int | None:
    if value is None or (isinstance(value, str) and value.lower() == "none"):
        return None
    return check_int(name, value, minimum)


class Optimal(Policy):
    """The optimal tree: the P nodes of highest true path probability (the default).

    Ties break by depth, then rank path; this is :func:`brwsim.simulate.run_iterations`.

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
        self.max_depth = _optional_int("max_depth", max_depth, 1)

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
        acc, exp, dep = _outputs(budgets.size, roots.keys.size)
        ws = new_workspace(budgets[-1], spec.head_cap)
        t = start_threshold(budgets[-1])
        for i in range(roots.keys.size):
            if i < roots.head.shape[0]:          # a preset root's recurrent state
                ws[11][0, :roots.head.shape[1]] = roots.head[i]
            v, t, ws = grow_tree(spec.kinds, spec.cw, spec.fpar, spec.ipar, spec.data, spec.cprog,
                                 spec.head_cap, roots.keys[i], roots.mode, roots.ci[i],
                                 roots.cf[i], budgets, self.depth_cap, t, ws, acc, exp, dep, i)
            check_grow_status(v, self.depth_cap)
        return acc, exp, dep


class _Shape(NamedTuple):
    """A static shape in pre-order, with the priority order that nests its budgets."""

    depth: np.ndarray      # int64, depth of each pre-order node (1 = child of the root)
    rank: np.ndarray       # int64, rank within its parent
    leaf: np.ndarray       # int8, 1 if no child of it is in the shape
    order: np.ndarray      # int32, order[j] = pre-order index of the node of priority j

    @property
    def size(self) -> int:
        return int(self.depth.size)


def _compile_shape(parent: np.ndarray, rank: np.ndarray) -> _Shape:
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
    return _Shape(np.ascontiguousarray(depth[pre_arr]), np.ascontiguousarray(rank[pre_arr]),
                  leaf, order)


class _StaticPolicy(Policy):
    """A fixed shape of rank paths, grown in a priority order that nests the budgets."""

    def _priority(self, p_max: int) -> tuple[np.ndarray, np.ndarray]:
        """(parent priority, rank) of the first <= p_max nodes, in priority order."""
        raise NotImplementedError

    def shape(self, p_max: int) -> list[tuple[int, ...]]:
        """Rank paths of the tree of budget ``p_max``, in priority order.

        When the policy's trees nest (all but an unsorted :class:`Sequoia`), the tree of
        any budget P <= ``p_max`` is the first P of them (all of them if fewer).
        """
        parent, rank = self._priority(p_max)
        paths: list[tuple[int, ...]] = []
        for p, r in zip(parent.tolist(), rank.tolist()):
            paths.append((paths[p] if p >= 0 else ()) + (r,))
        return paths

    def _compiled(self, p_max: int) -> _Shape:
        cache = self.__dict__.setdefault("_shape_cache", {})
        if p_max not in cache:
            parent, rank = self._priority(p_max)
            if len(cache) >= 64:
                cache.clear()
            cache[p_max] = _compile_shape(np.asarray(parent, np.int64), np.asarray(rank, np.int64))
        return cache[p_max]

    def run_roots(self, spec, budgets, roots):
        sh = self._compiled(int(budgets[-1]))
        acc, exp, dep = _outputs(budgets.size, roots.keys.size)
        levels = int(sh.depth.max()) + 1
        if levels * max(spec.head_cap, 1) > _MAX_LEVEL_CELLS:
            raise UserError(f"{self!r}: a tree of depth {levels - 1} is too deep for this "
                            "family's buffers; use a smaller budget")
        _k.static_chunk(spec.kinds, spec.cw, spec.fpar, spec.ipar, spec.data, spec.cprog,
                        spec.head_cap, roots.keys, roots.mode, roots.ci, roots.cf, roots.head,
                        sh.depth, sh.rank, sh.leaf, sh.order, np.minimum(budgets, sh.size), acc,
                        exp, dep)
        return acc, exp, dep


class Chain(_StaticPolicy):
    """The greedy top-1 path: P nodes, each the most likely child of the previous one."""

    name = "chain"

    def _priority(self, p_max):
        return np.arange(p_max, dtype=np.int64) - 1, np.zeros(p_max, np.int64)


class KAry(_StaticPolicy):
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

    def _priority(self, p_max):
        i = np.arange(p_max, dtype=np.int64)
        return i // self.k - 1, i % self.k


class Expansion(_StaticPolicy):
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

    def __init__(self, widths: Sequence[int]) -> None:
        if isinstance(widths, (str, bytes)) or not isinstance(widths, (Sequence, np.ndarray)) \
                or len(widths) == 0:
            raise UserError(f"widths must be a non-empty list of integers >= 1, got {widths!r}")
        self.widths = [check_int(f"widths[{i}]", w, 1) for i, w in enumerate(widths)]

    def params(self) -> dict[str, Any]:
        return {"widths": list(self.widths)}

    def _priority(self, p_max):
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


class Sequoia(_StaticPolicy):
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
        self.max_depth = _optional_int("max_depth", max_depth, 1)

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

    def _priority(self, p_max):
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
        acc, exp, dep = _outputs(budgets.size, roots.keys.size)
        for j, b in enumerate(budgets.tolist()):
            one = super().run_roots(spec, np.array([b], np.int64), roots)
            acc[j], exp[j], dep[j] = one[0][0], one[1][0], one[2][0]
        return acc, exp, dep


class Dynamic(Policy):
    """EAGLE-2/3 dynamic trees: expand the best nodes layer by layer, then rerank.

    Layer 1 is the root's top-``topk`` children. Each later layer takes the ``topk`` nodes
    of the newest layer with the highest path value and expands each into its top-``topk``
    children. After ``depth`` layers, the tree of budget P is the top min(P, ``total``) of
    all generated candidates by path value (ties by depth, then generation order); it is
    prefix-closed because a child's value never exceeds its parent's. The drafter here
    knows the true probabilities (combine with noise only through :class:`Noisy`).

    EAGLE's convention (``SafeAILab/EAGLE``, ``eagle/model/cnets.py``, ``topK_genrate``,
    commit cb7e084): its user-facing ``depth`` D counts the layers after the first (the
    loop ``for i in range(depth)`` follows the root's top-k), and its ``total_token`` N
    counts the root, which is prepended to the drafted tokens (``self.total_tokens =
    total_tokens - 1``). So EAGLE's tree for (D, k, N) is ``Dynamic(depth=D + 1, topk=k,
    total=N - 1)``, at any P >= N - 1. The released defaults are ``depth=5, top_k=10,
    total_token=60`` for EAGLE-2 (``eagle/evaluation/gen_ea_answer_*.py``; the EAGLE-2
    paper's "depth 6" counts layers) and ``depth=7, top_k=10, total_token=60`` for EAGLE-3
    (``EaModel.from_pretrained``; the EAGLE-3 paper's depth 8): ``Dynamic(6, 10, 59)`` and
    ``Dynamic(8, 10, 59)``.

    Parameters
    ----------
    depth : int
        Number of layers (>= 1), i.e. the tree's maximal depth (EAGLE's depth + 1).
    topk : int
        Nodes expanded per layer and children per expanded node (>= 1).
    total : int, optional
        Cap on the number of draft nodes (EAGLE's ``total_token`` - 1); default: no cap
        beyond P.
    """

    name = "dynamic"

    def __init__(self, depth: int, topk: int, total: int | None = None) -> None:
        self.depth = check_int("depth", depth, 1)
        self.topk = check_int("topk", topk, 1)
        self.total = _optional_int("total", total, 1)
        if self.topk + (self.depth - 1) * self.topk ** 2 > 1 << 26:
            raise UserError(f"dynamic: depth * topk**2 = {self.depth * self.topk ** 2} "
                            "candidates exceeds the supported maximum 2**26")

    def params(self) -> dict[str, Any]:
        return {"depth": self.depth, "topk": self.topk, "total": self.total}

    def run_roots(self, spec, budgets, roots):
        b = budgets if self.total is None else np.minimum(budgets, self.total)
        acc, exp, dep = _outputs(budgets.size, roots.keys.size)
        _k.dynamic_chunk(spec.kinds, spec.cw, spec.fpar, spec.ipar, spec.data, spec.cprog,
                         spec.head_cap, roots.keys, roots.mode, roots.ci, roots.cf, roots.head,
                         self.depth, self.topk, np.ascontiguousarray(b, dtype=np.int64), acc,
                         exp, dep)
        return acc, exp, dep


class Noisy(Policy):
    """Best-first by an imperfect drafter's estimate; acceptance uses the truth.

    The drafter's log-probability of the child of rank r of node v is
    ``log q_v[r] / T + sigma_d * Z`` (Z standard normal, a hash of the child's key, purpose
    ``NOISE``), renormalised over the node, where d >= 1 is the child's depth below the
    call's root and ``sigma_d = sigma * d**gamma``: with ``gamma > 0`` the drafter degrades
    the further it drafts from the last verified token (``gamma = 0``, the default, is the
    depth-independent drafter, bit for bit). The drafter scores the true top ``K = 64``
    ranks (all ranks if fewer) individually; the true mass m outside them enters the
    normaliser as its tempered mass times E[exp(sigma Z)] = exp(sigma**2 / 2). This is an
    approximation: the tempered mass of a tail of ranks >= K is taken as
    m * q_K**(1/T - 1), exact when the tail is flat at the first tail rank's probability
    q_K and never below any single tail token's share, so every estimate is <= 1 (when m
    is below the rounding level of the head's sum, it is taken as q_K); mass missing
    from a vocabulary of at most K tokens (e.g. ``Fixed`` summing to less than 1) is one
    token outside any tree, m**(1/T), as in the families' tempering. A tail token r >= K
    gets the noise-free estimate q_r**(1/T) exp(sigma**2 / 2) / normaliser. The tree of
    budget P is the top P nodes by estimated path probability (ties by depth, then rank
    path); it is prefix-closed because estimates are <= 1. ``Noisy(0)`` uses the true
    probabilities unnormalised and is exactly :class:`Optimal`.

    Parameters
    ----------
    sigma : float
        Noise scale in nats at depth 1 (>= 0).
    T : float, default 1.0
        Temperature mismatch (> 0): the drafter sees q**(1/T), renormalised.
    gamma : float, default 0.0
        Growth of the noise with depth (>= 0): sigma_d = sigma * d**gamma.
    """

    name = "noisy"

    def __init__(self, sigma: float, T: float = 1.0, gamma: float = 0.0) -> None:
        self.sigma = check_positive("sigma", sigma, allow_zero=True)
        self.T = check_positive("T", T)
        self.gamma = check_positive("gamma", gamma, allow_zero=True)

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sigma": self.sigma, "T": self.T}
        if self.gamma != 0.0:                  # the string form of gamma = 0 is unchanged
            out["gamma"] = self.gamma
        return out

    def run_roots(self, spec, budgets, roots):
        acc, exp, dep = _outputs(budgets.size, roots.keys.size)
        t_start = start_threshold(budgets[-1])
        visited, _ = _k.noisy_chunk(spec.kinds, spec.cw, spec.fpar, spec.ipar, spec.data,
                                    spec.cprog, spec.head_cap, roots.keys, roots.mode, roots.ci,
                                    roots.cf, roots.head, self.sigma, self.gamma, 1.0 / self.T, _k.HEAD_K, budgets,
                                    t_start,
                                    acc, exp, dep)
        if visited < 0:
            raise UserError("more than 2**28 nodes tie at one estimated path probability; use "
                            "a budget that ends on a full level of this lattice family")
        return acc, exp, dep


POLICIES: dict[str, type[Policy]] = {
    cls.name: cls for cls in (Optimal, Chain, KAry, Expansion, Sequoia, Dynamic, Noisy)
}

#: The policy of ``simulate`` when none is given.
DEFAULT_POLICY = "optimal()"


def run_policy(policy: Policy, spec: Spec, budgets: np.ndarray, seed_key: np.uint64, first: int,
               count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Iterations ``first .. first + count - 1`` of one policy: the numba call, few checks.

    The analogue of :func:`brwsim.simulate.run_iterations` for any policy, on the same
    environment (the root of iteration i is ``root_key(seed_key, i)``).

    Parameters
    ----------
    policy : Policy
        The drafting policy.
    spec : Spec
        The family's compiled form (``family.spec()``).
    budgets : numpy.ndarray
        Sorted distinct positive int64 budgets (see :func:`brwsim.simulate.validate_budgets`).
    seed_key : numpy.uint64
        Root key of the run (:func:`brwsim.simulate.seed_key`).
    first, count : int
        Iteration range.

    Returns
    -------
    accepted, expected_accepted, depth : numpy.ndarray
        Arrays of shape (len(budgets), count): sampled X, E[X | T] (sum of true path
        probabilities over the policy's tree) and the depth of the policy's tree.
    """
    if not isinstance(policy, Policy):
        raise UserError(f"policy must be a brwsim policy, got {policy!r}")
    budgets = np.ascontiguousarray(budgets, dtype=np.int64)
    return policy.run(spec, budgets, np.uint64(seed_key), int(first), int(count))


# ---------------------------------------------------------------------------------------
# String forms: the family parser with the policy table.

def _build_policy(name: str, args: list[Any], kwargs: dict[str, Any]) -> Policy:
    key = name.lower()
    if key not in POLICIES:
        raise UserError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}")
    return bind_call(POLICIES[key], key, args, kwargs)


def parse_policy(text: str) -> Policy:
    """Build a policy from its string form.

    Parameters
    ----------
    text : str
        E.g. ``"dynamic(depth=6, topk=10)"``, ``"kary(4)"`` or a bare name such as
        ``"chain"`` (a policy without required parameters).

    Returns
    -------
    Policy

    Raises
    ------
    brwsim.errors.UserError
        On a syntax error, an unknown name, a wrong argument or an invalid value.
    """
    if not isinstance(text, str):
        raise UserError(f"a policy must be given as a string, got {text!r}")
    out = parse_text(text, _build_policy, "policy")
    if isinstance(out, str) and out.lower() in POLICIES:
        out = _build_policy(out, [], {})
    if not isinstance(out, Policy):
        raise UserError(f"{text!r} is not a policy; known: {', '.join(sorted(POLICIES))}")
    return out
