"""experiments/budget_curves.py and data/budget_curves.csv: sources, conventions, the fit."""

from __future__ import annotations

import csv
import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
CSV = ROOT / "data" / "budget_curves.csv"


@pytest.fixture(scope="module")
def bc():
    spec = importlib.util.spec_from_file_location("budget_curves",
                                                  ROOT / "experiments" / "budget_curves.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module              # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def _rows():
    with CSV.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_every_row_has_a_source_a_locator_and_a_temperature():
    rows = _rows()
    assert len(rows) == 150
    for r in rows:
        assert r["source"].startswith("https://github.com/") and "commit " in r["source"]
        commit = r["source"].split("commit ")[1].rstrip(")")
        assert len(commit) == 40 and int(commit, 16) >= 0
        assert r["locator"].strip()
        t = float(r["temperature"])
        assert math.isfinite(t) and t >= 0
        assert r["sampling"].strip()


def test_budget_conventions():
    """P is brwsim's draft nodes: the root is removed where the source counts it."""
    for r in _rows():
        b, p = int(r["budget"]), int(r["P"])
        if r["budget_kind"] == "tree_nodes_with_root":       # JetSpec's budget counts the root
            assert p == b - 1
        else:                                                 # chains of K; DDTree non-root nodes
            assert r["budget_kind"] in ("chain_length", "tree_nodes") and p == b
        assert 1 < float(r["tokens_per_call"]) <= p + 1
        assert r["tokens_per_call"] == r["acceptance_length"]  # AL counts the bonus token
        assert r["policy_class"] == ("chain" if r["budget_kind"] == "chain_length"
                                     else "best-first")


def test_greedy_and_sampled_curves_are_apart(bc):
    curves = bc.read_curves(CSV)
    temps = {c.curve_id: c.temperature for c in curves}
    assert {c.system for c in curves if c.temperature == 0} == {"Luce DFlash + DDTree",
                                                                "JetSpec engine"}
    assert all(t > 0 for c, t in temps.items() if c.startswith("ix-"))
    assert {temps["ix-qwen3.5-397b-mtp-thinking-on"], temps["ix-kimi-k2.5-eagle3-thinking-off"]} \
        == {0.6}


@pytest.mark.parametrize("cid,shape,trees", [
    ("ix-qwen3.5-397b-mtp-thinking-on", "zipf", 1), ("ix-glm-5.2-mtp-thinking-on", "zipf-spread", 300),
    ("lucebox-dflash-ddtree-rtx3090", "zipf", 1), ("lucebox-dflash-ddtree-rtx4090", "zipf-spread", 1),
    ("jetspec-qwen3-8b-gsm8k", "zipf-spread", 1)])
def test_the_fit_reproduces_its_own_first_point(bc, cid, shape, trees):
    curve = {c.curve_id: c for c in bc.read_curves(CSV)}[cid]
    h, pred, ceil = bc.fit_curve(curve, shape, trees, seed=3)
    assert math.isfinite(h) and h > 0
    assert abs(pred[0] - curve.tau[0]) < bc.FIT_TOL
    assert np.all(ceil >= pred - 1e-9)            # no policy beats the optimal tree
    if curve.policy_class == "best-first":
        np.testing.assert_allclose(pred, ceil, rtol=0, atol=1e-12)


def test_chain_prediction_is_the_geometric_sum(bc):
    """Deterministic zipf: the chain's prediction is 1 + sum_{k<=K} a^k, a = tau_1 - 1."""
    curve = {c.curve_id: c for c in bc.read_curves(CSV)}["ix-kimi-k2.5-eagle3-thinking-on"]
    h, pred, _ = bc.fit_curve(curve, "zipf", 1, seed=0)
    a = curve.tau[0] - 1
    want = 1 + np.array([sum(a ** k for k in range(1, K + 1)) for K in curve.P])
    np.testing.assert_allclose(pred, want, rtol=0, atol=1e-6)
    assert np.all(curve.tau[3:] < pred[3:])       # real chains fall below i.i.d. at depth


def test_per_position_acceptance(bc):
    a = 0.7
    tau = 1 + np.cumsum(a ** np.arange(1, 9))
    np.testing.assert_allclose(bc.per_position(tau), a, rtol=1e-12)
    out = bc.per_position(np.array([1.5, 2.0, 2.0, 2.0]))
    np.testing.assert_allclose(out[:3], [0.5, 1.0, 0.0])
    assert np.isnan(out[3])                       # P(X >= 3) = 0: undefined after it


@pytest.mark.parametrize("edit,needle", [
    (lambda r: r.update(source=""), "source"),
    (lambda r: r.update(temperature="hot"), "numbers"),
    (lambda r: r.update(temperature="-1"), "temperature"),
    (lambda r: r.update(tokens_per_call="0.5"), "tokens per call"),
    (lambda r: r.update(policy_class="magic"), "policy_class"),
])
def test_bad_csv_gives_one_line_and_no_output(bc, tmp_path, capsys, edit, needle):
    rows = _rows()
    edit(rows[0])
    bad = tmp_path / "bad.csv"
    with bad.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    out = tmp_path / "out.nc"
    assert bc.main(["--csv", str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_lucebox_models_match_their_source_sections():
    """The RTX 5090 sweeps of dflash/RESULTS.md run Qwen3.6-27B (its target and draft lines);
    the RTX 3090 / 4090 sweeps Qwen3.5-27B."""
    rows = [r for r in _rows() if r["curve_id"].startswith("lucebox-")]
    by_curve = {}
    for r in rows:
        by_curve.setdefault(r["curve_id"], set()).add((r["model"], r["drafter"]))
    for cid, models in by_curve.items():
        assert len(models) == 1
        (model, drafter), = models
        version = "Qwen3.6-27B" if "rtx5090" in cid else "Qwen3.5-27B"
        assert model.startswith(version) and version in drafter, cid
    q5 = sorted(int(r["P"]) for r in rows if r["curve_id"] == "lucebox-dflash-ddtree-rtx5090-q5kxl")
    assert q5 == [15, 16, 18, 20, 22, 24, 26, 30, 32, 40, 48, 64]
