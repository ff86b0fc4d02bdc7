"""``brwsim capture``: a bank from a checkpoint with brwsim's own forward pass.

Rows against recomputing every position's distribution from scratch (the family's
``probs``: no cache) and against the independent numpy forward pass of ``tinyckpt``;
sampled ranks against the rows' own probabilities (martingale z-scores, fixed seed);
``bank-stats`` and ``run --family 'empirical(path=bank)'`` on the result; provenance.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from brwsim import Transformer
from brwsim.capture import capture_bank
from brwsim.families.transformer import shipped_checkpoint
from brwsim.cli import main
from brwsim.io import file_sha256

sys.path.insert(0, str(Path(__file__).parent))
from tinyckpt import reference_logits, write_llama  # noqa: E402

PROMPTS = ["The quick brown fox", "def main(argv):", "It was a dark and stormy night; the rain"]


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "prompts.txt"
    path.write_text(PROMPTS[0] + "\n\n" + "\n".join(PROMPTS[1:]) + "\n", encoding="utf-8")
    return path


def _sampled_tokens(model: Transformer, prompt: str, probs_rows: np.ndarray, ranks: np.ndarray,
                    beta: float = 1.0):
    """Replay a generation from its ranks: (contexts, each position's recomputed probs)."""
    seq = list(model.encode(prompt)[-model.window:])
    contexts, recomputed = [], []
    for r in ranks:
        ctx = model.context(seq)
        p = model.probs(ctx, beta)
        order = np.lexsort((np.arange(p.size), -p))
        contexts.append(np.array(ctx))
        recomputed.append(p)
        seq.append(int(order[r]))
    return contexts, np.array(recomputed)


def test_rows_equal_recomputed_distributions(prompt_file):
    """Window 8, carry 5: appends to the cache and restarts; every row to 1e-9 (log space),
    a few positions also against the independent numpy forward pass."""
    ds = capture_bank("target", prompt_file, tokens=30, seed=3, window=8, carry=5,
                      temperature=0.8)
    probs = ds["probs"].values
    ranks = ds["sampled_rank"].values
    seq = ds["sequence"].values
    assert probs.shape == (90, 256) and ds.attrs["vocab"] == "256"
    assert list(np.bincount(seq)) == [30, 30, 30]
    worst = 0.0
    for i, prompt in enumerate(PROMPTS):
        model = Transformer("target", prompt=prompt, window=8, carry=5, temperature=0.8)
        rows = seq == i
        ctxs, ref = _sampled_tokens(model, prompt, probs[rows], ranks[rows])
        ref_sorted = -np.sort(-ref, axis=1)
        worst = max(worst, float(np.abs(np.log(probs[rows]) - np.log(ref_sorted)).max()))
        assert max(c.size for c in ctxs) == 8 + 5 and min(c.size for c in ctxs[6:]) == 8
        for j in (0, 7, 13, 29):                   # independent float64 numpy recomputation
            z = reference_logits(shipped_checkpoint("target"), ctxs[j]) / 0.8
            lq = z - z.max() - math.log(np.exp(z - z.max()).sum())
            np.testing.assert_allclose(np.log(probs[rows][j]), np.sort(lq)[::-1], atol=1e-9)
    assert worst < 1e-9, worst
    assert np.allclose(ds["tail_mass"].values, 0.0, atol=1e-12)
    np.testing.assert_allclose(ds["entropy_lower"].values, ds["entropy_upper"].values,
                               atol=1e-9)             # top-k = V: an exact bank


def test_llama_checkpoint_rows_match_numpy(tmp_path):
    folder = write_llama(tmp_path / "llama", seed=5)
    prompts = tmp_path / "p.txt"
    prompts.write_text("hello world\n", encoding="utf-8")
    full = capture_bank(folder, prompts, tokens=12, seed=1, window=6, carry=3)
    ds = capture_bank(folder, prompts, tokens=12, seed=1, window=6, carry=3, top_k=10)
    model = Transformer(folder, prompt="hello world", window=6, carry=3)
    assert full.sizes["rank"] == 259 and ds.sizes["rank"] == 10 and ds.attrs["vocab"] == "259"
    lq_rows = np.log(full["probs"].values)
    ranks = full["sampled_rank"].values
    assert np.array_equal(ds["probs"].values, full["probs"].values[:, :10])
    assert np.array_equal(ds["sampled_rank"].values, np.where(ranks < 10, ranks, -1))
    seq = list(model.encode("hello world")[-6:])
    for j, r in enumerate(ranks):
        ctx = model.context(seq)
        z = reference_logits(folder, ctx)
        lq = z - z.max() - math.log(np.exp(z - z.max()).sum())
        np.testing.assert_allclose(lq_rows[j], np.sort(lq)[::-1], atol=1e-9)
        seq.append(int(np.lexsort((np.arange(lq.size), -lq))[r]))
    assert np.all(ds["tail_mass"].values > 0)
    assert np.isfinite(ds["entropy_upper"].values).all()      # the vocabulary bounds them


def test_sampled_ranks_follow_the_distribution(prompt_file):
    """Conditionally on the past, rank r is drawn with the row's probability of rank r:
    sums of (indicator - probability) are martingales; z-scores within 4.5."""
    ds = capture_bank("target", prompt_file, tokens=1500, seed=11, temperature=0.7)
    probs = ds["probs"].values
    ranks = ds["sampled_rank"].values
    cum = np.cumsum(probs, axis=1)
    for cut in (0, 1, 3, 9):
        hit = (ranks <= cut).astype(float)
        p = cum[:, cut]
        z = (hit - p).sum() / math.sqrt((p * (1 - p)).sum())
        assert abs(z) < 4.5, (cut, z)
    expected = (probs * np.arange(probs.shape[1])).sum(axis=1)
    var = (probs * np.arange(probs.shape[1]) ** 2).sum(axis=1) - expected ** 2
    z = (ranks - expected).sum() / math.sqrt(var.sum())
    assert abs(z) < 4.5, z


def test_seeded_roots_provenance_and_determinism(prompt_file, tmp_path):
    a = capture_bank("target", "prose", tokens=5, roots=4, seed=7)
    b = capture_bank("target", "prose", tokens=5, roots=4, seed=7)
    c = capture_bank("target", "prose", tokens=5, roots=4, seed=8)
    assert np.array_equal(a["probs"].values, b["probs"].values)
    assert not np.array_equal(a["probs"].values, c["probs"].values)
    model = Transformer("target", prompts="prose")
    first = -np.sort(-model.probs(model.root_tokens(7, 2)))   # root of iteration 2, seed 7
    np.testing.assert_allclose(a["probs"].values[10], first, rtol=1e-9, atol=1e-15)
    inputs = json.loads(a.attrs["input_sha256"])
    assert any(k.endswith("model.safetensors") for k in inputs) and "corpus prose" in inputs
    out = tmp_path / "bank.nc"
    ds = capture_bank("target", prompt_file, out, tokens=4)
    inputs = json.loads(ds.attrs["input_sha256"])
    assert inputs[str(prompt_file.resolve())] == file_sha256(prompt_file)
    folder = Path(shipped_checkpoint("target"))
    assert inputs[str(folder / "config.json")] == file_sha256(folder / "config.json")
    config = json.loads(ds.attrs["capture_config_json"])
    assert config["tokens"] == 4 and config["top_k"] == 256 and config["window"] == 32
    assert out.is_file()


def test_cli_capture_then_bank_stats_and_empirical_run(prompt_file, tmp_path, capsys):
    bank = tmp_path / "bank.nc"
    assert main(["capture", "target", str(prompt_file), "--out", str(bank), "--tokens", "40",
                 "--seed", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "120 positions" in out and "k = 256" in out and "tokens/s" in out
    assert main(["bank-stats", str(bank), "--budgets", "1,16"]) == 0
    stats = capsys.readouterr().out
    assert "vocab 256" in stats
    assert main(["run", "--family", f"empirical(path={bank})", "--budgets", "1,16",
                 "--iterations", "200", "--quiet", "--out", str(tmp_path / "r.nc")]) == 0
    import xarray as xr

    with xr.open_dataset(tmp_path / "r.nc") as r:
        e = r["expected_accepted"].values                  # (budget, iteration) or transposed
        e = e if r["expected_accepted"].dims[0] == "budget" else e.T
        mean, se = e.mean(axis=1), e.std(axis=1, ddof=1) / math.sqrt(e.shape[1])
        bound = r["upper_bound"].values
    assert np.all(mean <= bound + 4.5 * se)


def test_runs_on_a_transformer_record_its_files(tmp_path):
    """The contextual view records the same checkpoint hashes as the bank (``input_sha256``)."""
    from brwsim import simulate

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("some text to draw roots from, long enough for a window\n" * 3)
    ds = simulate(Transformer("target", prompts=corpus, window=8), [1, 2], 3, seed=0)
    inputs = json.loads(ds.attrs["input_sha256"])
    folder = Path(shipped_checkpoint("target"))
    assert inputs[str(folder / "model.safetensors")] == file_sha256(folder / "model.safetensors")
    assert inputs[str(corpus)] == file_sha256(corpus)
    shipped = json.loads(simulate(Transformer("target"), [1], 2, seed=0).attrs["input_sha256"])
    assert "corpus prose" in shipped
