"""Draft trees from a draft model's probabilities: best-first against a node-at-a-time
heap, the greedy chain, and EAGLE-2's dynamic layers."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from brwsim.drafters.shapes import best_first, dynamic, greedy_chain, top_children
from brwsim.errors import UserError
from tests.unit.seqtarget import FunctionTarget


def heap_top(target, ctx, budget):
    """The classic exact best-first pass: pop the most likely node, push its children."""
    root = target.full(tuple(ctx))
    heap = [(-root[t], (t,)) for t in range(target.vocab_size)]
    heapq.heapify(heap)
    out = []
    while len(out) < budget:
        neg, path = heapq.heappop(heap)
        out.append((path, -neg))
        lp = target.full(tuple(ctx) + path)
        for t in range(target.vocab_size):
            heapq.heappush(heap, (neg - lp[t], path + (t,)))
    return out


def paths(parents, tokens):
    res = []
    for i in range(tokens.size):
        res.append((res[parents[i]] if parents[i] >= 0 else ()) + (int(tokens[i]),))
    return res


@pytest.mark.parametrize("budget", [1, 2, 5, 17, 90])
def test_best_first_is_the_top_p_by_draft_probability(budget):
    draft = FunctionTarget()
    ctx = (2, 3)
    parents, tokens, logv = best_first(draft, draft.start(np.array(ctx)), budget)
    want = heap_top(FunctionTarget(), ctx, budget)
    assert paths(parents, tokens) == [p for p, _ in want]
    np.testing.assert_allclose(logv, [v for _, v in want], rtol=1e-12)
    assert np.all(parents < np.arange(parents.size))


def test_greedy_chain_follows_the_argmax():
    draft = FunctionTarget()
    ctx = (1,)
    parents, tokens, _ = greedy_chain(draft, draft.start(np.array(ctx)), 4)
    seq = ctx
    for t in tokens:
        assert t == int(np.argmax(draft.full(seq)))
        seq += (int(t),)
    assert parents.tolist() == [-1, 0, 1, 2]


def test_dynamic_layers():
    draft = FunctionTarget()
    root = draft.start(np.array([5]))
    parents, tokens, _ = dynamic(draft, root, depth=3, topk=2, total=100)
    assert tokens.size == 2 + 2 * 4                   # topk + (depth - 1) * topk**2
    depth = np.zeros(tokens.size, int)
    for i, p in enumerate(parents):
        depth[i] = 1 if p < 0 else depth[p] + 1
    assert np.bincount(depth).tolist() == [0, 2, 4, 4]
    assert sorted(tokens[depth == 1].tolist()) == sorted(top_children(root, 2).tolist())
    draft2 = FunctionTarget()
    small = dynamic(draft2, draft2.start(np.array([5])), depth=3, topk=2, total=5)
    assert paths(*small[:2]) == paths(parents, tokens)[:5]   # the cap keeps the ranking's top


def test_top_children_ties_and_zeros():
    with np.errstate(divide="ignore"):
        lp = np.log(np.array([0.25, 0.25, 0.0, 0.5]))
    assert top_children(lp, 2).tolist() == [3, 0]
    assert top_children(lp, 9).tolist() == [3, 0, 1]


def test_bad_budget():
    draft = FunctionTarget()
    with pytest.raises(UserError, match="budget"):
        best_first(draft, draft.start(np.array([1])), 0)
