"""Bad inputs and faults, as a new user meets them: one line, exit 2, no traceback, no state.

Every class of issue 13 has a test here, parametrised over its cases (issue 24's, for
device files, pipes, hangs and checksums, are in ``test_bad_inputs_files.py``, with the
same harness). CLI cases run through
:func:`brwsim.cli.main` in-process (an uncaught exception fails the test: that is the
traceback a user would see) or, where the process itself matters (pipes, exit codes),
through a subprocess. Every CLI case also checks that the folder it ran in holds exactly
what it held before. Nothing here simulates more than a few trees.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import brwsim
from brwsim import Fixed, Mixture, UserError, Zipf, parse_family, simulate, summarize, sweep
from brwsim import validate
from brwsim.cli import main, parse_budgets
from brwsim.environment import node_logprobs

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "logprobs"
SMALL = "zipf(s=1.1, vocab=10)"
FAST_RUN = ["--budgets", "1,4", "--iterations", "4", "--quiet"]


def without_compile_notice(stderr: str) -> list[str]:
    """The lines of ``stderr`` other than the compile notice's progress lines, which a cold
    numba cache adds before anything else (brwsim.kernels._CompileNotice): progress, not
    errors."""
    return [ln for ln in stderr.splitlines() if not ln.startswith("brwsim: compil")]


def listing(folder: Path) -> list[str]:
    """Every path under ``folder`` (hidden files included), relative and sorted."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def one_line_error(capsys, argv, cwd: Path, needle: str | None = None) -> str:
    """Run ``brwsim argv`` in ``cwd``: exit 2, one ``brwsim: error:`` line, no new files."""
    before = listing(cwd)
    old = os.getcwd()
    os.chdir(cwd)
    try:
        code = main([str(a) for a in argv])
    finally:
        os.chdir(old)
    out, err = capsys.readouterr()
    err = err.strip()
    assert code == 2, (code, out, err)
    assert len(err.splitlines()) == 1 and err.startswith("brwsim: error: "), err
    assert "Traceback" not in err and len(err) < 600, err[:600]
    assert listing(cwd) == before, "files or folders were left behind"
    if needle is not None:
        assert needle in err, err
    return err


def api_error(call, needle: str | None = None) -> str:
    """``call()`` raises one :class:`UserError` line (containing ``needle``)."""
    with pytest.raises(UserError) as info:
        call()
    msg = str(info.value)
    assert "\n" not in msg and len(msg) < 600, msg[:600]
    if needle is not None:
        assert needle in msg, msg
    return msg


@pytest.fixture
def memory_8gib(monkeypatch):
    """Size checks see 8 GiB available, whatever the machine has (deterministic refusals)."""
    monkeypatch.setattr(validate, "available_memory", lambda: 8 << 30)


def nest(n: int, head: str, tail: str, inner: str = SMALL) -> str:
    return head * n + inner + tail * n


def write_toml(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


SWEEP_HEAD = '[sweep]\nseed = 1\niterations = {it}\nchunk = {chunk}\nbudgets = {budgets}\nprediction = "none"\n'


def sweep_toml(tmp_path: Path, block: str, it: int = 4, chunk: int = 2, budgets: str = "[1, 2]",
               name: str = "s.toml") -> Path:
    return write_toml(tmp_path / name, SWEEP_HEAD.format(it=it, chunk=chunk, budgets=budgets) + block)


UNIFORM_BLOCK = '[[sweep.family]]\nname = "uniform"\nk = [2, 3]\n'


# --- malformed structure (API) --------------------------------------------------------

@pytest.mark.parametrize("call,needle", [
    (lambda: Fixed([[0.1, 0.2], [0.3]]), "probs[0]"),
    (lambda: Fixed({"a": 0.5}), "probs"),
    (lambda: Fixed(["0.5", "x"]), "probs[0]"),
    (lambda: Fixed("0.5"), "probs"),
    (lambda: Mixture([Zipf(1.1, 10)], "abc"), "weights"),
    (lambda: Mixture([Zipf(1.1, 10)], [[1.0]]), "weights[0]"),
    (lambda: parse_family(42), "string"),
    (lambda: parse_family(None), "string"),
    (lambda: summarize(xr.Dataset()), "simulate"),
    (lambda: summarize(42), "Dataset"),
    (lambda: sweep([1, 2], "sw"), "TOML"),
    (lambda: node_logprobs(Zipf(1.1, 10), 0, 0, k=-1), "k"),
    (lambda: node_logprobs(Zipf(1.1, 10), 0, -5), "iteration"),
    (lambda: node_logprobs(Zipf(1.1, 10), 0, 0, path=[-1]), "path[0]"),
    (lambda: node_logprobs(Zipf(1.1, 10), 0, 0, path="01"), "path"),
    (lambda: simulate(Zipf(1.1, 10), "1,4", 4), "budgets"),
], ids=lambda v: "" if callable(v) else v)
def test_malformed_structure_api(call, needle, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    api_error(call, needle)
    assert listing(tmp_path) == []


def test_huge_mixture_weights_are_normalised_without_overflow():
    m = Mixture([Zipf(1.1, 10), Zipf(1.2, 10)], [1e308, 1e308])
    assert m.weights.tolist() == [0.5, 0.5]
    assert parse_family(repr(m)) == m


# --- family strings (CLI) -------------------------------------------------------------

@pytest.mark.parametrize("family,needle", [
    ("fixed(probs=[0.5, [0.2]])", "probs[1]"),
    ("dirichlet(alpha=0.05, alpha=5, vocab=200)", "given twice"),
    ("zipf(s=1.1, s=1.2, vocab=10)", "given twice"),
    (nest(150, "mixture(families=[", "])"), "nested deeper than 32"),
    (nest(200, "tempered(family=", ", T=1)"), "nested deeper than 32"),
    (nest(5000, "mixture(families=[", "])"), "nested deeper than 32"),
    (nest(10000, "[", "]"), "nested deeper than 32"),
    ("zipf(s=1.1, vocab=" + "1" * 127_000 + ")", "more than 40 digits"),
    ("zipf(s=1.1, vocab=10" + " " * 127_000 + "x", "cannot parse"),
    ("zipf(s='1.1', vocab=10)", "must be a number"),
], ids=["nested-list", "dup-alpha", "dup-s", "mixture150", "tempered200", "mixture5000",
        "lists10000", "127k-integer", "127k-string", "quoted-number"])
@pytest.mark.parametrize("command", ["theory", "run"])
def test_bad_family_strings(capsys, tmp_path, command, family, needle):
    extra = FAST_RUN if command == "run" else ["--budgets", "1,4"]
    err = one_line_error(capsys, [command, "--family", family, *extra, "--out", tmp_path / "o.nc"]
                         if command == "run" else [command, "--family", family, *extra],
                         tmp_path, needle)
    assert len(err) < 400                      # a 127 KB input gives a short line


def test_nesting_limit_is_the_documented_one():
    ok = nest(15, "mixture(families=[", "])")          # 30 levels of calls and lists
    assert repr(parse_family(ok)).count("mixture(") == 15
    api_error(lambda: parse_family(nest(17, "mixture(families=[", "])")), "32 levels")
    assert validate.MAX_NESTING == 32


def test_long_echoes_are_cut():
    text = "x" * 10_000
    assert validate.echo(text) == repr(text)[:117] + "..."
    assert len(validate.echo(text)) == validate.MAX_ECHO


# --- sizes ----------------------------------------------------------------------------

@pytest.mark.parametrize("budgets,needle", [
    ("1-1000000000", "exceeds the supported maximum"),
    ("1-10000000", "more than 65536 budgets"),
    ("1..100000000000000000000", "not an integer"),
    ("0..4", "P >= 1"),
    ("4-1", "empty range"),
    ("1..4..16", "not a range"),
])
def test_budget_ranges_checked_before_expanding(capsys, tmp_path, budgets, needle):
    start = time.perf_counter()
    one_line_error(capsys, ["theory", "--family", SMALL, "--budgets", budgets], tmp_path, needle)
    assert time.perf_counter() - start < 5


def test_budgets_message_names_the_bad_value():
    with pytest.raises(UserError, match=r"got 0 in '0\.\.4'"):
        parse_budgets("0..4")


@pytest.mark.parametrize("argv,needle", [
    (["run", "--family", SMALL, "--budgets", "1,4", "--iterations", "1000000000"], "would need"),
    (["run", "--family", SMALL, "--iterations", "100000000000000"], "would need"),
    (["run", "--family", SMALL, "--budgets", "1-60000", "--iterations", "100000"], "would need"),
])
def test_work_that_cannot_fit_is_refused_up_front(capsys, tmp_path, memory_8gib, argv, needle):
    err = one_line_error(capsys, [*argv, "--quiet", "--no-out"], tmp_path, needle)
    assert "GiB" in err or "TiB" in err or "PiB" in err


def test_simulate_refuses_1e12_iterations(memory_8gib):
    api_error(lambda: simulate(Zipf(1.1, 10), [1, 4], 10**12), "would need")


def test_wide_expansion_does_not_allocate_its_width(capsys, tmp_path):
    code = main(["run", "--family", SMALL, *FAST_RUN, "--no-out",
                 "--policy", "expansion(widths=[1000000000, 1000000000])"])
    assert code == 0, capsys.readouterr().err
    assert "expansion(widths=[1000000000, 1000000000])" in capsys.readouterr().out


def test_npz_header_announcing_a_huge_array(capsys, tmp_path, memory_8gib):
    buf = io.BytesIO()
    np.save(buf, np.log(np.full((3, 20), 0.01)))
    raw = buf.getvalue().replace(b"(3, 20)", b"(10000000000, 20)", 1)
    src = tmp_path / "huge.npz"
    with zipfile.ZipFile(src, "w") as zf:
        zf.writestr("logprobs.npy", raw)
    one_line_error(capsys, ["import-logprobs", src, "--out", tmp_path / "b.nc"], tmp_path,
                   "would need 1.46 TiB")


@pytest.mark.parametrize("head,block,needle", [
    ({"it": 10**15, "chunk": 1000}, UNIFORM_BLOCK, "tasks per point"),
    ({"it": 10**7, "chunk": 1}, UNIFORM_BLOCK, "tasks per point"),
    ({"it": 4, "chunk": 2}, '[[sweep.family]]\nname = "zipf"\ns = [{}]\nvocab = [{}]\n'.format(
        ", ".join(str(1 + i / 1000) for i in range(1000)), ", ".join(str(10 + i) for i in range(1000))),
     "1000 x 1000 = 1000000 points"),
    ({"it": 4, "chunk": 2}, '[[sweep.family]]\nname = "zipf"\nvocab = 10\ns = [{}]\n'.format(
        ", ".join(str(1 + i / 10**6) for i in range(10**6))), "grid values exceed"),
    ({"it": 4, "chunk": 2}, '[[sweep.family]]\nname = "zipf"\nvocab = 10\ns = [{}]\n'.format(
        ", ".join(str(1 + i / 10**5) for i in range(99_999)) + ", 1.0"), "duplicate grid value"),
], ids=["iterations-1e15", "chunk-1", "grid-1000x1000", "grid-1e6", "dup-in-1e5"])
def test_sweep_sizes_checked_before_building(capsys, tmp_path, head, block, needle):
    cfg = sweep_toml(tmp_path, block, **head)
    start = time.perf_counter()
    one_line_error(capsys, ["sweep", cfg, "--out", tmp_path / "sw", "--quiet"], tmp_path, needle)
    assert time.perf_counter() - start < 20      # linear checks: no hang on 10**6 values


# --- output paths ---------------------------------------------------------------------

_SHARED: dict[str, Path] = {}


def _shared(name: str, argv: list[str]) -> Path:
    """An input file made once per test session (outside every test's folder)."""
    if name not in _SHARED:
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix="brwsim-bad-inputs-"))
        path = folder / name
        assert main([*argv, "--out", str(path)]) == 0
        _SHARED[name] = path
    return _SHARED[name]


def _commands(tmp_path: Path, out: Path) -> dict[str, list]:
    """Every command that writes, with ``out`` as its output (a folder for sweep)."""
    cfg = sweep_toml(tmp_path, UNIFORM_BLOCK)
    run_file = _shared("r.nc", ["run", "--family", SMALL, *FAST_RUN])
    bank = _shared("bank.nc", ["import-logprobs", str(FIXTURES / "chat.jsonl")])
    return {
        "run": ["run", "--family", SMALL, *FAST_RUN, "--out", out],
        "import-logprobs": ["import-logprobs", FIXTURES / "chat.jsonl", "--out", out],
        "sweep": ["sweep", cfg, "--out", out, "--quiet"],
        "plot": ["plot", run_file, "--out", out],
        "plan": ["plan", "--family", SMALL, "--params", "8e9", "--batch", "1", "--budgets", "1,4",
                 "--iterations", "2", "--quiet", "--out", out],
        "export-acceptance": ["export-acceptance", "--family", SMALL, "--budget", "4",
                              "--iterations", "2", "--out", out],
        "bank-stats": ["bank-stats", bank, "--budgets", "1,4", "--plot", out],
    }


#: Every command that writes a file (``sweep`` writes a folder).
WRITERS = ["run", "import-logprobs", "plot", "plan", "export-acceptance", "bank-stats"]


@pytest.mark.parametrize("command", [*WRITERS, "sweep"])
@pytest.mark.parametrize("case", ["existing-folder", "under-a-file"])
def test_unwritable_outputs_refused_before_the_work(capsys, tmp_path, command, case):
    (tmp_path / "afile").write_text("x")
    if case == "under-a-file":
        out = tmp_path / "afile" / "o.png"
    elif command == "sweep":                     # a sweep writes a folder: a file is in the way
        out = tmp_path / "afile"
    else:
        out = tmp_path / "adir.png"
        out.mkdir()
    argv = _commands(tmp_path, out)[command]
    capsys.readouterr()
    err = one_line_error(capsys, argv, tmp_path)
    assert "folder" in err
    assert "wrote" not in capsys.readouterr().out


@contextlib.contextmanager
def _mounted_tmpfs(folder: Path, options: str):
    """A small tmpfs at ``folder`` (root only); skips the test where mounting is not allowed."""
    folder.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a tmpfs")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder nobody can write in: chmod 555 for a normal user, a read-only tmpfs for root."""
    folder = tmp_path / "ro"
    if os.geteuid() != 0:
        folder.mkdir()
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    with _mounted_tmpfs(folder, "ro,size=1m") as mounted:
        yield mounted


@pytest.mark.parametrize("command", [*WRITERS, "sweep"])
def test_read_only_folder_refused_before_the_work(capsys, tmp_path, read_only_folder, command):
    argv = _commands(tmp_path, read_only_folder / "o.png")[command]
    capsys.readouterr()
    err = one_line_error(capsys, argv, tmp_path)
    assert "cannot write" in err
    assert str(read_only_folder / "o.png") in err and ".tmp" not in err   # the user's path
    out = capsys.readouterr().out
    assert "P*" not in out and "mean X" not in out                      # before the work


def test_plot_reports_the_file_it_wrote(capsys, tmp_path):
    run_file = tmp_path / "r.nc"
    assert main(["run", "--family", SMALL, *FAST_RUN, "--out", str(run_file)]) == 0
    capsys.readouterr()
    assert main(["plot", str(run_file), "--out", str(tmp_path / "fig")]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {tmp_path / 'fig.png'}"
    assert (tmp_path / "fig.png").read_bytes()[:4] == b"\x89PNG"
    one_line_error(capsys, ["plot", run_file, "--out", tmp_path / "fig.v2"], tmp_path,
                   "unknown figure format")


# --- disk full ------------------------------------------------------------------------

@pytest.fixture
def full_at_write(monkeypatch):
    """netCDF writes fail as HDF5 does on a full disk ("NetCDF: HDF error"), and the file
    system then reports no room; the up-front room check is passed (the estimate fitted)."""
    import netCDF4

    def fail(self, *args, **kwargs):
        raise RuntimeError("NetCDF: HDF error")

    opened = netCDF4.Dataset

    def dataset(path, mode="r", *args, **kwargs):       # the shards' and merges' writes
        if mode != "r":
            raise RuntimeError("NetCDF: HDF error")
        return opened(path, mode, *args, **kwargs)

    real = shutil.disk_usage
    monkeypatch.setattr(xr.Dataset, "to_netcdf", fail)
    monkeypatch.setattr(netCDF4, "Dataset", dataset)
    monkeypatch.setattr(validate, "_check_room", lambda *args: None)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=0))


@pytest.mark.parametrize("command", ["run", "import-logprobs", "sweep"])
def test_disk_full_at_write_says_so(capsys, tmp_path, full_at_write, command):
    cfg = sweep_toml(tmp_path, UNIFORM_BLOCK)
    argv = {"run": ["run", "--family", SMALL, *FAST_RUN, "--out", tmp_path / "o.nc"],
            "import-logprobs": ["import-logprobs", FIXTURES / "chat.jsonl", "--out", tmp_path / "o.nc"],
            "sweep": ["sweep", cfg, "--out", tmp_path / "sw", "--quiet"]}[command]
    one_line_error(capsys, argv, tmp_path, "disk full")


def test_disk_full_refused_up_front(capsys, tmp_path, monkeypatch):
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: real(p)._replace(free=10))
    err = one_line_error(capsys, ["run", "--family", SMALL, *FAST_RUN, "--out", tmp_path / "o.nc"],
                         tmp_path, "disk full")
    assert "needs about" in err
    assert "mean X" not in capsys.readouterr().out           # refused before simulating


def test_disk_full_from_the_operating_system(capsys, tmp_path, monkeypatch):
    def enospc(args):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "o.nc"))

    monkeypatch.setattr("brwsim.cli.theory._cmd_theory", enospc)
    one_line_error(capsys, ["theory", "--family", SMALL], tmp_path, "disk full writing")


def test_really_full_disk(capsys, tmp_path):
    with _mounted_tmpfs(tmp_path / "full", "size=256k") as disk:
        (disk / "filler").write_bytes(b"\0" * (256 * 1024 - 40 * 1024))
        before = listing(disk)
        cfg = sweep_toml(tmp_path, UNIFORM_BLOCK)
        for argv in (["run", "--family", SMALL, "--budgets", "1,4", "--iterations", "600",
                      "--quiet", "--out", disk / "r.nc"],
                     ["run", "--family", SMALL, "--budgets", "1,4", "--iterations", "20000",
                      "--quiet", "--out", disk / "r.nc"]):
            one_line_error(capsys, argv, tmp_path, "disk full")
            assert listing(disk) == before
        err = one_line_error(capsys, ["sweep", cfg, "--out", disk / "sw", "--quiet"], tmp_path)
        assert "disk full" in err


# --- files that are not brwsim's ------------------------------------------------------

@pytest.mark.parametrize("command", ["inspect", "plot"])
def test_foreign_netcdf(capsys, tmp_path, command):
    src = tmp_path / "foreign.nc"
    xr.Dataset({"x": ("budget", [1.0, 2.0])}, {"budget": [1, 2]}).to_netcdf(src)
    argv = [command, src] + (["--out", tmp_path / "f.png"] if command == "plot" else [])
    one_line_error(capsys, argv, tmp_path, "not a brwsim run or sweep file")


@pytest.mark.parametrize("content,needle", [
    (bytes(range(256)) * 4, "not a text file"),
    (b"\x89PNG\r\n\x1a\n" + b"\xff" * 100, "not a text file"),
    (b"[sweep\n", "invalid TOML"),
    (b"a = " + b"[" * 5000 + b"]" * 5000, "TOML"),
])
def test_sweep_on_a_file_that_is_not_a_config(capsys, tmp_path, content, needle):
    cfg = tmp_path / "c.toml"
    cfg.write_bytes(content)
    one_line_error(capsys, ["sweep", cfg, "--out", tmp_path / "sw"], tmp_path, needle)


# --- pipes ----------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["theory", "--family", SMALL, "--budgets", "1-2000"],
    ["inspect", "RUN"],
])
def test_closed_pipe_is_quiet(tmp_path, argv):
    run_file = tmp_path / "r.nc"
    if "RUN" in argv:
        assert main(["run", "--family", SMALL, "--budgets", "1-600", "--iterations", "2",
                     "--quiet", "--out", str(run_file)]) == 0
        argv = [str(run_file) if a == "RUN" else a for a in argv]
    proc = subprocess.Popen([sys.executable, "-m", "brwsim.cli", *argv], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()                        # the reader (head) is gone before any output
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert without_compile_notice(err) == [], err


# --- dask ------------------------------------------------------------------------------

@pytest.mark.parametrize("address", ["not a url", "tcp://", "tcp://host:port", "://x"])
def test_bad_scheduler_address(capsys, tmp_path, address):
    pytest.importorskip("distributed")
    cfg = sweep_toml(tmp_path, UNIFORM_BLOCK)
    one_line_error(capsys, ["sweep", cfg, "--out", tmp_path / "sw", "--backend", "dask",
                            "--scheduler", address], tmp_path, "not a dask scheduler address")


# --- sweep state ----------------------------------------------------------------------

def _fail_early(monkeypatch, exc: BaseException) -> None:
    def boom(*args, **kwargs):
        raise exc
    monkeypatch.setattr(sys.modules["brwsim.sweep.driver"], "execute", boom)


@pytest.mark.parametrize("fault", ["memory", "unreachable"])
def test_early_failure_leaves_no_claim(capsys, tmp_path, monkeypatch, fault):
    cfg = sweep_toml(tmp_path, UNIFORM_BLOCK)
    exc = MemoryError() if fault == "memory" else UserError("cannot connect to the dask scheduler")
    _fail_early(monkeypatch, exc)
    one_line_error(capsys, ["sweep", cfg, "--out", tmp_path / "sw", "--quiet"], tmp_path)
    # into an existing, empty folder: the folder stays, nothing is added to it
    (tmp_path / "sw2").mkdir()
    one_line_error(capsys, ["sweep", cfg, "--out", tmp_path / "sw2", "--quiet"], tmp_path)


@pytest.mark.parametrize("content,needle", [
    ({"results.nc": b"CDF\x01"}, "no config.json"),
    ({"config.json": b"\x00garbage"}, "unreadable"),
    ({"config.json": b"[1, 2]"}, "not a brwsim sweep state"),
])
def test_foreign_folder_content_is_kept_and_nothing_added(capsys, tmp_path, content, needle):
    cfg = sweep_toml(tmp_path, UNIFORM_BLOCK)
    out = tmp_path / "sw"
    out.mkdir()
    for name, data in content.items():
        (out / name).write_bytes(data)
    one_line_error(capsys, ["sweep", cfg, "--out", out, "--quiet"], tmp_path, needle)


def test_edited_scalars_and_attributes_are_detected(tmp_path):
    import netCDF4

    cfg = sweep_toml(tmp_path, UNIFORM_BLOCK)
    out = tmp_path / "sw"
    first = sweep(cfg, out)
    assert first.run == first.tasks == 6
    good = xr.open_dataset(first.path, group="uniform").load()
    with netCDF4.Dataset(out / "shards" / "p0000000_theory.nc", "a") as nc:
        nc["mu"][...] = 0.5
    with netCDF4.Dataset(out / "shards" / "p0000001_c000000.nc", "a") as nc:
        nc.setncattr("nodes_visited", 7)
    again = sweep(cfg, out)
    assert (again.run, again.discarded) == (2, 2)
    redone = xr.open_dataset(again.path, group="uniform").load()
    for name in ("mu", "paper_bound", "nodes_visited", "expected_mean"):
        np.testing.assert_array_equal(redone[name].values, good[name].values)


# --- configuration types --------------------------------------------------------------

@pytest.mark.parametrize("block,needle", [
    ('[[sweep.family]]\nname = "dirichlet"\nalpha = "0.05"\nvocab = 20\n',
     "sweep.family[0].alpha: must be a number, got '0.05'"),
    ('[[sweep.family]]\nname = "dirichlet"\nalpha = ["0.05", "0.1"]\nvocab = 20\n',
     "sweep.family[0].alpha[0]: must be a number"),
    ('[[sweep.family]]\nname = "zipf"\ns = 1.1\nvocab = "10"\n', "sweep.family[0].vocab"),
])
def test_config_values_have_consistent_types(capsys, tmp_path, block, needle):
    cfg = sweep_toml(tmp_path, block)
    one_line_error(capsys, ["sweep", cfg, "--out", tmp_path / "sw"], tmp_path, needle)


@pytest.mark.parametrize("budgets,needle", [
    ('"0..4"', "sweep.budgets: must be positive integers (P >= 1), got 0 in '0..4'"),
    ('"1-1000000000"', "exceeds the supported maximum"),
    ('[1, "4"]', "sweep.budgets[1]: must be a positive integer"),
])
def test_config_budgets_messages(capsys, tmp_path, budgets, needle):
    cfg = sweep_toml(tmp_path, UNIFORM_BLOCK, budgets=budgets)
    one_line_error(capsys, ["sweep", cfg, "--out", tmp_path / "sw"], tmp_path, needle)


# --- messages that must say more ------------------------------------------------------

def test_ceiling_says_the_entropy_is_too_high(capsys):
    assert main(["ceiling", "--tau", "5.1", "--entropy", "1.2", "--budget", "64",
                 "--shape", "zipf"]) == 0
    out = capsys.readouterr().out
    ratio = float(out.splitlines()[3].split()[2])
    assert ratio > 1
    assert "above the optimal (oracle) ceiling" in out and "entropy given is too high" in out


def test_ceiling_is_silent_below_the_ceiling(capsys):
    assert main(["ceiling", "--tau", "2.0", "--entropy", "1.2", "--budget", "64",
                 "--shape", "zipf"]) == 0
    assert "too high" not in capsys.readouterr().out


def test_run_help_lists_every_family(capsys):
    from brwsim.families import FAMILIES

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = capsys.readouterr().out
    for name in FAMILIES:
        assert f"  {name}(" in out, name


def test_bank_import_is_an_attribute_of_brwsim():
    """The README's API table names brwsim.bank.import_logprobs; it works after import brwsim."""
    assert callable(brwsim.bank.import_logprobs) and callable(brwsim.bank.load_bank)


# --- JSON lines ---------------------------------------------------------------------------

@pytest.mark.parametrize("line", ["[" * 100_000, '{"a": ' * 50_000, '{"choices": ' + "[" * 40 + "]" * 40 + "}"])
def test_deep_json_line(capsys, tmp_path, line):
    src = tmp_path / "deep.jsonl"
    src.write_text(line + "\n")
    one_line_error(capsys, ["import-logprobs", src, "--out", tmp_path / "b.nc"], tmp_path,
                   "nested deeper than 32 levels")


def test_json_depth_ignores_brackets_in_strings():
    assert validate.json_depth('{"a": "[[[[[[", "b": [1, [2]], "c": "\\"[[["}') == 3
    line = json.dumps({"x": "[" * 100, "y": [[[]]]})
    validate.check_json_depth(line, "here")                  # 4 levels: accepted
