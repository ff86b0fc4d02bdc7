"""Continued threshold passes (``collect.resume``) against fresh passes and the heapq reference.

A pass at t1 continued to t2 must hold exactly the nodes of one fresh pass at t2 (same
positions, depths and path flags; appended out of pre-order) and the same path frontier;
whole runs whose first passes fall short (a low starting threshold, and the tuned aim that
leaves about one root in three short) must give the heapq reference's trees.
"""

from __future__ import annotations

import numpy as np
import pytest

from brwsim import Mixture, Peaked, Zipf
from brwsim.kernels import collect as C
from brwsim.kernels import tree as T
from brwsim.kernels.dist import closed_form
from tests.unit.test_tree import _check_reference

FAMILIES = [Zipf(1.5, 128000, spread=0.4), Peaked(4.0, 0.5, 1.1, 32000),
            Mixture([Peaked(4.0, 0.5, 1.1, 32000), Zipf(1.1, 32000, spread=0.3)], [0.75, 0.25]),
            Zipf(1.2, 50, spread=0.5)]


def _pass(spec, ws, key, t, p_max, first=None):
    if first is None:
        return C.collect(spec.law, key, -1, t, p_max, ws.nodes, ws.levels, 0, ws.order)[:4]
    n, fr, fu, fc = first
    return C.resume(spec.law, t, p_max, n, (fr, fu, fc), ws.nodes, ws.levels)


def _nodes(ws, n):
    pos, dep, onpath = ws.nodes.pos, ws.nodes.dep, ws.nodes.onpath
    return sorted(zip(pos[:n].tolist(), dep[:n].tolist(), onpath[:n].tolist()))


@pytest.mark.parametrize("family", FAMILIES, ids=repr)
def test_a_continued_pass_holds_exactly_the_fresh_pass_nodes(family):
    spec = family.spec()
    assert closed_form(spec.kinds, spec.cprog)
    ws = T.new_workspace(4096, spec.head_cap)
    checked = 0
    for i in range(40):
        key = np.uint64(0x9E3779B97F4A7C15 * (i + 1) % 2**63)
        for t1, t2 in ((3.0, 6.0), (5.0, 5.2), (1.0, 7.5)):
            first = _pass(spec, ws, key, t1, 4096)
            n1 = first[0]
            cont = _pass(spec, ws, key, t2, 4096, first)
            assert cont[0] >= n1
            got = _nodes(ws, cont[0])
            pos = ws.nodes.pos
            frontier = (pos[cont[1]] if 0 <= cont[1] < cont[0] else None, cont[2], cont[3])
            fresh = _pass(spec, ws, key, t2, 4096)
            assert got == _nodes(ws, fresh[0])
            assert frontier == (pos[fresh[1]] if 0 <= fresh[1] < fresh[0] else None, fresh[2],
                                fresh[3])
            checked += cont[0] - n1
    assert checked > 1000           # the continuations did add nodes


@pytest.mark.parametrize("family", FAMILIES, ids=repr)
def test_runs_with_continued_passes_match_the_heapq_reference(family):
    _check_reference(family, budgets=[1, 5, 64, 300, 700], iterations=6, seed=11, k=1024)


def test_lattice_families_do_not_continue():
    """Exact ties break by pre-order, which a continued pass does not keep."""
    from brwsim import Geometric, Uniform
    for fam in (Uniform(3), Geometric(0.5), Zipf(1.1, 50)):
        spec = fam.spec()
        assert C.lattice(spec.kinds, spec.fpar)
    for fam in FAMILIES:
        spec = fam.spec()
        assert not C.lattice(spec.kinds, spec.fpar)
