"""The optimal tree of one root, built in rounds of batched evaluations.

Best-first with batches (docs/design.md, turn 4): each round takes the best candidates of
the frontier (a candidate is the next unevaluated child, in rank order, of an evaluated
node; the heap holds one per parent, as in the lazy sorted children of idea 2),
evaluates them in one :meth:`~brwsim.backends.base.TreeEvaluator.extend` call, and lists
the children of each that can still enter the top P. Rounds stop once P evaluated nodes
come strictly before every candidate (beyond the tie margin): every node not evaluated
follows a candidate in the tree order, so T_P is among the evaluated nodes, and the final
selection keeps exactly the top P of them in the tree order of the numba pass
(:mod:`brwsim.kernels.select`): smaller S = -log p (positions within ``TIE_REL`` relative
tie), then smaller depth, then the lexicographically smaller rank path. The rounds'
sizes only set the work done, never the tree.

Ranks are by probability descending, ties by ascending token id; the target's sampled
path uses the keyed uniforms of :mod:`brwsim.kernels.rng` (``unit(purpose_key(key,
PATH), 0)`` at a node, inverse CDF over its ranks in rank order), so the tree, X and
E[X | T] are functions of (seed, path) and never of the batching.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import math
from typing import NamedTuple

import numpy as np

from brwsim.backends.base import TreeEvaluator
from brwsim.kernels.rng import PATH, child_key, purpose_key, unit
from brwsim.kernels.select import TIE_REL

__all__ = ["RoundsTree", "RootResult", "optimal_tree", "optimal_trees", "sampled_rank",
           "score_budgets", "stacked", "tempered"]

#: Largest number of nodes one round evaluates.
ROUND_MAX = 128
#: A round below this many nodes is topped up with the best candidates (a round's
#: weight traffic costs about as much as this many nodes' products).
ROUND_MIN = 16


class RoundsTree(NamedTuple):
    """The optimal tree T_{P_max} of one root, its nodes in selection order.

    Attributes
    ----------
    pos : numpy.ndarray
        float64 S = -log p of each node (T_P is the first P entries).
    depth : numpy.ndarray
        int64 depth of each node (root children: 1).
    onpath : numpy.ndarray
        int8: 1 where the node is on the target's sampled path.
    tokens, ranks, parents : numpy.ndarray
        int64 token of each node, its rank among its parent's children and the index (in
        this order) of its parent, -1 for the root.
    evaluated : int
        Nodes evaluated (the work done; at least P_max).
    rounds : int
        ``extend`` calls made.
    t_end : float
        The last node's S: a good ``t_start`` for the next root.
    """

    pos: np.ndarray
    depth: np.ndarray
    onpath: np.ndarray
    tokens: np.ndarray
    ranks: np.ndarray
    parents: np.ndarray
    evaluated: int
    rounds: int
    t_end: float


def tempered(lp: np.ndarray, beta: float) -> np.ndarray:
    """log_softmax(beta * lp) along the last axis (the identity when beta is 1)."""
    if beta == 1.0:
        return lp
    z = beta * lp
    m = z.max(axis=-1, keepdims=True)
    return z - (m + np.log(np.exp(z - m).sum(axis=-1, keepdims=True)))


def sampled_rank(lq: np.ndarray, u: float) -> tuple[int, np.ndarray]:
    """The rank a uniform ``u`` picks by inverse CDF over the ranks of log-probabilities
    ``lq`` (probability descending, then token id): the first r with u <= cum[r], or
    ``lq.size`` when u exceeds the summed mass; with the ranks' tokens (``order[r]`` is
    rank r's token). The cumulative sum runs in rank order, as the rounds' does."""
    order = np.lexsort((np.arange(lq.size), -lq))
    cum = np.cumsum(np.exp(lq[order]))
    return int(np.searchsorted(cum, u)), order


def _tied(a: float, b: float) -> bool:
    return a == b or not (math.isinf(a) or math.isinf(b)
                          or abs(a - b) > TIE_REL * max(abs(a), abs(b)))


def _before(x: tuple, y: tuple) -> int:
    """Tree order of (S, depth, rank path) entries (:func:`brwsim.kernels.select.before`)."""
    if not _tied(x[0], y[0]):
        return -1 if x[0] < y[0] else 1
    if x[1] != y[1]:
        return -1 if x[1] < y[1] else 1
    return -1 if x[2] < y[2] else (1 if x[2] > y[2] else 0)


class _Node:
    """An evaluated node: its children that can enter the top P, in rank order."""

    __slots__ = ("s", "depth", "path", "key", "token", "lq", "tok", "next", "u", "cum")

    def __init__(self, s, depth, path, key, token):
        self.s, self.depth, self.path, self.key, self.token = s, depth, path, key, token
        self.u = -1.0       # path uniform (on-path nodes only)
        self.cum = None


def _listed(lq: np.ndarray, s: float, bound: float, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens and log-probabilities of the children with S at most ``bound`` (at most
    ``cap`` of them, the best), in rank order: probability descending, then token id."""
    need = lq >= s - bound if math.isfinite(bound) else np.isfinite(lq)
    k = int(np.count_nonzero(need))
    k = min(k, cap)
    if k == 0:
        return np.empty(0, np.int64), np.empty(0)
    if k < lq.size:
        part = np.argpartition(-lq, k - 1)[:k]
        kth = lq[part].min()
        part = np.flatnonzero(lq >= kth)        # every token tied with the k-th
    else:
        part = np.arange(lq.size)
    order = np.lexsort((part, -lq[part]))[:k]
    tok = part[order]
    return tok.astype(np.int64), lq[tok]


def optimal_tree(ev: TreeEvaluator, context: np.ndarray, p_max: int, root_key: int,
                 beta: float = 1.0, round_max: int = ROUND_MAX, t_start: float | None = None,
                 round_min: int = ROUND_MIN) -> RoundsTree:
    """T_{p_max} below a root whose context is ``context``, evaluated in rounds.

    Parameters
    ----------
    ev : TreeEvaluator
        The target model (its current root is replaced).
    context : numpy.ndarray
        int64 token ids of the root's context.
    p_max : int
        The largest budget P.
    root_key : int
        The root's 64-bit key (:func:`brwsim.keys.node_key` of the iteration's root); its
        sampled path is drawn from the keys of the path's nodes.
    beta : float, default 1.0
        1 / temperature: each node's distribution is softmax(beta log p).
    round_max : int, default ROUND_MAX
        The most nodes one ``extend`` call evaluates.
    t_start : float, optional
        A guess of T_P's last S (the last root's ``t_end``; default log(P) / 2 + 1): a
        round takes the candidates at or below it (at least ``round_min``, at most
        ``round_max``), so that few nodes beyond T_P are evaluated.
    round_min : int, default ROUND_MIN

    Returns
    -------
    RoundsTree
    """
    build = _rounds(tempered(ev.start(context)[None, :], beta)[0], p_max, root_key, beta,
                    round_max, t_start, round_min)
    lp = None
    while True:
        try:
            batch = build.send(lp)
        except StopIteration as done:
            return done.value
        lp = ev.extend(*batch)


def optimal_trees(ev: TreeEvaluator, contexts: list[np.ndarray], p_max: int,
                  root_keys: list[int], beta: float = 1.0, round_max: int = ROUND_MAX,
                  t_start: float | None = None, round_min: int = ROUND_MIN,
                  slots: int = 1) -> list[RoundsTree]:
    """:func:`optimal_tree` of several roots, ``slots`` of them at a time where the
    evaluator can.

    An evaluator with root slots (``use_slot`` and ``extend_slots``, as
    :class:`~brwsim.backends.numpyforward.NumpyEvaluator`) keeps up to ``slots`` roots in
    flight: each pass evaluates every active root's round in one call (each product with
    the weights serves all their nodes), and a root that finishes hands its slot to the
    next one at once, so passes stay full. Otherwise (or with ``slots`` = 1) the trees
    are built one after the other. Each tree is the one :func:`optimal_tree` builds (the
    rounds set the work only); each root's first guess ``t_start`` is the last finished
    tree's ``t_end``. On return slot 0 is the current one.
    """
    if len(contexts) != len(root_keys):
        raise ValueError("one root key per context")
    n = len(contexts)
    out: list[RoundsTree | None] = [None] * n
    guess = [t_start]
    if slots < 2 or n < 2 or not hasattr(ev, "extend_slots"):
        for i in range(n):
            out[i] = optimal_tree(ev, contexts[i], p_max, root_keys[i], beta, round_max,
                                  guess[0], round_min)
            guess[0] = out[i].t_end
        return out
    waiting = iter(range(n))
    active: dict[int, tuple] = {}          # slot -> (root, its rounds, its pending batch)

    def begin(slot: int) -> None:
        """The next waiting root that needs a round, into ``slot``."""
        for i in waiting:
            ev.use_slot(slot)
            build = _rounds(tempered(ev.start(contexts[i])[None, :], beta)[0], p_max,
                            root_keys[i], beta, round_max, guess[0], round_min)
            try:
                active[slot] = (i, build, build.send(None))
                return
            except StopIteration as done:
                out[i] = done.value
    try:
        for slot in range(min(slots, n)):
            begin(slot)
        while active:
            flight = list(active.items())
            lps = ev.extend_slots([(slot, *batch) for slot, (_, _, batch) in flight])
            for (slot, (i, build, _)), lp in zip(flight, lps):
                try:
                    active[slot] = (i, build, build.send(lp))
                except StopIteration as done:
                    out[i] = done.value
                    guess[0] = done.value.t_end
                    del active[slot]
                    begin(slot)
    finally:
        ev.use_slot(0)
    return out


def _rounds(lp0: np.ndarray, p_max: int, root_key: int, beta: float, round_max: int,
            t_start: float | None, round_min: int):
    """The rounds of :func:`optimal_tree` below a root of (tempered) log-probabilities
    ``lp0``: a generator that yields each round's ``(parents, tokens)``, is sent their
    raw log-probabilities and returns the :class:`RoundsTree`."""
    margin = 8.0 * TIE_REL
    raise_by = 0.5
    t_est = (float(t_start) if t_start is not None and math.isfinite(t_start)
             else 0.5 * math.log(max(p_max, 1)) + 1.0)
    rkey = np.uint64(root_key)
    nodes: list[_Node] = []
    root = _Node(0.0, 0, (), rkey, -1)
    root.u = unit(np.uint64(purpose_key(rkey, PATH)), 0)
    done_s: list[float] = []           # S of evaluated nodes, sorted
    known: list[float] = []            # the P smallest S of every node ever listed (negated heap)
    heap: list = []

    def bound() -> float:
        """Beyond this S a node has P listed (distinct, real) nodes before it: not in T_P."""
        if len(known) < p_max:
            return math.inf
        b = -known[0]
        return b + 4.0 * margin * abs(b)

    def list_children(node: _Node, idx: int, lq: np.ndarray) -> None:
        tok, lqs = _listed(lq, node.s, bound(), p_max)
        node.tok, node.lq, node.next = tok, lqs, 0
        if node.u >= 0:
            node.cum = np.cumsum(np.exp(lqs))
        if tok.size:
            push(node, idx)
            for x in (node.s - lqs):
                if len(known) < p_max:
                    heapq.heappush(known, -x)
                elif -x > known[0]:
                    heapq.heapreplace(known, -x)

    def push(node: _Node, idx: int) -> None:
        r = node.next
        heapq.heappush(heap, (node.s - node.lq[r], node.depth + 1, node.path + (r,), idx))

    list_children(root, -1, lp0)
    pending_tok: list[int] = []
    pending_par: list[int] = []
    onpath: list[int] = []
    rounds = 0
    while heap:
        # stop once P evaluated nodes precede every candidate
        smin = heap[0][0]
        if bisect.bisect_left(done_s, smin - margin * abs(smin)) >= p_max:
            break
        batch = []
        cut = bound()
        while heap and len(batch) < round_max:
            s, dep, path, par = heap[0]
            if s > cut or bisect.bisect_left(done_s, s) >= p_max:
                break                        # P nodes already come before it: not in T_P
            if s > t_est and len(batch) >= round_min:
                break
            heapq.heappop(heap)
            parent = root if par < 0 else nodes[par]
            r = path[-1]
            parent.next = r + 1
            if parent.next < parent.tok.size:
                push(parent, par)
            on = 0
            key = np.uint64(child_key(np.uint64(parent.key), np.uint64(r)))
            node = _Node(s, dep, path, key, int(parent.tok[r]))
            if parent.u >= 0 and (r == 0 or parent.cum[r - 1] < parent.u) and parent.u <= parent.cum[r]:
                on = 1
                node.u = unit(np.uint64(purpose_key(key, PATH)), 0)
            nodes.append(node)
            onpath.append(on)
            bisect.insort(done_s, s)
            batch.append(len(nodes) - 1)
            pending_tok.append(node.token)
            pending_par.append(par)
        if not batch:
            break
        lp = yield np.array(pending_par, np.int64), np.array(pending_tok, np.int64)
        rounds += 1
        pending_tok.clear()
        pending_par.clear()
        lq = tempered(lp, beta)
        for j, idx in enumerate(batch):
            list_children(nodes[idx], idx, lq[j])
        if heap and heap[0][0] > t_est:      # the guess was low: T_P reaches further
            t_est = heap[0][0] + raise_by
    entries = [(nd.s, nd.depth, nd.path, i) for i, nd in enumerate(nodes)]
    entries.sort(key=functools.cmp_to_key(_before))
    sel = [e[3] for e in entries[:p_max]]
    # parents in selection order (T_P is prefix-closed: a parent precedes its children)
    by_path = {nodes[i].path: k for k, i in enumerate(sel)}
    parents = [by_path.get(nodes[i].path[:-1], -1) for i in sel]
    tokens = [nodes[i].token for i in sel]
    return RoundsTree(np.array([nodes[i].s for i in sel]), np.array([nodes[i].depth for i in sel]),
                      np.array([onpath[i] for i in sel], np.int8), np.array(tokens, np.int64),
                      np.array([nodes[i].path[-1] for i in sel], np.int64),
                      np.array(parents, np.int64), len(nodes), rounds,
                      float(nodes[sel[-1]].s) if sel else math.nan)


class RootResult(NamedTuple):
    """One root's trees (optimal or drafted) scored for every budget, and the target's
    sampled path inside the largest one (what a generation run advances along).

    Attributes
    ----------
    accepted, expected, depth : numpy.ndarray
        X_P, E[X | T_P] and the depth of the tree of each budget, shape (len(budgets),).
    path_tokens, path_ranks : numpy.ndarray
        int64 tokens and target ranks of the sampled path's nodes inside the tree of the
        largest budget, in depth order.
    """

    accepted: np.ndarray
    expected: np.ndarray
    depth: np.ndarray
    path_tokens: np.ndarray
    path_ranks: np.ndarray


def stacked(results: list[RootResult], n_budgets: int
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """X_P, E[X | T_P] and depth of several roots as columns: int32, float64, int32 arrays
    of shape (n_budgets, len(results))."""
    shape = (len(results), n_budgets)
    return tuple(np.ascontiguousarray(np.array([getattr(r, f) for r in results], dt)
                                      .reshape(shape).T)
                 for f, dt in (("accepted", np.int32), ("expected", np.float64),
                               ("depth", np.int32)))


def score_budgets(tree: RoundsTree, budgets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """X_P, E[X | T_P] and the depth of T_P for each budget (prefix sums in selection order).

    Returns
    -------
    accepted, expected, depth : numpy.ndarray
        int32, float64, int32 of shape (len(budgets),).
    """
    b = np.asarray(budgets, np.int64)
    n = tree.pos.size
    if b.size and b.max() > n:
        raise ValueError(f"budget {int(b.max())} exceeds the tree's {n} nodes")
    cum_p = np.concatenate([[0.0], np.cumsum(np.exp(-tree.pos))])
    cum_on = np.concatenate([[0], np.cumsum(tree.onpath, dtype=np.int64)])
    cum_dep = np.concatenate([[0], np.maximum.accumulate(tree.depth)]) if n else np.zeros(1, np.int64)
    return cum_on[b].astype(np.int32), cum_p[b], cum_dep[b].astype(np.int32)
