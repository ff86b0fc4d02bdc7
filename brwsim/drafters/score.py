"""Scoring a drafted token tree against the target model.

A drafted tree is given as ``parents``/``tokens`` arrays in insertion order (a parent
precedes its children, ``-1`` is the root). The target evaluates the tree's internal
nodes (a leaf's own distribution is never needed) in one batched ``extend``; each node's
path probability under the target at temperature T is the product of the target's
probabilities of the tokens along its path. E[X | T] of the drafted tree is their sum
(the same Rao-Blackwellised estimator as for the optimal tree), and ``path_prob[v]`` is
P(X >= depth(v) along v's branch), so along a chain the per-position acceptance is the
ratio of consecutive entries.

At temperature 0 the target's accepted path is its argmax path: X is the number of
drafted nodes on it (they form a chain from the root), reported by :func:`greedy_accepted`.

Given the root's key, :func:`score_tree` also marks the drafted nodes on the target's
*sampled* path, drawn exactly as the optimal tree's (:mod:`brwsim.backends.rounds`): at a
node of key k the keyed uniform ``unit(purpose_key(k, PATH), 0)`` picks a child by inverse
CDF over the ranks (probability descending, then token id), and the child of rank r has
key ``child_key(k, r)``. So a drafter's sampled X and the optimal tree's share their random
numbers (common random numbers); the path leaves the drafted tree at the first sampled
token it lacks.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from brwsim.backends.base import TreeEvaluator
from brwsim.backends.rounds import sampled_rank, tempered as tempered_rows
from brwsim.errors import UserError
from brwsim.kernels.rng import PATH, child_key, purpose_key, unit

__all__ = ["TreeScore", "score_tree", "greedy_accepted", "tempered"]


class TreeScore(NamedTuple):
    """The target's view of one drafted tree.

    Attributes
    ----------
    path_prob : numpy.ndarray
        float64 per drafted node: its path probability under the target at temperature T
        (for T = 0: 1 on the target's argmax path, 0 elsewhere).
    depth : numpy.ndarray
        int64 per drafted node: its depth (the root's children have depth 1).
    expected_accepted : float
        E[X | T], the sum of ``path_prob``.
    onpath : numpy.ndarray or None
        int8 per drafted node: 1 on the target's sampled path (T > 0, ``root_key`` given)
        or on its argmax path (T = 0); None when not asked for.
    path_ranks : numpy.ndarray or None
        int64 target rank of each ``onpath`` node in depth order (their node keys are
        ``child_key`` folds of these from the root's); None with ``onpath``.
    """

    path_prob: np.ndarray
    depth: np.ndarray
    expected_accepted: float
    onpath: np.ndarray | None = None
    path_ranks: np.ndarray | None = None


def tempered(logprobs: np.ndarray, temperature: float) -> np.ndarray:
    """log softmax(logprobs / T) along the last axis, for T > 0."""
    z = np.asarray(logprobs, dtype=np.float64) / temperature
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _check_tree(parents: np.ndarray, tokens: np.ndarray, vocab: int) -> None:
    if parents.shape != tokens.shape or parents.ndim != 1:
        raise UserError("a drafted tree needs parents and tokens of one equal length")
    if parents.size and (np.any(parents < -1) or np.any(parents >= np.arange(parents.size))):
        raise UserError("a drafted tree's parents must precede their children")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab):
        raise UserError(f"a drafted token lies outside the target's vocabulary of {vocab}")


def _sampled_path(root_lq: np.ndarray, lqs: np.ndarray, row: np.ndarray, parents: np.ndarray,
                  tokens: np.ndarray, root_key: int) -> tuple[np.ndarray, np.ndarray]:
    """int8 flags of the drafted nodes on the target's sampled path (module docstring) and
    their target ranks in depth order; ``root_lq``/``lqs`` are the tempered
    log-probabilities at the root and at the internal nodes (``row[v]`` is v's row, -1
    for a leaf)."""
    children: dict[tuple[int, int], int] = {}
    for i in range(tokens.size):
        children.setdefault((int(parents[i]), int(tokens[i])), i)
    on = np.zeros(tokens.size, np.int8)
    ranks: list[int] = []
    node, key, lq = -1, np.uint64(root_key), root_lq
    while True:
        r, order = sampled_rank(lq, unit(np.uint64(purpose_key(key, PATH)), 0))
        if r >= lq.size:
            break
        child = children.get((node, int(order[r])))
        if child is None:
            break
        on[child] = 1
        ranks.append(r)
        if row[child] < 0:                           # a leaf: the path leaves the tree
            break
        node, key, lq = child, np.uint64(child_key(key, np.uint64(r))), lqs[row[child]]
    return on, np.array(ranks, np.int64)


def _greedy_score(evaluator: TreeEvaluator, root_lp: np.ndarray, parents: np.ndarray,
                  tokens: np.ndarray, depth: np.ndarray) -> TreeScore:
    """T = 0: walk the target's argmax path down the drafted tree, evaluating only the
    drafted nodes on it (one row each); every other node's path probability is 0."""
    children: dict[tuple[int, int], int] = {}
    for i in range(tokens.size):
        children.setdefault((int(parents[i]), int(tokens[i])), i)
    has_child = np.zeros(tokens.size, bool)
    has_child[parents[parents >= 0]] = True
    path = np.zeros(tokens.size, dtype=np.float64)
    node, lp, row = -1, root_lp, -1
    while True:
        child = children.get((node, int(np.argmax(lp))))  # first maximum: the lower id
        if child is None:
            break
        path[child] = 1.0
        if not has_child[child]:
            break
        lp = evaluator.extend(np.array([row], np.int64), tokens[child:child + 1])[0]
        node, row = child, row + 1
    on = path.astype(np.int8)
    return TreeScore(path, depth, float(path.sum()), on, np.zeros(int(on.sum()), np.int64))


def score_tree(evaluator: TreeEvaluator, context: np.ndarray, parents: np.ndarray,
               tokens: np.ndarray, temperature: float = 1.0,
               root_key: int | None = None) -> TreeScore:
    """Path probabilities of a drafted tree's nodes under the target.

    Starts ``context`` on ``evaluator`` (replacing its current root), evaluates the tree's
    internal nodes in one batch and multiplies the target's probabilities along each path.

    Parameters
    ----------
    evaluator : TreeEvaluator
        The target model.
    context : numpy.ndarray
        int64 token ids of the root's context.
    parents, tokens : numpy.ndarray
        The drafted tree, parents before children, ``-1`` the root.
    temperature : float
        The target's temperature; 0 scores the greedy (argmax) path.
    root_key : int, optional
        The root's 64-bit key: also mark the nodes on the target's sampled path (T > 0;
        at T = 0 the argmax path is marked regardless).
    """
    parents = np.asarray(parents, dtype=np.int64)
    tokens = np.asarray(tokens, dtype=np.int64)
    _check_tree(parents, tokens, evaluator.vocab_size)
    if temperature < 0 or not np.isfinite(temperature):
        raise UserError(f"temperature must be finite and >= 0, got {temperature}")
    n = tokens.size
    depth = np.zeros(n, dtype=np.int64)
    for i in range(n):
        depth[i] = 1 if parents[i] < 0 else depth[parents[i]] + 1
    root_lp = evaluator.start(np.asarray(context, dtype=np.int64))
    if temperature == 0:
        return _greedy_score(evaluator, root_lp, parents, tokens, depth)
    internal = np.zeros(n, dtype=bool)
    internal[parents[parents >= 0]] = True
    ids = np.flatnonzero(internal)                   # prefix-closed: parents are internal
    row = np.full(n, -1, dtype=np.int64)
    row[ids] = np.arange(ids.size)
    lps = (evaluator.extend(np.where(parents[ids] < 0, -1, row[parents[ids]]), tokens[ids])
           if ids.size else np.empty((0, evaluator.vocab_size)))
    path = np.zeros(n, dtype=np.float64)
    root_t = tempered_rows(root_lp[None, :], 1.0 / temperature)[0]
    lps_t = tempered_rows(lps, 1.0 / temperature) if ids.size else lps
    for i in range(n):
        p = parents[i]
        lq = root_t[tokens[i]] if p < 0 else lps_t[row[p], tokens[i]]
        path[i] = (1.0 if p < 0 else path[p]) * np.exp(np.float64(lq))
    if root_key is None:
        return TreeScore(path, depth, float(path.sum()))
    on, ranks = _sampled_path(root_t, lps_t, row, parents, tokens, root_key)
    return TreeScore(path, depth, float(path.sum()), on, ranks)


def greedy_accepted(score: TreeScore) -> int:
    """X at temperature 0: the drafted nodes on the target's argmax path (from a
    :func:`score_tree` with ``temperature=0``)."""
    return int(np.count_nonzero(score.path_prob))
