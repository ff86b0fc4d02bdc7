"""The ``brwsim`` command line, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import xarray as xr

from brwsim.cli import main, parse_budgets


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "brwsim.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=600)


def test_run_writes_dataset_and_prints_table(tmp_path):
    out = tmp_path / "run.nc"
    r = run_cli("run", "--family", "dirichlet(alpha=0.05, vocab=200)", "--budgets", "1,4,16,64",
                "--iterations", "500", "--seed", "0", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "tau=X+1" in r.stdout and "paper bound" in r.stdout
    # the proven small-P bound next to the upper bound: the same values `theory` prints
    from brwsim import parse_family
    from brwsim.theory import small_budget_bound

    lines = r.stdout.splitlines()
    assert "small-P bound" in lines[2]
    expect = small_budget_bound(parse_family("dirichlet(alpha=0.05, vocab=200)"), [1, 4, 16, 64])
    shown = [float(ln.split()[8]) for ln in lines[4:8]]          # P, X, SE, tau, E ± SE, ub
    assert shown == pytest.approx(np.round(expect.value, 4), abs=1e-12)
    assert all(v <= float(ln.split()[7]) + 1e-4 for v, ln in zip(shown, lines[4:8]))
    ds = xr.open_dataset(out)
    assert list(ds.budget.values) == [1, 4, 16, 64]
    assert ds.sizes["iteration"] == 500
    for v in ds.variables.values():
        assert "long_name" in v.attrs and "units" in v.attrs
    cfg = json.loads(ds.attrs["config_json"])
    assert cfg["family"] == "dirichlet(alpha=0.05, vocab=200)" and ds.attrs["seed_entropy"] == "0"
    for key in ("Conventions", "source", "history", "numpy_version", "numba_version", "python_version"):
        assert ds.attrs[key]
    ds.close()


@pytest.mark.parametrize("args,needle", [
    (["--family", "dirichlet(alpha=-1, vocab=200)"], "alpha"),
    (["--budgets", "0,4"], "P >= 1"),
    (["--budgets", "4,x"], "not an integer"),
    (["--iterations", "0"], "iterations"),
    (["--family", "zipf(s=1.5"], "cannot parse"),
    (["--family", "empirical(path=/nonexistent/bank.nc)"], "no such file|bank"),
])
def test_bad_input_one_line_exit_2_no_file(tmp_path, args, needle, capsys):
    out = tmp_path / "bad.nc"
    code = main(["run", *args, "--iterations", "10", "--out", str(out)] if "--iterations" not in args
                else ["run", *args, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and err.startswith("brwsim: error:")
    assert __import__("re").search(needle, err), err
    assert not out.exists() and not list(tmp_path.iterdir())


def test_parse_budgets_forms():
    assert parse_budgets("1..16") == [1, 2, 4, 8, 16]
    assert parse_budgets("1-4,64") == [1, 2, 3, 4, 64]


def test_default_run_is_quick_enough_to_smoke(tmp_path):
    """`brwsim run` with no arguments: the default family and budgets (fewer iterations here)."""
    r = run_cli("run", "--iterations", "50", "--out", str(tmp_path / "d.nc"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "4096" in r.stdout


def test_cli_reference_names_every_command_and_option():
    """The CLI table of docs/reference.md documents every subcommand with all of its options."""
    import argparse
    from pathlib import Path

    from brwsim.cli import build_parser

    readme = (Path(__file__).resolve().parents[2] / "docs" / "reference.md").read_text(encoding="utf-8")
    rows = {line.split("`")[1].split()[1]: line for line in readme.splitlines()
            if line.startswith("| `brwsim ")}
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(rows), "docs/reference.md's CLI table and parser disagree on commands"
    for name, parser in sub.choices.items():
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert flag in rows[name], f"docs/reference.md's CLI table lacks {name} {flag}"


def test_run_with_policies_prints_the_gap_table_and_keeps_optimal_first(tmp_path):
    out = tmp_path / "pol.nc"
    r = run_cli("run", "--family", "dirichlet(alpha=0.1, vocab=50)", "--budgets", "4,32",
                "--iterations", "200", "--policy", "chain()", "--policy", "optimal()",
                "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "fraction of optimal" in r.stdout and "chain()" in r.stdout
    ds = xr.open_dataset(out)
    assert [str(p) for p in ds.policy.values] == ["optimal()", "chain()"]
    ds.close()
    bad = run_cli("run", "--budgets", "4", "--iterations", "5", "--policy", "bogus()",
                  "--out", str(tmp_path / "bad.nc"))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "unknown policy" in bad.stderr
    assert not (tmp_path / "bad.nc").exists()


def test_ceiling_command_prints_ceiling_fraction_and_implied_entropy():
    r = run_cli("ceiling", "--budget", "49", "--tau", "4.83", "--entropy", "1.0", "--shape", "zipf")
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith("zipf"))
    c, frac, h = (float(x) for x in line.split()[1:])
    assert frac == pytest.approx(4.83 / c, abs=1e-3) and 1.0 < h < 1.4
    for args, needle in [(["--budget", "49"], "give --tau"),
                         (["--budget", "49", "--tau", "60"], "(1, P + 1)"),
                         (["--budget", "49", "--entropy", "-1"], "mean entropy must be in"),
                         (["--tau", "3"], "--budget")]:
        bad = run_cli("ceiling", *args)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and needle in bad.stderr, bad.stderr


def test_outputs_get_normal_file_permissions_not_the_temporary_files(tmp_path):
    """Atomic writes rename a private temp file: the result must still honour the umask."""
    import os
    import stat

    out = tmp_path / "perm.nc"
    old = os.umask(0o022)
    try:
        assert main(["run", "--family", "uniform(k=2)", "--budgets", "4", "--iterations", "2",
                     "--out", str(out), "--quiet"]) == 0
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no temp left


def test_run_help_lists_every_family_and_policy(capsys):
    from brwsim.families import FAMILIES
    from brwsim.policies import POLICIES

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    lines = [ln.strip() for ln in out.splitlines()]
    for name in [*FAMILIES, *POLICIES]:
        assert any(ln.startswith(f"{name}(") for ln in lines), name
    assert "chain()" in lines and "optimal(max_depth=None)" in lines
