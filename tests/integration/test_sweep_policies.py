"""Drafting policies as a sweep dimension (``[[sweep.policy]]``, docs/sweeps.md).

Every policy of a family point must equal ``run_policy`` on that point's roots (common
random numbers; ``optimal()`` is ``run_iterations``), never beat the oracle on any tree,
and resume and parallelise like any other sweep.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from brwsim.errors import UserError
from brwsim.families import parse_family
from brwsim.policies import parse_policy, run_policy
from brwsim.sweep import sweep
from brwsim.sweep.config import load_config

HEAD = """
[sweep]
seed = 11
iterations = 60
chunk = 20
budgets = [1, 4, 16, 64]
prediction = "none"

[[sweep.family]]
name = "dirichlet"
alpha = [0.05, 0.3]
vocab = 100
"""
POLICIES = """
[[sweep.policy]]
name = "optimal"

[[sweep.policy]]
name = "dynamic"
depth = [3, 5]
topk = 3

[[sweep.policy]]
name = "expansion"
widths = [[4, 2], [2, 2, 2]]

[[sweep.policy]]
name = "chain"
"""
NAMES = ["optimal()", "dynamic(depth=3, topk=3)", "dynamic(depth=5, topk=3)",
         "expansion(widths=[4, 2])", "expansion(widths=[2, 2, 2])", "chain()"]


def _run(tmp: Path, text: str, out: str, **kw) -> xr.Dataset:
    cfg = tmp / f"{out}.toml"
    cfg.write_text(text)
    rep = sweep(cfg, tmp / out, **kw)
    with xr.open_datatree(rep.path) as tree:
        return tree["dirichlet"].to_dataset().load()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("policy_sweep")
    return tmp, _run(tmp, HEAD + POLICIES, "pol")


def test_config_expands_tables_into_a_policy_dimension():
    cfg = load_config({"sweep": {"iterations": 10, "budgets": [1, 4],
                                 "family": [{"name": "zipf", "s": [1.1, 1.3], "vocab": 50}],
                                 "policy": [{"name": "kary", "k": [2, 3]}, {"name": "chain"}]}})
    block = cfg.blocks[0]
    assert list(block.grid) == ["s", "policy"]
    assert block.grid["policy"] == ["kary(k=2)", "kary(k=3)", "chain()"]
    assert [block.policy(i) for i in range(6)] == ["kary(k=2)", "kary(k=3)", "chain()"] * 2
    # every policy of a family point shares that point's root key (common random numbers)
    keys = [cfg.point_key(i) for i in range(6)]
    assert keys[0] == keys[1] == keys[2] != keys[3] == keys[4] == keys[5]


def test_layout(runs):
    _, pol = runs
    assert list(pol["policy"].values) == NAMES
    assert pol["accepted"].dims == ("alpha", "policy", "budget", "iteration")
    assert pol["expected_mean"].dims == ("alpha", "policy", "budget")


def test_each_policy_is_run_policy_on_the_same_roots(runs):
    tmp, pol = runs
    cfg = load_config(tmp / "pol.toml")
    for point, (alpha, name) in enumerate([(a, n) for a in (0.05, 0.3) for n in NAMES]):
        fam = parse_family(f"dirichlet(alpha={alpha}, vocab=100)")
        acc, exp, dep = run_policy(parse_policy(name), fam.spec(), cfg.budgets,
                                   cfg.point_key(point), 0, 60)
        sel = pol.sel(alpha=alpha, policy=name)
        np.testing.assert_array_equal(sel["accepted"].values, acc)
        np.testing.assert_array_equal(sel["expected_accepted"].values, exp)
        np.testing.assert_array_equal(sel["depth"].values, dep)


def test_no_policy_beats_the_oracle_on_any_tree(runs):
    _, pol = runs
    best = pol["expected_accepted"].sel(policy="optimal()")
    gap = best - pol["expected_accepted"]
    assert float(gap.min()) >= -1e-12
    assert float(gap.sel(policy="chain()", budget=64).mean()) > 0.1   # a real gap


def test_two_jobs_and_resume_are_identical(runs, tmp_path):
    tmp, pol = runs
    again = _run(tmp_path, HEAD + POLICIES, "jobs2", jobs=2)
    xr.testing.assert_identical(again.drop_attrs(), pol.drop_attrs())


@pytest.mark.parametrize("policy, message", [
    ('[[sweep.policy]]\nname = "eagle"', "sweep.policy[0].name: unknown policy"),
    ('[[sweep.policy]]\nname = "kary"\nkk = 2', "sweep.policy[0].kk: unknown key"),
    ('[[sweep.policy]]\nname = "kary"\nk = [2, 2]', "duplicate policy kary(k=2)"),
    ('[[sweep.policy]]\nname = "kary"\nk = 0', "sweep.policy[0]: k"),
    ('[[sweep.policy]]\nname = "kary"\nk = []', "empty list"),
    ('policy = 3', "must be one or more [[sweep.policy]] tables"),
])
def test_bad_policy_tables_are_one_line_errors(tmp_path, policy, message):
    if policy.startswith("policy"):                  # a key of [sweep], not a table
        text = HEAD.replace('prediction = "none"\n', f'prediction = "none"\n{policy}\n')
    else:
        text = HEAD + policy
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    with pytest.raises(UserError) as err:
        load_config(cfg)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_policies_refuse_batches():
    with pytest.raises(UserError, match="no sweep.batch > 1"):
        load_config({"sweep": {"iterations": 10, "budgets": [4], "batch": [1, 4],
                               "family": [{"name": "zipf", "s": 1.1, "vocab": 50}],
                               "policy": [{"name": "chain"}]}})


def test_a_policy_the_family_cannot_take_is_refused_before_anything_is_written(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text(HEAD + '\n[[sweep.policy]]\nname = "drafter"\npath = "draft"\n')
    with pytest.raises(UserError, match=r"sweep.family\[0\] dirichlet\(alpha=0.05.*drafter.*"
                                        r"must be a transformer family"):
        sweep(cfg, tmp_path / "out")
    assert not (tmp_path / "out").exists()
