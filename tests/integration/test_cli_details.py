"""The details a new user trips on: one name per theory column, no asymptotic where it means
nothing, no seed where none was used, and ``--quiet`` quiet."""

from __future__ import annotations

import io
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from brwsim.cli import main
from brwsim.cli.common import meaningful_asymptotic, quiet_compiles

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "logprobs" / "chat.jsonl"
THEORY_NAMES = ("paper bound", "upper bound", "small-P bound", "prediction")


def _header(out: str, first: str = "P") -> list[str]:
    """The column titles of the first table (the line above the dashes) of ``out``."""
    lines = out.splitlines()
    i = next(k for k, ln in enumerate(lines) if re.fullmatch(r"[-\s]+", ln) and "--" in ln)
    return re.split(r"\s{2,}", lines[i - 1].strip())


@pytest.fixture(scope="module")
def bank(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bank") / "bank.nc"
    assert main(["import-logprobs", str(FIXTURE), "--out", str(out)]) == 0
    return out


def test_one_name_for_each_theory_column(capsys, bank):
    assert main(["theory", "--family", "uniform(k=3)", "--budgets", "1,4"]) == 0
    theory = _header(capsys.readouterr().out)
    assert main(["run", "--family", "uniform(k=3)", "--budgets", "1,4", "--iterations", "20",
                 "--no-out", "--quiet"]) == 0
    run = _header(capsys.readouterr().out)
    for name in THEORY_NAMES:
        assert name in theory and name in run, name
    assert main(["bank-stats", str(bank), "--budgets", "1,4"]) == 0
    stats = capsys.readouterr().out
    head = next(ln for ln in stats.splitlines() if ln.strip().startswith("P ") and "upper bound" in ln)
    cols = re.split(r"\s{2,}", head.strip())
    assert {"upper bound", "prediction", "asymptotic", "paper bound"} <= set(cols), cols
    for other in ("proven bound", "renewal prediction", "renewal asymptotic", "prediction E[X]"):
        assert other not in theory and other not in run and other not in cols
    assert "asymptotic" in theory


def test_the_asymptotic_rule():
    shown = meaningful_asymptotic([-0.36, 0.2, 1.5, np.nan], 0.5, [1, 1, 8, 64])
    np.testing.assert_equal(shown, [np.nan, np.nan, 1.5, np.nan])   # mu P < 1, then negative


def test_no_asymptotic_where_it_means_nothing(capsys, bank):
    from brwsim.bankstats import bank_stats

    stats = bank_stats(bank, [1, 4, 1024])
    shown = meaningful_asymptotic(stats.asymptotic, stats.mu, stats.budgets)
    raw = np.asarray(stats.asymptotic)
    for p, r, s in zip(stats.budgets, raw, shown):
        if stats.mu * p < 1 or r < 0:
            assert np.isnan(s)
        else:
            assert s == r or (np.isnan(s) and np.isnan(r))
    if np.isfinite(raw[-1]) and raw[-1] >= 0:
        assert shown[-1] == raw[-1]                     # large P keeps it
    assert main(["bank-stats", str(bank), "--budgets", "1", "--format", "json"]) == 0
    import json

    row = json.loads(capsys.readouterr().out)["rows"][0]
    if stats.mu < 1 or raw[0] < 0:
        assert row["prediction_asymptotic"] is None


def test_an_import_shows_no_seed(capsys, bank):
    import xarray as xr

    with xr.open_dataset(bank) as ds:
        assert "seed_entropy" not in ds.attrs
    assert main(["inspect", str(bank)]) == 0
    out = capsys.readouterr().out
    assert "no seed recorded" in out and "seed 0" not in out


def test_quiet_silences_compile_notices_and_restores_them(monkeypatch):
    from brwsim.kernels import COMPILE_NOTICE

    monkeypatch.delenv("BRWSIM_COMPILE_NOTICE", raising=False)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    before = COMPILE_NOTICE.stream
    with quiet_compiles(True):
        COMPILE_NOTICE._say("compiling x ...")        # what a cache miss prints
        assert os.environ["BRWSIM_COMPILE_NOTICE"] == "0"   # and workers it starts
    assert err.getvalue() == ""
    assert COMPILE_NOTICE.stream is before and "BRWSIM_COMPILE_NOTICE" not in os.environ
    with quiet_compiles(False):
        COMPILE_NOTICE._say("compiling y ...")
    assert err.getvalue() == "brwsim: compiling y ...\n"


def test_a_run_of_one_iteration_prints_its_table(capsys):
    """One iteration has no standard error: the table says nan, never a traceback."""
    assert main(["run", "--family", "geometric(0.5)", "--budgets", "1,4", "--iterations", "1",
                 "--no-out", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^4 .* nan", out, re.M)
