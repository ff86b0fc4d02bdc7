"""Cost models (roofline, measured table, drafter) and the planner built on them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from brwsim import Dirichlet, Fixed, Uniform, UserError, plan, simulate
from brwsim.cost import (GPUS, Constant, CostModel, Drafter, GPU, MeasuredTable, Roofline,
                         get_gpu, make_cost)
from brwsim.plan import plan_from_runs


# --- roofline ---------------------------------------------------------------------------

def test_roofline_memory_then_compute_bound():
    """8e9 BF16 params on an H100: 16 GB / 3.35 TB/s until 2 * 8e9 * n / 989e12 exceeds it."""
    r = Roofline(8e9, "h100")
    mem = 16e9 / 3.35e12
    np.testing.assert_allclose(r.time(1, 1), mem, rtol=1e-15)
    np.testing.assert_allclose(r.time(200, 1), mem, rtol=1e-15)
    ridge = mem * 989e12 / (2 * 8e9)
    assert r.ridge_tokens() == pytest.approx(ridge, rel=1e-12)
    np.testing.assert_allclose(r.time(4 * ridge, 1), 4 * mem, rtol=1e-12)
    assert np.all(np.diff(r.time(np.arange(1, 2000), 1)) >= 0)


def test_roofline_kv_cache_and_overhead():
    """The KV cache is read once per request: B * context * bytes per token, plus overhead."""
    r = Roofline(1e9, GPU("toy", 1e15, 1e12), bytes_per_param=1.0, kv_bytes_per_token=1e5,
                 context=1000, overhead=0.002)
    want = (1e9 + 8 * 1000 * 1e5) / 1e12 + 0.002
    np.testing.assert_allclose(r.time(8, 8), want, rtol=1e-15)


def test_presets_match_their_cited_datasheet_numbers():
    assert set(GPUS) == {"a100", "h100", "h200", "b200", "rtx4090"}
    for g in GPUS.values():
        tflops = f"{g.peak_flops / 1e12:g}"
        assert tflops in g.source.replace(",", "") or f"{g.peak_flops / 1e15:g} PFLOPS" in g.source
    assert get_gpu("H100").bandwidth == 3.35e12 and get_gpu("4090") is GPUS["rtx4090"]


@pytest.mark.parametrize("kwargs,match", [
    (dict(params=0), "params"), (dict(params=-1e9), "params"), (dict(params=math.inf), "params"),
    (dict(params=1e9, bytes_per_param=0), "bytes_per_param"),
    (dict(params=1e9, context=-5), "context"), (dict(params=1e9, overhead=-1), "overhead"),
    (dict(params=1e9, gpu="x100"), "unknown gpu"),
])
def test_roofline_rejects_bad_input(kwargs, match):
    with pytest.raises(UserError, match=match):
        Roofline(**kwargs)


def test_gpu_rejects_negative_bandwidth():
    with pytest.raises(UserError, match="bandwidth"):
        GPU("bad", 1e12, -1.0)
    with pytest.raises(UserError, match="bandwidth"):
        make_cost(gpu="h100", params=8e9, bandwidth_tbs=-3)


# --- measured table ---------------------------------------------------------------------

def test_table_interpolates_monotone_and_extrapolates_linearly(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("# my H100\ntokens,ms,note\n1,10,a\n64,10,b\n256,14,c\n")
    t = MeasuredTable.from_csv(path)
    np.testing.assert_allclose(t.time([1, 32, 64, 160, 256], 1), [0.010, 0.010, 0.010, 0.012, 0.014])
    np.testing.assert_allclose(t.time(0.5, 1), 0.010)                # below: the first point
    np.testing.assert_allclose(t.time(512, 1), 0.014 + 4 / 192 * 256 / 1e3)
    grid = np.linspace(1, 600, 400)
    assert np.all(np.diff(t.time(grid, 1)) >= 0)


@pytest.mark.parametrize("text,match", [
    ("", "empty"), ("tokens,ms\n", "two"), ("tokens,ms\n1,2\n", "two"),
    ("tok,time\n1,2\n2,3\n", "header"), ("tokens,ms\n1,2\nx,3\n", "row 3"),
    ("tokens,ms\n1,2\n4\n", "row 3"), ("tokens,ms\n4,2\n2,3\n", "increasing"),
    ("tokens,ms\n1,2\n1,3\n", "increasing"), ("tokens,ms\n0,2\n2,3\n", ">= 1"),
    ("tokens,ms\n1,5\n2,3\n", "non-decreasing"), ("tokens,ms\n1,-1\n2,3\n", "positive"),
    ("tokens,ms\n1,nan\n2,3\n", "non-finite"),
])
def test_malformed_tables_refused(tmp_path, text, match):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(UserError, match=match):
        MeasuredTable.from_csv(path)


def test_missing_or_binary_table(tmp_path):
    with pytest.raises(UserError, match="nope.csv: no such file"):
        MeasuredTable.from_csv(tmp_path / "nope.csv")
    (tmp_path / "b.csv").write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(UserError, match="cost table"):
        MeasuredTable.from_csv(tmp_path / "b.csv")


def test_drafter_and_cost_model():
    c = CostModel(Constant(0.01), Drafter(per_level=0.001, per_node=1e-5))
    np.testing.assert_allclose(c.step_time(4, 100, 6), 0.01 + 0.006 + 0.001)
    np.testing.assert_allclose(c.plain_time(4), 0.01)
    with pytest.raises(UserError, match="per_level"):
        Drafter(per_level=-1)
    with pytest.raises(UserError, match="exactly one"):
        make_cost(gpu="h100")
    with pytest.raises(UserError, match="exactly one"):
        make_cost(params=1e9, constant_ms=3)
    with pytest.raises(UserError, match="verifier"):
        CostModel("h100")


# --- plan -------------------------------------------------------------------------------

BUDGETS = [1, 4, 16, 64, 256]


@pytest.mark.parametrize("batch", [[1], [1, 4, 16]])
def test_constant_time_free_drafting_takes_the_largest_budget(batch):
    """Constant call time, free drafting: P* = max P and the speedup is 1 + E[X] per request."""
    fam = Dirichlet(0.3, 50)
    ds = plan(fam, CostModel(Constant(0.02)), batch, BUDGETS, 40, seed=3)
    assert list(ds.best_budget.values) == [max(BUDGETS)] * len(batch)
    for i, b in enumerate(batch):
        run = simulate(fam, BUDGETS, 40, seed=3, batch=b)
        e = run.expected_accepted.values[-1].mean()
        assert ds.best_speedup.values[i] == pytest.approx(1 + e / b, rel=1e-13)
        assert ds.best_tokens_per_call.values[i] == pytest.approx(1 + e / b, rel=1e-13)
        np.testing.assert_allclose(ds.speedup.values[i],
                                   1 + run.expected_accepted.values.mean(1) / b, rtol=1e-13)
    assert np.all(ds.step_time_se.values == 0)


def test_plan_exact_on_a_deterministic_family():
    """Uniform(2), B = 1, roofline: E[X | T_P] is exact, so the speedup curve is known."""
    cost = CostModel(Roofline(1e9, GPU("toy", 1e14, 1e12)))          # ridge at 50 tokens
    budgets = [2, 6, 14, 30, 62, 126]                                   # full levels: E[X] = 1..6
    ds = plan(Uniform(2), cost, [1], budgets, 3, seed=0)
    t = lambda n: max(2e9 / 1e12, 2e9 * n / 1e14)                       # noqa: E731
    want = [(1 + d) * t(1) / t(1 + p) for d, p in zip(range(1, 7), budgets)]
    np.testing.assert_allclose(ds.speedup.values[0], want, rtol=1e-12)
    assert int(ds.best_budget[0]) == budgets[int(np.argmax(want))]
    assert ds.speedup_se.values.max() == 0


def test_plan_says_zero_when_speculation_does_not_pay():
    """A drafter costing more than a call: plain decoding (P* = 0, speedup 1) is best."""
    cost = CostModel(Constant(0.01), Drafter(per_level=0.05))
    ds = plan(Fixed([0.5, 0.3]), cost, [1, 2], [1, 2, 8], 5, seed=0)
    assert list(ds.best_budget.values) == [0, 0]
    assert list(ds.best_speedup.values) == [1.0, 1.0]
    np.testing.assert_allclose(ds.best_step_time.values, 0.01)


def test_plan_speedup_se_covers_a_fresh_seed():
    """The delta-method SE is honest: two seeds agree within 5 combined SE."""
    cost = CostModel(Roofline(8e9, "h100"), Drafter(per_level=2e-4))
    a = plan(Dirichlet(0.3, 50), cost, [1, 8], BUDGETS, 300, seed=1)
    b = plan(Dirichlet(0.3, 50), cost, [1, 8], BUDGETS, 300, seed=2)
    z = (a.speedup - b.speedup) / np.hypot(a.speedup_se, b.speedup_se)
    assert float(abs(z).max()) < 5
    assert float(a.speedup_se.max()) > 0


def test_plan_bad_input():
    cost = CostModel(Constant(0.01))
    with pytest.raises(UserError, match="batch"):
        plan(Uniform(2), cost, [0, 2], [4], 2)
    with pytest.raises(UserError, match="distinct"):
        plan(Uniform(2), cost, [2, 2], [4], 2)
    with pytest.raises(UserError, match="CostModel"):
        plan(Uniform(2), "h100", [1], [4], 2)
    with pytest.raises(UserError, match="same budgets"):
        plan_from_runs([simulate(Uniform(2), [2], 2), simulate(Uniform(2), [4], 2, batch=2)], cost)
