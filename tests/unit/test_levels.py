"""The level-by-level pass (``kernels.levels``) against the depth-first pass and the heapq reference.

A level pass at cut-off t must hold exactly the nodes of ``collect.collect`` at t (same
positions, depths and path flags, in another order), with and without a depth cap, and
abort where ``_collect`` does; whole runs that use it must give the heapq reference's
trees, also where near-ties at a budget's cut send a root back to the depth-first pass.
"""

from __future__ import annotations

import numpy as np
import pytest

from brwsim import Dirichlet, Peaked, Zipf, engine
from brwsim.kernels import collect as C
from brwsim.kernels import select as S
from brwsim.kernels import tree as T
from brwsim.kernels.dist import closed_form
from brwsim.kernels.levels import LEVEL_MIN_P, level_family, level_pass
from tests.unit.test_resume import _nodes, _pass
from tests.unit.test_tree import _check_capped_reference, _check_reference

FAMILIES = [Zipf(1.5, 128000, spread=0.4), Zipf(1.2, 50, spread=0.5), Zipf(1.1, 32000, spread=0.3)]


def _level(spec, ws, key, t, cut, cap=None):
    closed = closed_form(spec.kinds, spec.cprog)
    top = C.top_bound(spec.kinds, spec.fpar, closed)
    nodes = ws.nodes
    cap = nodes.pos.shape[0] if cap is None else cap
    return level_pass(spec.fpar, spec.ipar, spec.data, key, S.tie_cut(t), cap, cut, top, nodes.pos,
                      nodes.dep, nodes.onpath, ws.lv)


@pytest.mark.parametrize("family", FAMILIES, ids=repr)
def test_a_level_pass_holds_exactly_the_depth_first_nodes(family):
    spec = family.spec()
    ws = T.new_workspace(4096, spec.head_cap)
    checked = paths = 0
    for i in range(30):
        key = np.uint64(0x9E3779B97F4A7C15 * (i + 1) % 2**63)
        for t in (0.5, 4.0, 9.0):
            for cut in (4096, 3):
                n = _level(spec, ws, key, t, cut)
                got = _nodes(ws, n)
                want_n = _pass(spec, ws, key, t, cut)[0]
                assert got == _nodes(ws, want_n)
                checked += n
                paths += sum(f for _, _, f in got)
    assert checked > 20000 and paths > 50      # trees of many nodes, paths followed


def test_a_level_pass_beyond_its_capacity_aborts_as_the_depth_first_pass():
    spec = FAMILIES[0].spec()
    ws = T.new_workspace(4096, spec.head_cap)
    key = np.uint64(12345)
    full = _level(spec, ws, key, 6.0, 4096)
    assert full > 100
    assert _level(spec, ws, key, 6.0, 4096, cap=full) == full
    assert _level(spec, ws, key, 6.0, 4096, cap=full - 1) == C.ABORT
    nodes = ws.nodes
    c = full - 1                        # a pass with room for one node less
    short = C.Nodes(nodes.pos[:c], nodes.dep[:c], nodes.onpath[:c], nodes.nkey[:c + 1],
                    nodes.nxt[:c + 1], nodes.nrk[:c + 1])
    got = C.collect(spec.law, key, -1, 6.0, 4096, short, ws.levels, 0, ws.order)[0]
    assert got == C.ABORT


def test_which_runs_pass_by_levels():
    """Zipf with a spread, at P_max >= LEVEL_MIN_P; never lattices, mixtures or other kinds."""
    for fam, expected in ((FAMILIES[0], True), (Zipf(1.5, 1000), False), (Peaked(4.0, 0.5, 1.1, 32000), False),
                          (Dirichlet(0.05, 200), False)):
        spec = fam.spec()
        closed = closed_form(spec.kinds, spec.cprog)
        assert level_family(spec.kinds, spec.fpar, closed, LEVEL_MIN_P) == expected
        assert not level_family(spec.kinds, spec.fpar, closed, LEVEL_MIN_P - 1)


@pytest.mark.parametrize("family", FAMILIES, ids=repr)
def test_runs_passed_by_levels_match_the_heapq_reference(family):
    _check_reference(family, budgets=[1, 5, 64, LEVEL_MIN_P, 1000], iterations=5, seed=17, k=2048)


@pytest.mark.parametrize("cap", [3, 6])
def test_depth_capped_runs_passed_by_levels_match_the_capped_reference(cap):
    _check_capped_reference(FAMILIES[1], [1, 10, 100, 400], cap, seed=9, k=64)


def test_near_ties_at_a_cut_fall_back_to_the_depth_first_pass():
    """A spread of 1e-13 leaves positions of equal rank multisets within TIE_REL of each
    other: ties at the cuts, which pre-order breaks, so the roots are collected again depth
    first (and later roots are, as for a lattice); the trees are still the reference's."""
    family = Zipf(1.5, 40, spread=1e-13)
    spec = family.spec()
    assert level_family(spec.kinds, spec.fpar, closed_form(spec.kinds, spec.cprog), 300)
    engine.run_iterations(spec, engine.validate_budgets([3, 50, 300]), engine.seed_key(2), 0, 1)
    # the root met ties at a cut (and was collected again): the workspace's ties flag
    assert engine._workspace(300, spec.head_cap).flags[0] == 1.0
    _check_reference(family, budgets=[3, 50, 300], iterations=4, seed=2, k=40)
