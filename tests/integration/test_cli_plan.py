"""``brwsim plan``: the table, the file, and one-line errors with exit status 2 and no file."""

from __future__ import annotations

import pytest
import xarray as xr

from brwsim.cli import main

FAM = "dirichlet(alpha=0.3, vocab=50)"


def test_plan_prints_table_and_writes_file(tmp_path, capsys):
    out = tmp_path / "plan.nc"
    table = tmp_path / "t.csv"
    table.write_text("tokens,ms\n1,8\n128,8\n1024,40\n")
    assert main(["plan", "--family", FAM, "--cost-table", str(table), "--batch", "1,4",
                 "--budgets", "1,4,16,64", "--iterations", "20", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "P*" in text and "speedup" in text and "measured table" in text
    ds = xr.open_dataset(out)
    assert ds["batch"].values.tolist() == [1, 4]
    assert ds["best_budget"].values.tolist() == [64, 64]    # flat table below 128 tokens
    assert "config_json" in ds.attrs


@pytest.mark.parametrize("args,match", [
    (["--batch", "0", "--params", "8e9"], "B >= 1"),
    (["--batch", "1,x", "--params", "8e9"], "not an integer"),
    (["--params", "8e9", "--bandwidth-tbs", "-2"], "bandwidth_tbs"),
    (["--params", "8e9", "--gpu", "h900"], "unknown gpu"),
    (["--params", "0"], "params"),
    ([], "--params"),
    (["--cost-table", "TABLE"], "non-decreasing"),
    (["--cost-table", "MISSING"], "no such file"),
    (["--params", "8e9", "--iterations", "0"], "iterations"),
    (["--params", "8e9", "--draft-level-ms", "-1"], "draft_level_ms"),
])
def test_plan_bad_input_one_line_exit_2_no_file(tmp_path, capsys, args, match):
    bad = tmp_path / "bad.csv"
    bad.write_text("tokens,ms\n1,9\n64,3\n")
    args = [str(bad) if a == "TABLE" else str(tmp_path / "missing.csv") if a == "MISSING" else a
            for a in args]
    out = tmp_path / "plan.nc"
    code = main(["plan", "--family", FAM, "--budgets", "1,4", "--iterations", "5", *args,
                 "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.count("\n") == 0 and err.startswith("brwsim: error:") and match in err, err
    assert not out.exists()


def test_run_batch_table_and_errors(tmp_path, capsys):
    out = tmp_path / "b.nc"
    assert main(["run", "--family", FAM, "--budgets", "4,16", "--iterations", "10", "--batch", "4",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "shared/split" in text and "batch: 4" in text
    assert xr.open_dataset(out).attrs["batch"] == 4
    for args, match in [(["--batch", "0"], "B >= 1"), (["--batch", "2", "--policy", "chain()"], "--policy")]:
        bad = tmp_path / "bad.nc"
        assert main(["run", "--family", FAM, "--budgets", "4", "--iterations", "3", *args,
                     "--out", str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and match in err and not bad.exists()
