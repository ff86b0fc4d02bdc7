"""brwsim plan: which family a plan assumes (printed and in attrs), and the user's own numbers
(--bank, --tau/--at-budget with its SE carried through)."""

from __future__ import annotations

import numpy as np
import pytest

from brwsim.cli import main
from brwsim.lazy import xarray as xr
from brwsim.theory.ceiling import implied_entropy

SMALL = ["--params", "8e9", "--batch", "1", "--budgets", "1,4,16", "--iterations", "40", "--quiet"]


def test_the_default_family_says_it_is_not_your_workload(capsys, tmp_path):
    out = tmp_path / "plan.nc"
    assert main(["plan", *SMALL, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "family source: the default family" in text and "--bank" in text
    with xr.open_dataset(out) as ds:
        assert ds.attrs["family_source"].startswith("the default family")
        assert ds.attrs["family"].startswith("mixture(")


def test_tau_at_budget_fits_the_entropy_and_carries_the_se(capsys, tmp_path):
    out = tmp_path / "plan.nc"
    assert main(["plan", *SMALL, "--tau", "3.0", "--at-budget", "8", "--tau-se", "0.1",
                 "--out", str(out)]) == 0
    text = capsys.readouterr().out
    h = implied_entropy(3.0, 8, "zipf-spread", 32000)
    assert f"h* = {h:.4g}" in text and "fitted to your tau = 3" in text
    assert "speedup SE from your tau's SE" in text
    with xr.open_dataset(out) as ds:
        assert "fitted" in ds.attrs["family_source"]
        se = ds["best_speedup_measurement_se"].values
        assert np.all(np.isfinite(se)) and np.all(se > 0)
        assert "entropytarget(" in ds.attrs["family"]


def test_a_bank_plan_names_the_bank_and_its_hash(capsys, tmp_path):
    from brwsim.bank.store import BANK_VARIABLES, bank_dataset
    from brwsim.io import file_sha256

    rows, k = 6, 3
    arrays = {name: np.zeros(tuple(k if i else rows for i, _ in enumerate(dims)))
              for name, (dims, _, _) in BANK_VARIABLES.items()}
    arrays["probs"][:] = [0.7, 0.2, 0.05]
    arrays["tail_mass"][:] = 0.05
    bank = tmp_path / "bank.nc"
    bank_dataset(arrays, files=["a.jsonl"], formats=["openai"], top_k=k, vocab=1000, skip_bad=False,
                 skipped_positions=0, skipped_lines=0, command="test").to_netcdf(bank)
    assert main(["plan", *SMALL, "--bank", str(bank)]) == 0
    text = capsys.readouterr().out
    assert f"family source: your bank {bank} (sha256 {file_sha256(bank)[:16]})" in text


@pytest.mark.parametrize("argv,needle", [
    (["--tau", "3"], "--tau and --at-budget go together"),
    (["--family", "uniform(k=2)", "--tau", "3", "--at-budget", "8"], "give one of"),
    (["--tau", "3", "--at-budget", "8", "--tau-se", "-1"], "--tau-se"),
])
def test_conflicting_or_incomplete_numbers_are_one_line_errors(capsys, argv, needle):
    assert main(["plan", *SMALL, *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
