"""Runs and sweeps record the SHA-256 of every file they read (banks, the TOML)."""

from __future__ import annotations

import json

import numpy as np

from brwsim import parse_family, simulate
from brwsim.bank.store import BANK_VARIABLES, bank_dataset
from brwsim.families import Empirical, Mixture, Uniform
from brwsim.io import file_sha256
from brwsim.sweep.config import load_config


def _bank(path):
    rows, k = 5, 3
    arrays = {name: np.zeros(tuple(k if i else rows for i, _ in enumerate(dims)))
              for name, (dims, _, _) in BANK_VARIABLES.items()}
    arrays["probs"][:] = [0.6, 0.3, 0.1]
    bank_dataset(arrays, files=["a.jsonl"], formats=["openai"], top_k=k, vocab=100, skip_bad=False,
                 skipped_positions=0, skipped_lines=0, command="test").to_netcdf(path)
    return path


def test_an_empirical_run_records_the_banks_hash(tmp_path):
    bank = _bank(tmp_path / "bank.nc")
    fam = Empirical(path=str(bank))
    assert fam.input_files() == {str(bank): file_sha256(bank)}
    mixed = Mixture([fam, Uniform(3)], [0.5, 0.5])            # found inside a mixture too
    assert mixed.input_files() == fam.input_files()
    ds = simulate(fam, [1, 2], 20, seed=1)
    assert json.loads(ds.attrs["input_sha256"]) == {str(bank): file_sha256(bank)}
    assert "input_sha256" not in simulate(Uniform(3), [1, 2], 5).attrs   # no file read


def test_a_sweep_config_lists_its_toml_and_bank_hashes(tmp_path):
    bank = _bank(tmp_path / "bank.nc")
    toml = tmp_path / "sweep.toml"
    toml.write_text(f"""[sweep]
iterations = 10
budgets = [1, 2]

[[sweep.family]]
name = "empirical"
path = "{bank}"
""")
    cfg = load_config(toml)
    assert cfg.input_sha256() == {str(toml): file_sha256(toml), str(bank): file_sha256(bank)}
    assert load_config({"sweep": {"iterations": 10, "budgets": [1],
                                  "family": [{"name": "uniform", "k": 2}]}}).input_sha256() == {}


def test_a_drafter_run_and_sweep_record_the_draft_checkpoint(tmp_path):
    from brwsim.families.transformer import shipped_checkpoint

    folder = shipped_checkpoint("draft")
    draft = {f"{folder}/{name}": file_sha256(f"{folder}/{name}")
             for name in ("config.json", "model.safetensors")}
    ds = simulate(parse_family("transformer(path=target, prompt='def f(x):')"), [1, 2], 2,
                  policies=["optimal()", "drafter(path=draft)"])
    recorded = json.loads(ds.attrs["input_sha256"])
    assert draft.items() <= recorded.items()
    assert any(path.endswith("target/model.safetensors") for path in recorded)
    toml = tmp_path / "sweep.toml"
    toml.write_text("""[sweep]
iterations = 2
budgets = [1, 2]

[[sweep.family]]
family = ["transformer(path=target, prompt='x = 1')"]

[[sweep.policy]]
name = "drafter"
path = "draft"
""")
    assert draft.items() <= load_config(toml).input_sha256().items()
