"""Sweeps over batch sizes and with a cost section: the grid, paired roots, pricing, errors."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from brwsim import Dirichlet
from brwsim.sweep.config import load_config
from brwsim.cost import make_cost
from brwsim.errors import UserError
from brwsim.plan import plan_from_runs
from brwsim.simulate import run_forest, run_iterations, validate_budgets
from brwsim.sweep import sweep

CONFIG = """
[sweep]
seed = 3
iterations = 60
chunk = 20
budgets = [1, 4, 16, 64]
prediction = "none"
batch = [1, 4]

[sweep.cost]
gpu = "h100"
params = 8e9
draft_level_ms = 0.3

[[sweep.family]]
name = "dirichlet"
alpha = [0.3, 0.05]
vocab = 50
"""


def test_batch_grid_and_cost(tmp_path):
    """batch = [1, 4] is the last grid dimension; data match simulate(batch=B) on the point's roots."""
    (tmp_path / "s.toml").write_text(CONFIG)
    cfg = load_config(tmp_path / "s.toml")
    assert cfg.n_points == 4 and cfg.blocks[0].grid["batch"] == [1, 4]
    # the two batch sizes of one family share the root key (paired comparison)
    assert cfg.point_key(0) == cfg.point_key(1) != cfg.point_key(2) == cfg.point_key(3)
    report = sweep(tmp_path / "s.toml", tmp_path / "out", jobs=1)
    g = xr.open_dataset(report.path, group="dirichlet")
    assert g["batch"].values.tolist() == [1, 4] and g.sizes["alpha"] == 2
    cost = make_cost(gpu="h100", params=8e9, draft_level_ms=0.3)
    budgets = [1, 4, 16, 64]
    b = validate_budgets(budgets)
    for ia, alpha in enumerate([0.3, 0.05]):
        runs = []
        spec = Dirichlet(alpha, 50).spec()
        keys = g["point_key"].isel(alpha=ia).values
        assert keys[0] == keys[1]                 # both batch sizes on the same roots
        for ib, batch in enumerate([1, 4]):
            pt = g.isel(alpha=ia, batch=ib)
            key = np.uint64(pt["point_key"].values)   # rebuild the point's arrays from its key
            if batch == 1:
                acc, exp, dep, *_ = run_iterations(spec, b, key, 0, 60)
                exp_s = exp
            else:
                acc, exp, dep, _, exp_s, *_ = run_forest(spec, b, key, 0, 60, batch)
            np.testing.assert_array_equal(pt["expected_accepted"].values, exp)
            np.testing.assert_allclose(pt["expected_mean"].values, exp.mean(1), rtol=1e-13)
            np.testing.assert_allclose(pt["split_expected_mean"].values, exp_s.mean(1), rtol=1e-13)
            np.testing.assert_allclose(pt["tokens_per_call"].values, 1 + acc.mean(1) / batch, rtol=1e-13)
            assert np.all(pt["sharing_gain"].values >= 1 - 1e-12)
            if batch == 1:
                np.testing.assert_allclose(pt["sharing_gain"].values, 1.0, rtol=1e-13)
            ds = xr.Dataset({"expected_accepted": (("budget", "iteration"), exp),
                             "depth": (("budget", "iteration"), dep)},
                            {"budget": b}, {"batch": batch})
            runs.append(ds)
        ref = plan_from_runs(runs, cost)
        for ib in range(2):
            pt = g.isel(alpha=ia, batch=ib)
            np.testing.assert_allclose(pt["speedup"].values, ref.speedup.values[ib], rtol=1e-12)
            np.testing.assert_allclose(pt["speedup_se"].values, ref.speedup_se.values[ib], rtol=1e-9)
            np.testing.assert_allclose(pt["step_time"].values, ref.step_time.values[ib], rtol=1e-12)
            assert int(pt["best_budget"]) == int(ref.best_budget[ib])
    assert "roofline" in xr.open_dataset(report.path).attrs["cost"]
    assert "assumes that point's family" in xr.open_dataset(report.path).attrs["cost_family"]


@pytest.mark.parametrize("line,match", [
    ("batch = 0", "sweep.batch: must be a positive integer"),
    ("batch = [1, 1]", r"sweep.batch\[1\]: duplicate"),
    ("batch = [1, 2.5]", r"sweep.batch\[1\]: must be a positive integer"),
    ("batch = []", "sweep.batch: empty"),
    ("cost = 3", "sweep.cost: must be a table"),
    ("cost = {gpu = 'h100'}", "exactly one verifier"),
    ("cost = {gpu = 'h100', params = 8e9, bandwidth_tbs = -1}", "bandwidth_tbs"),
    ("cost = {gpu = 'x', params = 8e9}", "unknown gpu"),
    ("cost = {params = 8e9, speed = 2}", "sweep.cost.speed: unknown key"),
    ("cost = {table = 'missing.csv'}", "cost table missing.csv: no such file"),
])
def test_bad_batch_and_cost(tmp_path, line, match):
    text = f"""
[sweep]
iterations = 10
budgets = [1, 4]
{line}

[[sweep.family]]
name = "uniform"
k = 2
"""
    (tmp_path / "s.toml").write_text(text)
    with pytest.raises(UserError, match=match):
        load_config(tmp_path / "s.toml")
    assert not (tmp_path / "out").exists()


def test_no_batch_key_keeps_the_old_hash():
    """A configuration without batch or cost hashes as before these keys existed."""
    cfg = load_config({"sweep": {"iterations": 5, "budgets": [1, 2],
                                 "family": [{"name": "uniform", "k": 2}]}})
    assert "batch" not in cfg.normalized and "cost" not in cfg.normalized
    assert cfg.point_key(0) == np.random.SeedSequence(0, spawn_key=(0,)).generate_state(1, np.uint64)[0]
