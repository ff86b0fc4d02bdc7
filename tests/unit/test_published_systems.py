"""experiments/published_systems.py: budget readings, the entropy solve, bad input."""

from __future__ import annotations

import csv
import importlib.util
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from brwsim.theory import prediction

ROOT = Path(__file__).resolve().parents[2]
CSV = ROOT / "data" / "published_systems.csv"


@pytest.fixture(scope="module")
def ps():
    spec = importlib.util.spec_from_file_location("published_systems",
                                                  ROOT / "experiments" / "published_systems.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module              # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def test_every_published_row_is_read_with_its_budget_reading_and_citation(ps):
    rows = ps.read_rows(CSV)
    assert len(rows) == 52
    by = {}
    for r in rows:
        by.setdefault(r.system, []).append(r)
        assert 1 <= r.P_low <= r.P_high and r.value > 1
        assert "Table" in r.citation or "text" in r.citation.lower()
        assert "arxiv.org" in r.citation or "together.ai" in r.citation
    assert {s: len(v) for s, v in by.items()} == {"EAGLE-2": 11, "EAGLE-3": 9, "Sequoia": 12,
                                                  "SpecExec": 1, "OPT-Tree": 10, "DySpec": 9}
    e2 = by["EAGLE-2"][0]                  # "60/50/48 draft tokens": N - 1 or N, depth 6
    assert (e2.P_low, e2.P_high, e2.depth_cap) == (49, 50, 6)
    assert {r.depth_cap for r in by["EAGLE-3"]} == {8}
    seq = by["Sequoia"][0]                 # (size, depth) = (128, 10), both count the root
    assert (seq.P_low, seq.P_high, seq.depth_cap) == (127, 127, 9)
    # every Sequoia row: draft-depth cap = the paper's depth - 1 (Sequoia's DP levels)
    with CSV.open(newline="", encoding="utf-8") as fh:
        lines = list(csv.DictReader(fh))
    assert sum(r.system == "Sequoia" for r in rows) == 12
    for r, line in zip(rows, lines):
        if r.system == "Sequoia":
            d = int(re.search(r"\(size, depth\) = \((\d+), (\d+)\)",
                              line["budget_definition"]).group(2))
            assert r.depth_cap == d - 1 < d
    assert {(r.P_low, r.P_high) for r in by["OPT-Tree"]} == {(25, 60), (500, 500)}
    assert by["SpecExec"][0].lower_bound and not any(r.lower_bound for r in by["EAGLE-2"])


@pytest.mark.parametrize("shape,h,P", [("geometric", 0.8, 12), ("zipf", 1.3, 20),
                                       ("zipf-spread", 2.1, 64)])
def test_grid_solve_then_refine_recovers_the_entropy(ps, shape, h, P):
    """The ceiling itself is checked against brute force in test_ceiling.py."""
    tau = 1.0 + prediction(ps.family(shape, h), [P])[0]
    grid = np.geomspace(0.05, 5.0, 30)
    mean_h, pred, _ = ps.ceiling_grid(shape, grid, np.array([P]))
    np.testing.assert_allclose(mean_h, grid, rtol=1e-9)
    h0 = ps.solve_entropy(mean_h, pred[:, 0], tau)
    assert abs(h0 - h) < 0.05                                     # interpolated
    h1 = ps.refine(lambda x: 1.0 + prediction(ps.family(shape, x), [P])[0], h0, tau)
    assert h1 == pytest.approx(h, abs=1e-5)                       # on the exact curve


def test_solve_entropy_is_nan_outside_the_grid_and_rejects_a_rising_curve(ps):
    h = np.array([0.1, 0.5, 1.0, 2.0])
    assert math.isnan(ps.solve_entropy(h, np.array([9.0, 5.0, 3.0, 2.0]), 12.0))
    assert ps.solve_entropy(h, np.array([9.0, 5.0, 3.0, 2.0]), 5.0) == pytest.approx(0.5)
    with pytest.raises(RuntimeError):
        ps.solve_entropy(h, np.array([9.0, 5.0, 6.0, 2.0]), 5.0)


def _write_csv(path: Path, rows: list[dict], drop: str | None = None) -> None:
    with CSV.open(newline="", encoding="utf-8") as fh:
        fields = [f for f in csv.DictReader(fh).fieldnames if f != drop]
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def _real_rows(n: int) -> list[dict]:
    with CSV.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))[:n]


@pytest.mark.parametrize("edit,needle", [
    (lambda r: r.update(value="0.9"), "tokens per call must be > 1"),
    (lambda r: r.update(value="abc"), "must be numbers"),
    (lambda r: r.update(budget="0"), "must be numbers"),
    (lambda r: r.update(system="Medusa"), "no budget rule for system 'Medusa'"),
    (lambda r: r.update(metric_is_tokens_per_call="false"), "metric_is_tokens_per_call"),
])
def test_bad_csv_gives_one_line_and_no_output(ps, tmp_path, capsys, edit, needle):
    rows = _real_rows(2)
    edit(rows[1])
    _write_csv(tmp_path / "bad.csv", rows)
    out = tmp_path / "out.nc"
    assert ps.main(["--csv", str(tmp_path / "bad.csv"), "--out", str(out), "--quick"]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
    assert not out.exists()


def test_missing_column_and_missing_file(ps, tmp_path, capsys):
    _write_csv(tmp_path / "nocol.csv", _real_rows(1), drop="value")
    assert ps.main(["--csv", str(tmp_path / "nocol.csv"), "--out", str(tmp_path / "o.nc")]) == 2
    assert "missing column(s) value" in capsys.readouterr().err
    assert ps.main(["--csv", str(tmp_path / "none.csv"), "--out", str(tmp_path / "o.nc")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert not (tmp_path / "o.nc").exists()


def test_quick_run_writes_a_consistent_dataset(ps, tmp_path, capsys):
    """Two rows end to end: the solve hits the value, Monte Carlo agrees within 4.5 SE."""
    every = _real_rows(52)
    rows = [next(r for r in every if r["system"] == s) for s in ("Sequoia", "DySpec")]
    _write_csv(tmp_path / "two.csv", rows)
    out = tmp_path / "ps.nc"
    assert ps.main(["--csv", str(tmp_path / "two.csv"), "--out", str(out), "--quick",
                    "--trees", "400", "--jobs", "1"]) == 0
    assert "Sequoia" in capsys.readouterr().out
    ds = xr.open_dataset(out)
    assert ds.sizes == {"row": 2, "shape": 3, "reading": 2, "budget": ds.sizes["budget"],
                        "grid": 24}
    assert np.isfinite(ds.entropy_star).all()
    np.testing.assert_allclose(ds.prediction_at_star, np.broadcast_to(
        ds.value.values[:, None, None], ds.prediction_at_star.shape), atol=1e-4)
    det = ds.sel(shape=["zipf", "geometric"])                     # deterministic: MC = exact
    np.testing.assert_allclose(det.mc_tokens_per_call, det.prediction_at_star, atol=2e-3)
    spread = ds.sel(shape="zipf-spread")
    z = (spread.mc_tokens_per_call - spread.prediction_at_star) / spread.mc_se
    assert (np.abs(z) < 4.5).all()
    # the bound is loose, so it needs a higher entropy to come down to the reported value;
    # it never does below log P + 1 (mu2 >= mu^2 makes it >= (1 + 1/mu) log P): NaN there
    assert (ds.entropy_star_bound.fillna(np.inf) > ds.entropy_star).all()
    P_low = ds.P.sel(reading="low")
    below = ds.value < np.log(P_low) + 1
    assert below.any() and ds.entropy_star_bound.sel(reading="low").isnull().where(below, True).all()
    # the zipf shape's heavier head needs more entropy than the geometric one
    assert (ds.entropy_star.sel(shape="zipf") > ds.entropy_star.sel(shape="geometric")).all()
    assert int(ds.depth_cap[0]) == 9 and np.isfinite(ds.mc_cap_exceeded[0]).all()
    assert np.isnan(ds.mc_cap_exceeded[1]).all()                 # DySpec has no depth cap
    # a depth cap only lowers the ceiling: the compatible entropy can only drop
    assert (ds.entropy_star_capped[0] <= ds.entropy_star[0] + 1e-9).all()
    assert np.isnan(ds.entropy_star_capped[1]).all()
    ds.close()
    assert out.with_suffix(".png").exists()
