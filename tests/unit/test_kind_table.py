"""Every kernel kind completes each step of docs/design.md's "Adding a kernel kind".

A kind code (brwsim.kernels.kinds) needs: a row of KIND_TABLE; a sampler module naming
the slots it owns (``LAYOUT``); a registered family whose components of that kind write
exactly those slots, by mapping; and dispatch entries in ``dist_init`` and ``dist_next``
(read off their sources, and exercised: a level set up and read through them gives a
sorted distribution of total mass at most 1).
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Mapping

import numpy as np
import pytest

import brwsim
from brwsim.families import REGISTRY
from brwsim.kernels import dist, kinds
from brwsim.kernels.kinds import FIRST_OWN, KIND_TABLE, NF, NI

#: Families of kinds no class ``example`` has: a transformer (its example would need a
#: checkpoint path) and the lazy Dirichlet (small alphas; the example's is an ORDERSTAT).
EXTRA_FAMILIES = ["transformer(path=target)", "dirichlet(alpha=0.05, vocab=200)"]
CODES = {name: value for name, value in vars(kinds).items()
         if name.isupper() and isinstance(value, int) and value in KIND_TABLE
         and KIND_TABLE[value].name == name}


def _family_components():
    """(family text, component) of every registered family's example and EXTRA_FAMILIES."""
    texts = [cls.example for cls in REGISTRY.values() if cls.example] + EXTRA_FAMILIES
    out = []
    for text in texts:
        for comp in brwsim.parse_family(text).components(1.0):
            out.append((text, comp))
    return out


COMPONENTS = _family_components()


def test_every_code_has_one_row():
    assert sorted(CODES.values()) == sorted(KIND_TABLE)
    assert len(set(row.name for row in KIND_TABLE.values())) == len(KIND_TABLE)
    for code, row in KIND_TABLE.items():
        assert getattr(kinds, row.name) == code
        assert not (row.closed and (row.contextual or row.lists_in_head)), row.name
        assert row.contextual or not row.neural, row.name


def test_property_masks_match_the_table():
    for code, row in KIND_TABLE.items():
        assert bool(kinds.CLOSED_MASK >> code & 1) == row.closed
        assert bool(kinds.CONTEXTUAL_MASK >> code & 1) == row.contextual
        assert bool(kinds.LISTED_MASK >> code & 1) == row.lists_in_head
        assert bool(kinds.NEURAL_MASK >> code & 1) == row.neural


def test_the_contextual_group_holds_only_the_n_gram():
    """The contextual (int8) group's set-up (``dist._lazy_init_impl``'s ``ngram_only``)
    sets up NGRAM levels only: a new contextual kind that is not neural needs its own
    entry there, and this test says so."""
    assert [r.name for r in KIND_TABLE.values() if r.contextual and not r.neural] == ["NGRAM"]
    assert "ngram_only" in inspect.getsource(dist._lazy_init_impl)


@pytest.mark.parametrize("code", sorted(KIND_TABLE))
def test_sampler_module_names_its_slots(code):
    row = KIND_TABLE[code]
    module = importlib.import_module(f"brwsim.kernels.{row.module}")
    assert code in getattr(module, "LAYOUT", {}), f"{row.name}: no LAYOUT entry in {module.__name__}"
    fslots, islots = module.LAYOUT[code]
    assert len(set(fslots)) == len(fslots) and all(0 <= s < NF for s in fslots)
    assert len(set(islots)) == len(islots) and all(FIRST_OWN <= s < NI for s in islots)


@pytest.mark.parametrize("code", sorted(KIND_TABLE))
def test_a_family_writes_the_layout_by_slot(code):
    row = KIND_TABLE[code]
    fslots, islots = importlib.import_module(f"brwsim.kernels.{row.module}").LAYOUT[code]
    found = [(text, comp) for text, comp in COMPONENTS if comp.kind == code]
    assert found, f"{row.name}: no registered family example has a component of this kind"
    for text, comp in found:
        assert isinstance(comp.fpar, Mapping) and isinstance(comp.ipar, Mapping), text
        assert set(comp.fpar) == set(fslots), (text, sorted(comp.fpar), fslots)
        assert set(comp.ipar) == set(islots), (text, sorted(comp.ipar), islots)


@pytest.mark.parametrize("code", sorted(KIND_TABLE))
def test_dispatch_entries(code):
    row = KIND_TABLE[code]
    init = inspect.getsource(dist.dist_init.py_func) + inspect.getsource(dist._lazy_init_impl)
    nxt = inspect.getsource(dist.dist_next.py_func)
    init_ok = (row.name in init or (row.closed and "is_closed(kind)" in init)
               or (row.contextual and "is_contextual(kind)" in init))
    assert init_ok, f"{row.name}: no entry in dist_init"
    if row.contextual:
        assert row.name in inspect.getsource(dist._contextual_init.py_func), row.name
    # dist_next reads a level by its effective kind: ENTROPY sets up a GEOMETRIC or ZIPF one
    effective = ["GEOMETRIC", "ZIPF"] if code == kinds.ENTROPY else [row.name]
    for name in effective:
        r = KIND_TABLE[getattr(kinds, name)]
        next_ok = (name in nxt or (r.closed and "is_closed(kind)" in nxt)
                   or (r.lists_in_head and "lists_in_head(kind)" in nxt))
        assert next_ok, f"{name}: no entry in dist_next"


def _read_root(spec, n_max):
    li = np.zeros((2, kinds.LEVEL_I), np.int64)
    lf = np.zeros((2, kinds.LEVEL_F))
    head = np.zeros((2, max(spec.head_cap, 1)))
    key = np.uint64(0x9E3779B97F4A7C15)
    dist.dist_init(spec.law, key, 0, lf,
                   li, head, -np.inf, kinds.ROOT_DRAW, 0)
    out = []
    for _ in range(n_max):
        lq = dist.dist_next(spec.fpar, spec.ipar, spec.data, key, 0, lf, li, head)
        if lq == -np.inf:
            break
        out.append(lq)
    return li[0, kinds.KIND_SLOT], np.array(out)


def _check_read(code):
    text = next(t for t, comp in COMPONENTS if comp.kind == code)
    spec = brwsim.parse_family(text).spec()
    if spec.kinds.size > 1:     # a mixture: take the component of this kind alone
        spec = brwsim.kernels.spec.compile_spec([c for t, c in COMPONENTS
                                                 if t == text and c.kind == code])
    effective, lq = _read_root(spec, 4096)
    assert effective in KIND_TABLE, (text, effective)
    assert lq.size > 0 and math.isfinite(lq[0]) and lq[0] <= 0.0, text
    assert np.all(np.diff(lq) <= 1e-12 * np.abs(lq[1:])), text
    assert np.exp(lq).sum() <= 1.0 + 1e-9, text


@pytest.mark.parametrize("code", sorted(c for c, r in KIND_TABLE.items() if not r.contextual))
def test_dispatch_reads_a_distribution(code):
    _check_read(code)


@pytest.mark.slow
@pytest.mark.parametrize("code", sorted(c for c, r in KIND_TABLE.items() if r.contextual))
def test_dispatch_reads_a_contextual_distribution(code):
    _check_read(code)
