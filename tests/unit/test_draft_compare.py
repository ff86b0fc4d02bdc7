"""Optimal tree against drafters on one root (brwsim.drafters.compare)."""

from __future__ import annotations

import numpy as np

from brwsim.drafters.compare import Tempered, curve, measure_root
from brwsim.drafters.promptlookup import lookup_tree
from brwsim.drafters.shapes import DraftTree, best_first, greedy_chain
from tests.unit.seqtarget import FunctionTarget


def self_draft(kind):
    """The target drafting for itself: its best-first tree is the optimal tree."""
    def draft(context, budget):
        me = FunctionTarget()
        return kind(me, me.start(context), budget)
    return draft


def lookup(context, budget):
    parents, tokens = lookup_tree(context, budget, 1, 3)
    return DraftTree(parents, tokens, np.zeros(tokens.size))


def test_self_drafting_is_optimal_and_others_are_below():
    budgets = np.array([1, 3, 8])
    ctx = np.array([1, 2, 3, 1, 2, 3, 1, 2], np.int64)
    r = measure_root(FunctionTarget(), ctx, budgets,
                     {"self": self_draft(best_first), "lookup": lookup,
                      "chain": self_draft(greedy_chain)})
    np.testing.assert_allclose(r.drafters["self"], r.optimal, rtol=1e-12)
    for name in ("lookup", "chain"):
        assert np.all(r.drafters[name] <= r.optimal + 1e-12)
    assert np.all(np.diff(r.optimal) > 0)
    np.testing.assert_allclose(r.drafters["chain"], curve(r.path_prob["chain"], budgets))


def test_greedy_at_temperature_zero():
    budgets = np.array([1, 4])
    r = measure_root(FunctionTarget(), np.array([3, 3], np.int64), budgets,
                     {"chain": self_draft(greedy_chain)}, temperature=0)
    assert r.optimal.tolist() == [1.0, 4.0]
    assert r.drafters["chain"].tolist() == [1.0, 4.0]   # the target's own argmax chain


def test_tempered_view_is_normalised_and_sharper():
    t = Tempered(FunctionTarget(), 0.5)
    lp = t.start(np.array([1]))
    base = FunctionTarget().start(np.array([1]))
    np.testing.assert_allclose(np.exp(lp).sum(), 1.0, rtol=1e-12)
    assert lp.max() > base.max()
    np.testing.assert_allclose(curve(np.array([0.5, 0.25]), np.array([1, 2, 5])), [0.5, 0.75, 0.75])
