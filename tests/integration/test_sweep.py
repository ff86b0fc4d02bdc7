"""Sweeps end to end: identity across workers and backends, resume, corrupt shards, CLI.

One small two-block configuration (4 points, 84 tasks, about 2 s on one core) serves every
test; its uninterrupted ``jobs=1`` run is the module-scoped reference every other run must
reproduce bit for bit (creation-time attributes aside).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from brwsim import gitcommit
from brwsim import io as brwsim_io
from brwsim.cli import main
from brwsim.cli.inspect import _short_commit
from brwsim.sweep.config import load_config
from brwsim.errors import UserError
from brwsim.simulate import run_iterations
from brwsim.sweep import MixedCodeWarning, sweep
from brwsim.sweep.shards import running_code, shard_code

CONFIG = """
[sweep]
seed = 7
iterations = 400
chunk = 20
budgets = [1, 4, 16, 64, 256, 1024]
prediction = "none"

[[sweep.family]]
name = "peaked"
a = [2, 4]
b = 0.5
s = 1.1
vocab = 32000

[[sweep.family]]
name = "zipf"
s = 1.2
spread = [0.0, 0.3]
vocab = 1000
"""
N_TASKS = 4 * (400 // 20) + 4
VOLATILE = ("date_created", "history")


def _write(tmp: Path, text: str, name: str = "sweep.toml") -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def _groups(path: Path) -> dict[str, xr.Dataset]:
    with xr.open_datatree(path) as tree:
        out = {"/": tree.to_dataset().load()}
        out |= {name: tree[name].to_dataset().load() for name in tree.children}
    for attr in VOLATILE:
        out["/"].attrs.pop(attr)
    return out


def assert_same_data(a: Path, b: Path) -> None:
    """Every group identical (values, dtypes, coords, attributes), except creation times."""
    ga, gb = _groups(a), _groups(b)
    assert ga.keys() == gb.keys()
    for name in ga:
        xr.testing.assert_identical(ga[name], gb[name])


@pytest.fixture(scope="module")
def config(tmp_path_factory) -> Path:
    return _write(tmp_path_factory.mktemp("cfg"), CONFIG)


@pytest.fixture(scope="module")
def reference(config, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ref") / "run"
    rep = sweep(config, out, jobs=1)
    assert (rep.tasks, rep.run, rep.reused, rep.discarded) == (N_TASKS, N_TASKS, 0, 0)
    return out


def test_layout_and_values_match_run_iterations(config, reference):
    groups = _groups(reference / "results.nc")
    assert set(groups) == {"/", "peaked", "zipf"}
    root = groups["/"]
    assert root.attrs["seed_entropy"] == "7"
    assert json.loads(root.attrs["config_json"])["iterations"] == 400
    peaked = groups["peaked"]
    assert peaked["accepted"].dims == ("a", "budget", "iteration")
    assert peaked["a"].values.tolist() == [2, 4]
    assert peaked["expected_mean"].attrs["units"] == "1"
    # point 1 (a=4) is run_iterations over the point's key, iterations 0..399 in one call
    cfg = load_config(config)
    p = list(cfg.points())[1]
    acc, exp, dep, _, _ = run_iterations(p.family.spec(), cfg.budgets, cfg.point_key(1), 0, 400)
    np.testing.assert_array_equal(peaked["accepted"].sel(a=4).values, acc)
    np.testing.assert_array_equal(peaked["expected_accepted"].sel(a=4).values, exp)
    np.testing.assert_array_equal(peaked["depth"].sel(a=4).values, dep)
    # summaries agree with the raw arrays; histograms count every iteration
    np.testing.assert_allclose(peaked["accepted_mean"].values, peaked["accepted"].mean("iteration"), rtol=1e-12)
    np.testing.assert_allclose(peaked["expected_se"].values,
                               peaked["expected_accepted"].std("iteration", ddof=1) / np.sqrt(400), rtol=1e-9)
    assert (peaked["accepted_hist"].sum("accepted_value") == 400).all()
    assert str(peaked["family_string"].sel(a=2).values) == "peaked(a=2.0, b=0.5, s=1.1, vocab=32000)"


def test_jobs_two_is_identical(config, reference, tmp_path):
    rep = sweep(config, tmp_path / "j2", jobs=2, backend="loky")
    assert rep.run == N_TASKS
    assert_same_data(reference / "results.nc", rep.path)


def test_a_merge_from_memory_equals_one_from_the_shard_files(config, tmp_path):
    """With one job the merge takes the summary and theory shards this process computed
    from memory; run again on the folder, it reuses every shard and reads each from its
    file: the same data."""
    out = tmp_path / "memory"
    rep = sweep(config, out, jobs=1, summary_only=True)
    assert rep.run == N_TASKS
    first = shutil.copy(rep.path, tmp_path / "first.nc")
    rep.path.unlink()
    again = sweep(config, out, jobs=1, summary_only=True)
    assert (again.run, again.reused) == (0, N_TASKS)
    assert_same_data(Path(first), again.path)


def test_chunking_does_not_change_the_draws(config, reference, tmp_path):
    cfg = _write(tmp_path, CONFIG.replace("chunk = 20", "chunk = 150"))
    rep = sweep(cfg, tmp_path / "c150")
    a, b = _groups(reference / "results.nc"), _groups(rep.path)
    for name in ("peaked", "zipf"):
        for var in ("accepted", "expected_accepted", "depth", "accepted_hist"):
            np.testing.assert_array_equal(a[name][var].values, b[name][var].values)
        np.testing.assert_allclose(a[name]["expected_mean"], b[name]["expected_mean"], rtol=1e-14)


def test_dask_local_cluster_is_identical(config, reference, tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster:
        rep = sweep(config, tmp_path / "dask", backend="dask", scheduler=cluster.scheduler_address)
    assert rep.run == N_TASKS
    assert_same_data(reference / "results.nc", rep.path)


def test_dask_missing_is_one_clear_error(config, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(UserError, match=r"pip install 'dask\[distributed\]'"):
        sweep(config, tmp_path / "nodask", backend="dask")


def test_kill_and_resume(config, reference, tmp_path):
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "brwsim.cli", "sweep", str(config), "--out", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    shards = out / "shards"
    deadline = time.monotonic() + 120
    while len(list(shards.glob("*.nc"))) < 12 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert proc.poll() is None, "the sweep finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = len(list(shards.glob("*.nc")))
    assert 12 <= done < N_TASKS and not (out / "results.nc").exists()
    rerun = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{N_TASKS - done} run, {done} reused" in rerun.stdout
    assert_same_data(reference / "results.nc", out / "results.nc")
    assert not list(out.glob(".*.tmp")) and not list(shards.glob(".*.tmp"))


def test_corrupt_partial_and_foreign_shards_are_redone(reference, config, tmp_path):
    out = tmp_path / "corrupt"
    shutil.copytree(reference, out)
    shards = sorted((out / "shards").glob("p*_c*.nc"))
    truncated, zeroed, foreign, short = shards[1], shards[5], shards[9], shards[13]
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    data = bytearray(zeroed.read_bytes())
    data[len(data) // 3:] = bytes(len(data) - len(data) // 3)
    zeroed.write_bytes(bytes(data))
    with xr.open_dataset(foreign) as ds:
        other = ds.load()
    other.attrs["config_hash"] = "0" * 64
    other.to_netcdf(foreign)
    with xr.open_dataset(short) as ds:
        cut = ds.load().isel(iteration=slice(0, 5))
    cut.to_netcdf(short)
    (out / "shards" / ".p0000000_c000000.nc.abc.tmp").write_bytes(b"partial")
    rep = sweep(config, out)
    assert (rep.run, rep.discarded) == (4, 4)
    assert_same_data(reference / "results.nc", rep.path)
    rep = sweep(config, out)
    assert (rep.run, rep.reused) == (0, N_TASKS)


def test_a_shard_rewritten_by_xarray_unchanged_is_reused(reference, config, tmp_path):
    """Shards are plain netCDF-4: a chunk and a theory shard that xarray reads and writes
    back unchanged (as brwsim wrote them before it used netCDF4 directly) are reused."""
    out = tmp_path / "rewritten"
    shutil.copytree(reference, out)
    for path in (sorted((out / "shards").glob("p*_c*.nc"))[3],
                 next((out / "shards").glob("p*_theory.nc"))):
        with xr.open_dataset(path) as ds:
            loaded = ds.load()
        loaded.to_netcdf(path)
    rep = sweep(config, out)
    assert (rep.run, rep.reused, rep.discarded) == (0, N_TASKS, 0)
    assert_same_data(reference / "results.nc", rep.path)


def test_shards_record_their_code(reference):
    with xr.open_dataset(next((reference / "shards").glob("p*_c*.nc"))) as shard:
        assert shard_code(shard.attrs) == running_code()
    with xr.open_dataset(reference / "results.nc") as ds:
        assert json.loads(ds.attrs["shard_code"]) == {running_code(): N_TASKS}
    assert shard_code({"git_commit": "", "brwsim_version": "0.1.0"}) == "brwsim 0.1.0"
    assert shard_code({}) == "unknown"         # a shard of a brwsim older than the record


def test_a_merge_of_other_code_s_shards_warns(reference, config, tmp_path, monkeypatch, capsys):
    """A sweep resumed by another code (here a patched commit): the data are merged, the
    merge counts each code's shards in ``shard_code`` and the CLI says so on one line."""
    out = tmp_path / "mixed"
    shutil.copytree(reference, out)
    for shard in sorted((out / "shards").glob("p*_c*.nc"))[:10]:
        shard.unlink()
    monkeypatch.setattr(brwsim_io, "running_commit", lambda: "0123abcd")
    assert running_code() == "0123abcd"
    assert main(["sweep", str(config), "--out", str(out), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "10 run, 74 reused" in captured.out
    old = shard_code({"git_commit": gitcommit.running_commit()})
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("brwsim: warning: ")
    assert f"{old} (74 shards), 0123abcd (10 shards)" in lines[0]
    a, b = _groups(reference / "results.nc"), _groups(out / "results.nc")
    assert json.loads(b["/"].attrs.pop("shard_code")) == {old: 74, "0123abcd": 10}
    a["/"].attrs.pop("shard_code")
    assert b["/"].attrs.pop("git_commit") == "0123abcd"     # the merging run's code
    a["/"].attrs.pop("git_commit")
    for name in a:                              # the data themselves are the same
        xr.testing.assert_identical(a[name], b[name])
    with pytest.warns(MixedCodeWarning, match="0123abcd"):     # the Python API warns too
        sweep(config, out)
    assert main(["inspect", str(out / "results.nc")]) == 0
    assert (f"shards by the code that wrote them: {_short_commit(old)} (74), 0123abcd (10); not one "
            "version's run") in capsys.readouterr().out
    assert main(["inspect", str(reference / "results.nc")]) == 0
    assert "shards by the code" not in capsys.readouterr().out


def test_changed_config_and_busy_folder_are_refused(reference, config, tmp_path):
    out = tmp_path / "changed"
    shutil.copytree(reference, out)
    changed = _write(tmp_path, CONFIG.replace("iterations = 400", "iterations = 500"))
    with pytest.raises(UserError, match=r"different configuration \(sweep\.iterations: 400 -> 500\)"):
        sweep(changed, out)
    fcntl = pytest.importorskip("fcntl")
    with open(out / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        with pytest.raises(UserError, match="another brwsim sweep is running"):
            sweep(config, out)


def test_summary_only_then_full(reference, config, tmp_path):
    out = tmp_path / "summary"
    rep = sweep(config, out, summary_only=True)
    full, summ = _groups(reference / "results.nc"), _groups(rep.path)
    for name in ("peaked", "zipf"):
        assert "accepted" not in summ[name] and "iteration" not in summ[name].dims
        expect = full[name].drop_vars(["accepted", "expected_accepted", "depth", "iteration"])
        xr.testing.assert_identical(expect, summ[name])
    rep = sweep(config, out)            # the raw arrays are missing: chunk shards are redone
    assert (rep.run, rep.discarded) == (N_TASKS - 4, N_TASKS - 4)
    assert_same_data(reference / "results.nc", rep.path)


def test_prediction_and_bound_match_theory(tmp_path):
    theory = pytest.importorskip("brwsim.theory")
    cfg = _write(tmp_path, """
[sweep]
iterations = 20
chunk = 10
budgets = "1..64"
prediction = "numerical"
[[sweep.family]]
name = "zipf"
s = [1.2, 1.5]
vocab = 1000
""")
    rep = sweep(cfg, tmp_path / "pred")
    ds = _groups(rep.path)["zipf"]
    for p in load_config(cfg).points():
        point = ds.sel(s=p.family.s)
        budgets = ds["budget"].values
        np.testing.assert_array_equal(point["prediction"].values, theory.prediction(p.family, budgets))
        mom = p.family.moments()
        np.testing.assert_array_equal(point["paper_bound"].values,
                                      theory.paper_bound(mom.mu, mom.mu2, budgets))


def test_context_dependent_points_store_their_own_bound_and_nan_with_reasons(tmp_path):
    """A markovregime sweep: its own proven bound (brwsim.theory.contextual), never the
    i.i.d. marginal's; the paper's bound is NaN with the reason per point."""
    theory = pytest.importorskip("brwsim.theory")
    cfg = _write(tmp_path, """
[sweep]
iterations = 4
chunk = 4
budgets = "1..16"
[[sweep.family]]
name = "markovregime"
families = ["geometric(r=0.1)", "dirichlet(alpha=0.3, vocab=50)"]
weights = [0.6, 0.4]
persistence = [0.0, 0.9]
""")
    rep = sweep(cfg, tmp_path / "ctx")
    ds = _groups(rep.path)["markovregime"]
    for p in load_config(cfg).points():
        point = ds.sel(persistence=p.family.params()["persistence"])
        budgets = ds["budget"].values
        np.testing.assert_allclose(point["upper_bound"].values,
                                   theory.upper_bound(p.family, budgets).value, rtol=1e-12)
        assert np.isnan(point["paper_bound"].values).all()
    reason = ds["paper_bound"].attrs["reason"]
    assert "point 0: NaN" in reason and "i.i.d." in reason


def test_cli_sweep_inspect_plot(config, tmp_path, capsys):
    bad = _write(tmp_path, CONFIG.replace("a = [2, 4]", "a = [2, -4]"), "bad.toml")
    assert main(["sweep", str(bad), "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "sweep.family[0].a[1]: must be a finite number > 0" in err
    assert not (tmp_path / "bad").exists()
    small = _write(tmp_path, CONFIG.replace("iterations = 400", "iterations = 40"), "small.toml")
    out = tmp_path / "cli"
    assert main(["sweep", str(small), "--out", str(out), "--quiet"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert main(["inspect", str(out / "results.nc")]) == 0
    text = capsys.readouterr().out
    for needle in ("group peaked: 2 points", "swept spread: 0.0, 0.3", "budgets: 1, 4, 16, 64, 256, 1024",
                   "iterations: 40 per point", "seed 7", "peaked(a=4.0, b=0.5, s=1.1, vocab=32000)",
                   "paper bound", "history: "):
        assert needle in text
    fig = tmp_path / "fig.png"
    assert main(["plot", str(out / "results.nc"), "--out", str(fig)]) == 0
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_inspect_and_plot_a_run_file(tmp_path, capsys):
    run = tmp_path / "run.nc"
    assert main(["run", "--family", "geometric(r=0.5)", "--budgets", "1,4,16", "--iterations", "30",
                 "--out", str(run), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(run)]) == 0
    text = capsys.readouterr().out
    assert "group (root): 1 point" in text and "geometric(r=0.5)" in text and "iterations: 30" in text
    assert main(["plot", str(run), "--out", str(tmp_path / "run.png")]) == 0
    assert (tmp_path / "run.png").stat().st_size > 1000
    assert main(["inspect", str(tmp_path / "missing.nc")]) == 2
