"""Draft trees built from a draft model's own probabilities.

A draft model is anything with the :class:`~brwsim.backends.base.TreeEvaluator` interface
(a small checkpoint through a backend, or an :class:`~brwsim.drafters.eagle.EagleHead`):
``root_lp`` is its distribution at the root and ``extend`` evaluates batches of nodes.
Each builder returns the drafted nodes in rank order, ``parents`` before children: the
tree of budget P is the first P nodes (every prefix is prefix-closed), so one call
serves every budget up to its own.

- :func:`best_first`: the P nodes of highest draft path probability (SpecExec's tree;
  the optimal tree if the draft were the target), built in rounds: each round evaluates
  the best nodes (at most ``round_max``) of the current top P not yet evaluated, in one
  batch, until the top P contains no unevaluated node.
- :func:`greedy_chain`: the draft's argmax chain (one node per step).
- :func:`dynamic`: EAGLE-2/3's tree, with the conventions of
  :class:`brwsim.policies.dynamic.Dynamic` (``depth`` layers, ``topk`` nodes expanded per
  layer into ``topk`` children each, then the top ``total`` candidates by path value).

Ties of path value are broken by lower depth, then by generation order (children of a
node in rank order of the draft's probability, lower token id first on equal ones).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from brwsim.backends.base import TreeEvaluator
from brwsim.errors import UserError

__all__ = ["DraftTree", "best_first", "greedy_chain", "dynamic", "top_children"]


class DraftTree(NamedTuple):
    """Drafted nodes in rank order (``parents`` before children, ``-1`` the root) and each
    node's draft path log-probability."""

    parents: np.ndarray
    tokens: np.ndarray
    log_value: np.ndarray


def top_children(lp: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` most likely tokens of a log-probability row, most likely first (equal
    values: lower token id first); tokens of probability zero are never returned."""
    finite = np.isfinite(lp)
    nf = int(np.count_nonzero(finite))
    k = min(int(k), nf)
    if k <= 0:
        return np.empty(0, np.int64)
    if nf < lp.size // 2:           # a reduced vocabulary: rank its tokens only (ids ascending)
        ids = np.flatnonzero(finite)
        return ids[top_children(lp[ids], k)]
    part = np.argpartition(-lp, k - 1)[:k] if k < lp.size else np.arange(lp.size)
    # among ties at the k-th value, argpartition's pick is arbitrary: take the lowest ids
    kth = lp[part].min()
    above = np.flatnonzero(lp > kth)
    at = np.flatnonzero(lp == kth)[:k - above.size]
    cand = np.concatenate([above, at])
    return cand[np.lexsort((cand, -lp[cand]))].astype(np.int64)


class _Nodes:
    """Candidate nodes with their draft path log-values, depths and parents."""

    def __init__(self) -> None:
        self.parent: list[int] = []
        self.token: list[int] = []
        self.value: list[float] = []
        self.depth: list[int] = []
        self.eval_id: list[int] = []          # id in the draft evaluator, -1 if unevaluated

    def add(self, parent: int, tokens: np.ndarray, lps: np.ndarray, base: float, depth: int,
            floor: float = -np.inf):
        """Add a node's children (in rank order); those of value below ``floor`` are left
        out (a caller's proof that they cannot be ranked where it looks)."""
        for t, l in zip(tokens, lps):
            if base + float(l) < floor:
                break
            self.parent.append(parent)
            self.token.append(int(t))
            self.value.append(base + float(l))
            self.depth.append(depth)
            self.eval_id.append(-1)

    def ranked(self, limit: int) -> np.ndarray:
        """Indices of the top ``limit`` nodes: value, then depth, then generation order."""
        v = np.asarray(self.value)
        order = np.lexsort((np.arange(v.size), np.asarray(self.depth), -v))
        return order[:limit]

    def evaluate(self, draft: TreeEvaluator, idx: np.ndarray) -> np.ndarray:
        parents = np.array([-1 if self.parent[i] < 0 else self.eval_id[self.parent[i]]
                            for i in idx], np.int64)
        out = draft.extend(parents, np.array([self.token[i] for i in idx], np.int64))
        first = sum(e >= 0 for e in self.eval_id)
        for j, i in enumerate(idx):
            self.eval_id[i] = first + j
        return out

    def as_tree(self, idx: np.ndarray) -> DraftTree:
        """``idx`` (prefix-closed, ranked) as a :class:`DraftTree` in that order."""
        pos = {int(i): j for j, i in enumerate(idx)}
        parents = np.array([-1 if self.parent[i] < 0 else pos[self.parent[i]] for i in idx],
                           np.int64)
        return DraftTree(parents, np.array([self.token[i] for i in idx], np.int64),
                         np.array([self.value[i] for i in idx], np.float64))


def _check_budget(budget: int) -> int:
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 1:
        raise UserError(f"a draft tree needs a budget of at least 1 node, got {budget!r}")
    return int(budget)


#: Most nodes :func:`best_first` evaluates in one round: the best unevaluated nodes of the
#: running top go first, so their children can push the lower ones out before those are
#: evaluated for nothing.
ROUND_MAX = 64


def best_first(draft: TreeEvaluator, root_lp: np.ndarray, budget: int,
               round_max: int = ROUND_MAX) -> DraftTree:
    """The ``budget`` nodes of highest draft path probability, in rank order.

    ``draft`` must have been started on the root (``root_lp`` is what ``start`` returned);
    it evaluates only nodes that were in the running top ``budget``.

    Once ``budget`` candidates are listed, the running top's last value is a floor: the
    final top ``budget`` is taken from a superset, so its last value can only be higher,
    and a child below the floor can never enter it (children at the floor are kept, for
    the tie order). Children are listed only down to it.
    """
    budget = _check_budget(budget)
    nodes = _Nodes()
    nodes.add(-1, kids := top_children(root_lp, budget), root_lp[kids], 0.0, 1)
    expanded: set[int] = set()
    while True:
        top = nodes.ranked(budget)
        todo = np.array([i for i in top if i not in expanded], np.int64)
        # the last node of a full top-P needs no children: nothing below it can enter
        if todo.size == 0 or (todo.size == 1 and len(top) == budget and todo[0] == top[-1]
                              and len(nodes.value) >= budget):
            return nodes.as_tree(top)
        floor = nodes.value[top[-1]] if len(top) == budget else -np.inf
        todo = todo[:round_max]                     # ranked: the best ones first
        out = nodes.evaluate(draft, todo)
        for j, i in enumerate(todo):
            expanded.add(int(i))
            kids = top_children(out[j], budget)
            nodes.add(int(i), kids, out[j][kids], nodes.value[i], nodes.depth[i] + 1, floor)


def greedy_chain(draft: TreeEvaluator, root_lp: np.ndarray, length: int) -> DraftTree:
    """The draft's argmax chain of ``length`` tokens (fewer where the draft puts all its
    mass on tokens already excluded, which cannot happen for a full distribution)."""
    length = _check_budget(length)
    tokens = [int(top_children(root_lp, 1)[0])]
    values = [float(root_lp[tokens[0]])]
    while len(tokens) < length:
        lp = draft.extend(np.array([len(tokens) - 2], np.int64), np.array(tokens[-1:], np.int64))[0]
        tokens.append(int(top_children(lp, 1)[0]))
        values.append(values[-1] + float(lp[tokens[-1]]))
    return DraftTree(np.arange(-1, length - 1, dtype=np.int64), np.array(tokens, np.int64),
                     np.array(values))


def dynamic(draft: TreeEvaluator, root_lp: np.ndarray, depth: int, topk: int,
            total: int) -> DraftTree:
    """EAGLE-2/3's dynamic tree (see :class:`brwsim.policies.dynamic.Dynamic`): ``depth``
    layers, ``topk`` expansions of ``topk`` children per layer, the top ``total`` nodes."""
    depth, topk, total = (_check_budget(depth), _check_budget(topk), _check_budget(total))
    nodes = _Nodes()
    kids = top_children(root_lp, topk)
    nodes.add(-1, kids, root_lp[kids], 0.0, 1)
    layer = np.arange(len(nodes.value))
    for d in range(2, depth + 1):
        v = np.asarray(nodes.value)[layer]
        pick = layer[np.lexsort((layer, -v))[:topk]]
        out = nodes.evaluate(draft, pick)
        start = len(nodes.value)
        for j, i in enumerate(pick):
            kids = top_children(out[j], topk)
            nodes.add(int(i), kids, out[j][kids], nodes.value[i], d)
        layer = np.arange(start, len(nodes.value))
        if layer.size == 0:
            break
    return nodes.as_tree(nodes.ranked(total))
