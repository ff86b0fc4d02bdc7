"""Threshold passes that lower their cut-off as they go (``collect.walk_pass`` with ``p_stop``).

A pass started at a high cut-off that lowers it once it holds P nodes must still hold every
node at or below the last lowered value, with the same positions, depths and path flags,
so that the top-P trees it scores are bit for bit those of the full pass at the first
cut-off: checked on lazy families (Dirichlet by aggregation, lazy order statistics, whose
tails tie exactly), a lattice (exact ties at the cut), an n-gram (contextual) and a
closed-form family, at budgets that cut inside a tie group and between them.
"""

from __future__ import annotations

import numpy as np
import pytest

from brwsim import Dirichlet, Uniform, Zipf, parse_family
from brwsim.kernels import collect as C
from brwsim.kernels import select as S
from brwsim.kernels import tree as T
from brwsim.kernels.aim import start_threshold
from brwsim.kernels.dist import closed_form
from brwsim.kernels.spec import Out

FAMILIES = [Dirichlet(0.05, 200), Dirichlet(0.05, 32000), Uniform(3), Zipf(1.5, 128000, spread=0.4),
            parse_family("ngram(corpus=prose, order=3)")]


def _pass(spec, ws, key, t, p_stop):
    out = C.collect(spec.law, key, -1, t, T.NO_DEPTH_CAP, ws.nodes, ws.levels, p_stop, ws.order)
    return out[0], out[4]


def _scores(ws, n, budgets):
    pos, dep, onpath, order = ws.nodes.pos, ws.nodes.dep, ws.nodes.onpath, ws.order
    acc = np.empty((budgets.size, 1), np.int32)
    exp = np.empty((budgets.size, 1))
    dmax = np.empty((budgets.size, 1), np.int32)
    S.select_nested(n, pos, dep, onpath, order, budgets, acc, exp, dmax, 0)
    return acc[:, 0].tolist(), exp[:, 0].tolist(), dmax[:, 0].tolist()


def _below(ws, n, v):
    pos, dep, onpath = ws.nodes.pos[:n], ws.nodes.dep[:n], ws.nodes.onpath[:n]
    keep = pos <= v
    return list(zip(pos[keep].tolist(), dep[keep].tolist(), onpath[keep].tolist()))


@pytest.mark.parametrize("family", FAMILIES, ids=repr)
@pytest.mark.parametrize("p", [40, 300])
def test_a_lowered_pass_scores_the_same_trees_as_the_full_pass(family, p):
    spec = family.spec()
    budgets = np.array([1, p // 3, p - 1, p], np.int64)
    ws = T.new_workspace(8 * p, spec.head_cap)
    lowered = 0
    for i in range(12):
        key = np.uint64(0x9E3779B97F4A7C15 * (i + 1) % 2**63)
        t = start_threshold(2 * p) + 0.5 * (i % 3)      # well above the P-th position
        n_full, low_full = _pass(spec, ws, key, t, 0)
        assert low_full == np.inf                          # p_stop 0: never lowered
        if n_full < p:
            continue
        full = _scores(ws, n_full, budgets)
        n, low = _pass(spec, ws, key, t, p)
        assert p <= n <= n_full
        assert np.sum(ws.nodes.pos[:n] <= low) >= p               # P nodes lie at or below it
        mine = _scores(ws, n, budgets)
        assert mine == full                                # the same bits, every budget
        below = _below(ws, n, low)
        _pass(spec, ws, key, t, 0)
        assert below == _below(ws, n_full, low)            # the same nodes, in pre-order
        lowered += n < n_full
    assert lowered > 0


def test_a_tree_grown_with_lowering_matches_its_cut_off_never_lowered():
    """grow_tree lowers every pass that is not continued; runs from a high start
    threshold against the budgets' own first pass at a tight one give equal outputs."""
    fam = Dirichlet(0.05, 32000)
    spec = fam.spec()
    budgets = np.array([5, 64, 256], np.int64)
    outs = []
    for t0 in (start_threshold(256), start_threshold(256) + 3.0):
        ws = T.new_workspace(256, spec.head_cap)
        out = Out.new(3, 1)
        got = []
        for i in range(6):
            key = np.uint64(0x5851F42D4C957F2D * (i + 3) % 2**63)
            visited, _, ws = T.grow_tree(spec.law, spec.head_cap, key, -1, 0, 0.0, budgets,
                                         T.NO_DEPTH_CAP, t0, ws, out, 0)
            assert visited >= 256
            got.append((out.acc[:, 0].tolist(), out.exp[:, 0].tolist(), out.dep[:, 0].tolist()))
        outs.append(got)
    assert outs[0] == outs[1]
