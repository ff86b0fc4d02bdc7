"""Bad inputs of issue 24: device files, named pipes, hangs, tracebacks, silently wrong
results, exit statuses, leftovers and shard checksums, for every command that reads or
writes (run, plan, export-acceptance, import-logprobs, bank-stats, plot, sweep).

Uses the harness of ``test_bad_inputs.py`` (one line, exit 2, nothing left behind). Device
files are made with ``os.mknod`` in ``tmp_path`` (root only; skipped otherwise), never the
real /dev/null or /dev/full as an output; inputs that could block (named pipes) run under
a watchdog, so a regression fails instead of hanging.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import brwsim
from brwsim import UserError, Zipf, parse_family, sweep
from brwsim.bankstats import bank_stats
from brwsim.cli import main
from brwsim.export import engine_settings, schedule_from_rates
from brwsim.generate import generate
from tests.integration.test_bad_inputs import (FAST_RUN, FIXTURES, SMALL, UNIFORM_BLOCK, WRITERS,
                                               _commands, api_error, listing, memory_8gib,
                                               one_line_error, sweep_toml,
                                               without_compile_notice)

__all__ = ["memory_8gib"]     # the fixture, imported for the tests below


# --- issue 24: device files, hangs, tracebacks, silent results, exit status, checksums ---------

def _device_copy(tmp_path: Path, name: str, source: str) -> Path:
    """A copy of the character device ``source`` (/dev/null, /dev/full) in ``tmp_path``."""
    if os.geteuid() != 0:
        pytest.skip("creating a device file needs root")
    st = os.stat(source)
    dev = tmp_path / name
    os.mknod(dev, 0o666 | stat.S_IFCHR, st.st_rdev)
    return dev


@pytest.mark.parametrize("command", WRITERS)
@pytest.mark.parametrize("kind", ["char-device", "fifo", "socket"])
def test_outputs_that_are_not_regular_files_are_refused(capsys, tmp_path, command, kind):
    if kind == "char-device":
        out = _device_copy(tmp_path, "null.png", "/dev/null")
    elif kind == "fifo":
        out = tmp_path / "pipe.png"
        os.mkfifo(out)
    else:
        out = tmp_path / "sock.png"
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(out))
    argv = _commands(tmp_path, out)[command]
    capsys.readouterr()
    mode = os.stat(out).st_mode
    err = one_line_error(capsys, argv, tmp_path, "not a regular file")
    assert str(out) in err
    assert os.stat(out).st_mode == mode                     # still the device, pipe or socket
    if kind == "socket":
        server.close()


@pytest.mark.parametrize("command", WRITERS)
def test_output_with_a_trailing_slash_names_a_folder(capsys, tmp_path, command):
    argv = _commands(tmp_path, Path("x"))[command]
    argv[argv.index(Path("x"))] = str(tmp_path / "newdir") + "/"
    one_line_error(capsys, argv, tmp_path, "names a folder, not a file")
    assert not (tmp_path / "newdir").exists()


def test_atomic_path_never_replaces_a_device(tmp_path):
    from brwsim.io import atomic_path

    dev = _device_copy(tmp_path, "null", "/dev/null")
    with pytest.raises(UserError, match="character device"):
        with atomic_path(dev) as tmp:
            tmp.write_text("x")
    assert stat.S_ISCHR(os.stat(dev).st_mode) and listing(tmp_path) == ["null"]


class _Hung(BaseException):
    """Raised by the watchdog: an input blocked (not an OSError, so main() cannot catch it)."""


@contextlib.contextmanager
def watchdog(seconds: int):
    """Fail instead of hanging: SIGALRM interrupts a blocking open() after ``seconds``."""
    def fire(signum, frame):
        raise _Hung(f"blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _fifo_inputs(tmp_path: Path, fifo: Path) -> dict[str, list]:
    return {
        "plan": ["plan", "--family", SMALL, "--batch", "1", "--budgets", "1,4", "--iterations",
                 "2", "--quiet", "--cost-table", fifo],
        "import-logprobs": ["import-logprobs", fifo, "--out", tmp_path / "b.nc"],
        "bank-stats": ["bank-stats", fifo, "--budgets", "1,4"],
        "plot": ["plot", fifo, "--out", tmp_path / "f.png"],
        "inspect": ["inspect", fifo],
        "sweep": ["sweep", fifo, "--out", tmp_path / "sw", "--quiet"],
        "run": ["run", "--family", f"empirical(bank={fifo})", *FAST_RUN, "--no-out"],
    }


@pytest.mark.parametrize("command", ["plan", "import-logprobs", "bank-stats", "plot", "inspect",
                                     "sweep", "run"])
def test_named_pipe_inputs_are_refused_not_opened(capsys, tmp_path, command):
    suffix = {"plan": ".csv", "import-logprobs": ".jsonl", "sweep": ".toml"}.get(command, ".nc")
    fifo = tmp_path / f"in{suffix}"
    os.mkfifo(fifo)
    with watchdog(60):
        one_line_error(capsys, _fifo_inputs(tmp_path, fifo)[command], tmp_path, "named pipe")


def test_character_device_input_is_refused(capsys, tmp_path):
    dev = _device_copy(tmp_path, "zero.csv", "/dev/zero")
    with watchdog(60):
        one_line_error(capsys, _fifo_inputs(tmp_path, dev)["plan"], tmp_path, "character device")


@pytest.mark.parametrize("argv,needle", [
    (["run", "--family", "uniform(k=1099511627776)", *FAST_RUN, "--no-out"], "at most 2**24"),
    (["export-acceptance", "--family", SMALL, "--budget", "4", "--iterations", "2",
      "--positions", "100000000000"], "positions must be an integer in [1, 4]"),
    (["import-logprobs", FIXTURES / "chat.jsonl", "--vocab", "100000000000000000000",
      "--out", "b.nc"], "vocab must be an integer in [1, 1099511627776]"),
    (["run", "--family", "entropytarget(entropies=[1e308], shape=geometric)", *FAST_RUN,
      "--no-out"], "entropies must lie in [0, 27.7259]"),
], ids=["uniform-2**40", "positions-1e11", "vocab-1e20", "entropy-1e308"])
def test_huge_values_refused_up_front(capsys, tmp_path, argv, needle):
    start = time.perf_counter()
    one_line_error(capsys, argv, tmp_path, needle)
    assert time.perf_counter() - start < 30                   # refused, not computed


def test_million_commas_parse_in_linear_time():
    text = "fixed(probs=[" + "," * 1_000_000 + "])"
    start = time.perf_counter()
    api_error(lambda: parse_family(text), "cannot parse family")
    assert time.perf_counter() - start < 30                    # 67 s when it was quadratic


@pytest.mark.parametrize("call,needle", [
    (lambda s: engine_settings(s, engines=None), "engines must be a list"),
    (lambda s: engine_settings(s, engines=[1]), "engines must be a list"),
    (lambda s: engine_settings(s, digits=-1), "digits must be an integer in [0, 15]"),
    (lambda s: engine_settings(s, digits=1.5), "digits must be an integer in [0, 15]"),
    (lambda s: engine_settings(s, digits=10**6), "digits must be an integer in [0, 15]"),
], ids=["engines-None", "engines-int", "digits-neg", "digits-frac", "digits-1e6"])
def test_engine_settings_arguments(call, needle):
    api_error(lambda: call(schedule_from_rates([0.6, 0.3])), needle)


def test_tracebacks_of_the_api_are_user_errors(tmp_path, memory_8gib):
    api_error(lambda: brwsim.bank.import_logprobs([FIXTURES / "chat.jsonl"], 5),
              "--out must be a file path")
    api_error(lambda: bank_stats(None), "must be a file path")
    api_error(lambda: generate(Zipf(1.1, 10), budget=4, tokens=10**12), "would need")
    assert listing(tmp_path) == []


def test_charlstm_inputs(tmp_path):
    pytest.importorskip("h5py")
    from brwsim.families.charlstm import CharLSTM

    model = CharLSTM()
    api_error(lambda: model.next_token_probs(12345), "text must be a string")
    corpus = tmp_path / "alien.txt"
    corpus.write_text("\u4e00\u4e01\u4e02" * 40 + "\n", encoding="utf-8")
    api_error(lambda: CharLSTM(corpus=corpus), "none of its")


@pytest.mark.parametrize("extra,needle", [
    (["--params", "1e308"], "params must be a number in [1, 1e+15]"),
    (["--params", "1e-300"], "params must be a number in [1, 1e+15]"),
    (["--constant-ms", "5", "--params", "8e9"], "exactly one verifier"),
    (["--constant-ms", "1e-320"], "constant_ms must be a number in"),
    (["--gpu", "", "--params", "8e9"], "unknown gpu ''"),
    (["--constant-ms", "5", "--gpu", "a100"], "apply to a roofline"),
    (["--cost-table", "TINY"], "times in [1e-06, 1e+09] ms"),
], ids=["params-1e308", "params-1e-300", "constant-and-params", "ms-1e-320", "gpu-empty",
        "gpu-with-constant", "table-ms-1e-320"])
def test_plan_refuses_what_it_used_to_compute_wrongly(capsys, tmp_path, extra, needle):
    table = tmp_path / "tiny.csv"
    table.write_text("tokens,ms\n1,1e-320\n64,2e-320\n")
    extra = [str(table) if a == "TINY" else a for a in extra]
    one_line_error(capsys, ["plan", "--family", SMALL, "--batch", "1", "--budgets", "1,4",
                            "--iterations", "2", "--quiet", *extra], tmp_path, needle)


@pytest.mark.parametrize("block,needle", [
    ('[[sweep.family]]\nname = "zipf"\ns = [1.1, 1e308]\nvocab = 10\n', "degenerate in float64"),
    (UNIFORM_BLOCK + '[sweep.cost]\nparams = 1e308\ngpu = "h100"\n', "params must be a number"),
    (UNIFORM_BLOCK + '[sweep.cost]\nconstant_ms = 1e-320\n', "constant_ms must be a number"),
], ids=["zipf-s-1e308", "cost-params-1e308", "cost-ms-1e-320"])
def test_sweep_points_checked_as_run_checks_them(capsys, tmp_path, block, needle):
    cfg = sweep_toml(tmp_path, block)
    one_line_error(capsys, ["sweep", cfg, "--out", tmp_path / "sw", "--quiet"], tmp_path, needle)
    if "1e308\nvocab" in block:             # run refuses the same family with the same words
        one_line_error(capsys, ["run", "--family", "zipf(s=1e308, vocab=10)", *FAST_RUN,
                                "--no-out"], tmp_path, needle)


@pytest.mark.parametrize("argv", [
    ["theory", "--family", SMALL, "--budgets", "1,4"],
    ["export-acceptance", "--family", SMALL, "--budget", "2", "--iterations", "2", "--out", "a.json"],
], ids=["theory", "export-acceptance"])
@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_stdout_on_a_full_device(tmp_path, argv, buffered):
    env = {**os.environ, "PYTHONUNBUFFERED": "" if buffered else "1"}
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "brwsim.cli", *argv], cwd=tmp_path,
                              stdout=full, stderr=subprocess.PIPE, text=True, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert without_compile_notice(proc.stderr) == [
        "brwsim: error: writing stdout: No space left on device"], proc.stderr


def test_bank_stats_plot_onto_a_full_disk_leaves_nothing(capsys, tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    bank = tmp_path / "bank.nc"
    assert main(["import-logprobs", str(FIXTURES / "chat.jsonl"), "--out", str(bank)]) == 0

    def full(self, fname, *args, **kwargs):
        Path(fname).write_bytes(b"")                     # what savefig leaves on ENOSPC
        raise OSError(errno.ENOSPC, "No space left on device", str(fname))

    monkeypatch.setattr(Figure, "savefig", full)
    err = one_line_error(capsys, ["bank-stats", bank, "--budgets", "1,4", "--plot",
                                  tmp_path / "h.png"], tmp_path, "disk full")
    assert str(tmp_path / "h.png") in err


def test_sweep_onto_a_full_disk_leaves_no_claim(capsys, tmp_path, monkeypatch):
    cfg = sweep_toml(tmp_path, UNIFORM_BLOCK)
    real = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if self.name == "shards":
            raise OSError(errno.ENOSPC, "No space left on device", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    one_line_error(capsys, ["sweep", cfg, "--out", tmp_path / "sw", "--quiet"], tmp_path, "disk full")


def test_plan_checks_out_before_simulating(capsys, tmp_path):
    (tmp_path / "afile").write_text("x")
    one_line_error(capsys, ["plan", "--family", SMALL, "--params", "8e9", "--batch", "1",
                            "--budgets", "1,4", "--iterations", "2", "--quiet",
                            "--out", tmp_path / "afile" / "p.nc"], tmp_path, "is a file, not a folder")
    assert capsys.readouterr().out == ""


def test_edited_array_element_is_detected(tmp_path):
    import netCDF4

    cfg = sweep_toml(tmp_path, UNIFORM_BLOCK)
    out = tmp_path / "sw"
    first = sweep(cfg, out)
    good = xr.open_dataset(first.path, group="uniform").load()
    with netCDF4.Dataset(out / "shards" / "p0000001_c000000.nc", "a") as nc:
        nc["expected_accepted"][0, 0] = nc["expected_accepted"][0, 0] + 0.25
    again = sweep(cfg, out)
    assert (again.run, again.discarded) == (1, 1)
    redone = xr.open_dataset(again.path, group="uniform").load()
    for name in ("expected_accepted", "expected_mean", "accepted"):
        np.testing.assert_array_equal(redone[name].values, good[name].values)


def test_large_json_lines_import_shows_progress(capsys, tmp_path, monkeypatch):
    from brwsim.bank import jsonfile

    monkeypatch.setattr(jsonfile, "PROGRESS_BYTES", 100)           # the fixture is 1.5 KB
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    brwsim.bank.import_logprobs([FIXTURES / "chat.jsonl"])
    err = capsys.readouterr().err
    assert "import chat.jsonl" in err and "B" in err
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)     # not a terminal: silent
    brwsim.bank.import_logprobs([FIXTURES / "chat.jsonl"])
    assert "import chat.jsonl" not in capsys.readouterr().err
