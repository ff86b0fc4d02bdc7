"""``--format json|csv`` of run, theory, ceiling, plan, bank-stats and inspect, and ``-`` for
standard input: every document parses, names its fields with units, and the CSV holds the
same rows as the JSON."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from brwsim.cli import main

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "logprobs" / "chat.jsonl"
FAMILY = "dirichlet(alpha=0.1, vocab=50)"


def _both(capsys, *args) -> tuple[dict, list[dict]]:
    """(the JSON report, the CSV rows) of ``brwsim ARGS``; stdout holds nothing else."""
    assert main([*args, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert main([*args, "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    return doc, rows


def _check(doc: dict, rows: list[dict], command: str, fields: set[str], csv_of: str = "rows") -> None:
    assert doc["command"] == command and doc["schema"] == 1 and doc["rows"]
    for row in doc["rows"]:
        assert fields <= set(row), fields - set(row)
        assert set(row) <= set(doc["units"]), set(row) - set(doc["units"])   # every field has a unit
    want = doc[csv_of]
    assert len(rows) == len(want)
    for got, exp in zip(rows, want):           # the CSV: the same values, empty for null
        for key, value in exp.items():
            if isinstance(value, float):
                assert float(got[key]) == pytest.approx(value, rel=1e-12)
            elif value is None:
                assert got[key] == ""
            else:
                assert got[key] == str(value)


@pytest.fixture(scope="module")
def bank(tmp_path_factory) -> Path:
    """A bank imported from standard input (``import-logprobs -``)."""
    out = tmp_path_factory.mktemp("bank") / "bank.nc"
    with open(FIXTURE, "rb") as fh:
        r = subprocess.run([sys.executable, "-m", "brwsim.cli", "import-logprobs", "-", "--out", str(out)],
                           stdin=fh, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert out.exists() and "positions" in r.stdout
    return out


def test_import_logprobs_from_stdin_equals_the_file(bank, tmp_path):
    import numpy as np
    import xarray as xr

    from brwsim.bank import import_logprobs

    direct = import_logprobs([FIXTURE], None)
    with xr.open_dataset(bank) as ds:
        np.testing.assert_array_equal(ds["probs"].values, direct["probs"].values)


def test_run_json_and_csv(capsys, tmp_path):
    out = tmp_path / "r.nc"
    doc, rows = _both(capsys, "run", "--family", FAMILY, "--budgets", "2,8", "--iterations", "50",
                      "--out", str(out), "--quiet")
    _check(doc, rows, "run", {"budget", "expected_mean", "expected_se", "upper_bound",
                              "small_budget_bound", "prediction", "paper_bound", "tokens_per_call"})
    assert [r["budget"] for r in doc["rows"]] == [2, 8] and doc["family"] == FAMILY
    assert doc["units"]["mu"] == "nats" and doc["mu"] > 0 and out.exists()
    r0 = doc["rows"][0]
    assert r0["tokens_per_call"] == pytest.approx(r0["accepted_mean"] + 1)


def test_run_with_policies_csv_is_the_policy_table(capsys):
    doc, rows = _both(capsys, "run", "--family", FAMILY, "--budgets", "4", "--iterations", "40",
                      "--policy", "chain()", "--no-out", "--quiet")
    _check(doc, rows, "run", {"budget"}, csv_of="policies")
    pol = {r["policy"]: r for r in doc["policies"]}
    assert pol["optimal()"]["fraction_of_optimal"] == 1.0
    assert 0 < pol["chain()"]["fraction_of_optimal"] < 1 and pol["chain()"]["fraction_se"] > 0


def test_theory_json_and_csv(capsys):
    doc, rows = _both(capsys, "theory", "--family", "uniform(k=3)", "--budgets", "1,4")
    _check(doc, rows, "theory", {"budget", "paper_bound", "upper_bound", "prediction",
                                 "prediction_asymptotic", "small_budget_bound"})
    assert doc["mu"] == pytest.approx(math.log(3)) and doc["exact"] is True
    assert doc["rows"][0]["prediction"] == pytest.approx(1 / 3, abs=1e-3)   # E[max q] at P = 1


def test_ceiling_json_and_csv(capsys):
    doc, rows = _both(capsys, "ceiling", "--budget", "49", "--tau", "4.83", "--entropy", "1.0")
    _check(doc, rows, "ceiling", {"shape", "ceiling", "tau_over_ceiling", "implied_entropy"})
    for r in doc["rows"]:
        assert r["tau_over_ceiling"] == pytest.approx(4.83 / r["ceiling"])


def test_bank_stats_plan_and_inspect_json_and_csv(capsys, bank, tmp_path):
    doc, rows = _both(capsys, "bank-stats", str(bank), "--budgets", "1,4")
    _check(doc, rows, "bank-stats", {"budget", "upper_bound", "prediction", "paper_bound"})
    assert doc["positions"] > 0 and doc["units"]["mu2"] == "nats^2"
    doc, rows = _both(capsys, "plan", "--bank", str(bank), "--params", "8e9", "--batch", "1,4",
                      "--budgets", "1..8", "--iterations", "20", "--quiet")
    _check(doc, rows, "plan", {"batch", "best_budget", "best_speedup", "best_speedup_se"})
    assert [r["batch"] for r in doc["rows"]] == [1, 4] and "h100" in doc["cost"].lower()
    doc, rows = _both(capsys, "inspect", str(bank))
    assert doc["kind"] == "bank" and "probs" in doc["variables"] and doc["rows"] == []
    run = tmp_path / "run.nc"
    assert main(["run", "--family", FAMILY, "--budgets", "2,8", "--iterations", "30", "--out",
                 str(run), "--quiet", "--policy", "chain()"]) == 0
    capsys.readouterr()
    doc, rows = _both(capsys, "inspect", str(run))
    _check(doc, rows, "inspect", {"group", "point", "budget", "expected_mean", "expected_se"})
    assert doc["kind"] == "run" and {r["policy"] for r in doc["rows"]} == {"optimal()", "chain()"}


def test_json_output_holds_only_the_document(tmp_path):
    """``wrote FILE`` goes to stderr, so ``| jq`` or ``json.load`` reads stdout as it is."""
    out = tmp_path / "r.nc"
    r = subprocess.run([sys.executable, "-m", "brwsim.cli", "run", "--family", "uniform(k=2)",
                        "--budgets", "1,2", "--iterations", "5", "--out", str(out), "--quiet",
                        "--format", "json"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["rows"][1]["budget"] == 2
    assert f"wrote {out}" in r.stderr


def test_sweep_config_from_stdin(tmp_path):
    toml = ('[sweep]\nbudgets = [1, 4]\niterations = 20\nchunk = 20\nseed = 1\n'
            '[[sweep.family]]\nname = "uniform"\nk = [2, 3]\n')
    r = subprocess.run([sys.executable, "-m", "brwsim.cli", "sweep", "-", "--out", str(tmp_path / "s"),
                        "--quiet"], input=toml, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "s" / "results.nc").exists()
