"""Ctrl-C and kill -9 (issue 40, item 2): every command answers SIGINT with exactly
``brwsim: interrupted`` and status 130, leaving nothing partial, and a sweep's workers do
not outlive their driver.

Each case runs ``python -m brwsim.cli`` in a child and sends SIGINT at a moment: during the
imports of start-up, while a cached kernel loads, inside a simulation. The answer is timed
from the signal to the child's exit. (A signal before the interpreter runs brwsim's first
line, while Python imports its own ``site`` module, is Python's to answer.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brwsim.interrupt import is_interrupt
from tests.integration.test_bad_inputs import ROOT, SMALL, listing

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "BRWSIM_COMPILE_NOTICE": "0"}


def _start(argv: list, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "brwsim.cli", *map(str, argv)], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


def _interrupt_after(argv: list, cwd: Path, delay: float, limit: float = 1.0) -> str:
    """Start ``brwsim argv``, SIGINT it after ``delay`` s: it must end within ``limit`` s
    with status 130 and ``brwsim: interrupted`` as its only stderr line; returns stdout."""
    child = _start(argv, cwd)
    time.sleep(delay)
    assert child.poll() is None, "the command ended before the signal: lengthen it"
    sent = time.perf_counter()
    child.send_signal(signal.SIGINT)
    try:
        out, err = child.communicate(timeout=30)
    finally:
        child.kill()
    answered = time.perf_counter() - sent
    assert child.returncode == 130, (child.returncode, err[-2000:])
    assert err.splitlines() == ["brwsim: interrupted"], err[-2000:]
    assert answered < limit, f"answered SIGINT after {answered:.2f} s"
    return out


LONG_RUN = ["run", "--family", SMALL, "--budgets", "1..4096", "--iterations", "10000000",
            "--quiet", "--out", "r.nc"]


@pytest.fixture(scope="module")
def warm():
    """The kernels of :data:`LONG_RUN` compiled and cached before any case is timed."""
    res = subprocess.run([sys.executable, "-m", "brwsim.cli", *LONG_RUN[:6], "4", "--quiet",
                          "--no-out"], env=ENV, capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stderr[-2000:]


@pytest.mark.parametrize("delay", [0.3, 0.6, 1.0])
def test_sigint_during_start_up(tmp_path, delay):
    _interrupt_after(LONG_RUN, tmp_path, delay)
    assert listing(tmp_path) == []


@pytest.mark.slow
@pytest.mark.parametrize("delay", [1.5, 2.5, 4.0, 6.0])
def test_sigint_while_kernels_load_and_run(tmp_path, warm, delay):
    """From the cached kernels' load to the simulation itself: nothing written."""
    _interrupt_after(LONG_RUN, tmp_path, delay)
    assert listing(tmp_path) == []


#: Trees of 2 million nodes of a flat law, one kernel call of seconds each: four of them
#: keep the command running past the last signal (two ended in 11.6 s here).
HUGE_TREE = ["run", "--family", "dirichlet(alpha=1, vocab=1000)", "--budgets", "2097152",
             "--iterations", "4", "--quiet", "--out", "r.nc"]


@pytest.mark.slow
def test_sigint_inside_one_long_kernel_call(tmp_path):
    """The kernel call of one huge tree lasts seconds; SIGINT in its middle is answered
    within 1 s (the call runs in a helper thread, the main thread waits in short joins)."""
    res = subprocess.run([sys.executable, "-m", "brwsim.cli", *HUGE_TREE[:4], "64",
                          "--iterations", "2", "--quiet", "--no-out"], env=ENV,
                         capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stderr[-2000:]      # its kernels compiled and cached
    for delay in (8.0, 12.0):                        # start-up takes a few seconds
        _interrupt_after(HUGE_TREE, tmp_path, delay)
        assert listing(tmp_path) == []


def test_answering_runs_the_call_and_raises_its_errors(monkeypatch):
    import signal as sig

    from brwsim import interrupt
    from brwsim.interrupt import answering

    monkeypatch.setattr(interrupt, "_is_command", lambda: True)   # as in the command
    old = sig.signal(sig.SIGINT, interrupt.raise_interrupt)
    try:
        assert answering(divmod, 7, 2) == (3, 1)                  # through the helper thread
        with pytest.raises(ZeroDivisionError):
            answering(divmod, 1, 0)
    finally:
        sig.signal(sig.SIGINT, old)
    assert answering(divmod, 9, 4) == (2, 1)                      # a plain call
    monkeypatch.setattr(interrupt, "_is_command", lambda: False)  # a program: plain calls
    threads = []
    assert answering(lambda: threads.append(__import__("threading").current_thread())) is None
    assert threads == [__import__("threading").main_thread()]


def test_an_interrupt_c_code_dropped_is_delivered_again(monkeypatch, capsys):
    """C code that cannot raise drops a KeyboardInterrupt raised inside it, through
    ``sys.unraisablehook`` (a ctypes callback: llvmlite's object-cache notification while
    numba loads a kernel; a Cython function without an exception clause: netCDF4's error
    check while a sweep reads its shards). Inside the command nothing is printed, the
    interrupt comes again a moment later, outside that code, and a kernel call started
    after it raises it too."""
    import ctypes
    import signal as sig
    import threading

    from brwsim import interrupt
    from brwsim.interrupt import answering, command_handlers

    monkeypatch.setattr(interrupt, "_is_command", lambda: True)   # as in the command
    old = sig.getsignal(sig.SIGINT)
    dropping = ctypes.CFUNCTYPE(None)(lambda: (os.kill(os.getpid(), sig.SIGINT), time.sleep(5)))
    try:
        with command_handlers():
            with pytest.raises(KeyboardInterrupt):
                dropping()                          # dropped inside, raised after it
                time.sleep(5)
            assert "Exception ignored" not in capsys.readouterr().err
            assert interrupt._RECEIVED.is_set()                  # a kernel call after it
            with pytest.raises(KeyboardInterrupt):
                answering(time.sleep, 5)
        with command_handlers():                                  # a new command: cleared
            assert answering(divmod, 7, 2) == (3, 1)
            threading.Timer(0.2, interrupt._RECEIVED.set).start()  # dropped twice, mid-call
            start = time.perf_counter()
            with pytest.raises(KeyboardInterrupt):
                answering(time.sleep, 5)
            assert time.perf_counter() - start < 1.0
    finally:
        sig.signal(sig.SIGINT, old)


def test_an_interrupt_a_library_swallowed_leaves_no_file(tmp_path):
    """A library that catches KeyboardInterrupt (netCDF4's bare ``except:`` around its
    attribute lookups, hit while a sweep reads its shards) does not let the command go on
    to write a result: the next file's rename raises the interrupt instead."""
    import signal as sig

    from brwsim import interrupt
    from brwsim.interrupt import command_handlers
    from brwsim.io import atomic_path

    old = sig.getsignal(sig.SIGINT)
    try:
        with command_handlers():
            try:
                os.kill(os.getpid(), sig.SIGINT)
                time.sleep(5)
            except:  # noqa: E722 - as the library does
                pass
            with pytest.raises(KeyboardInterrupt):
                with atomic_path(tmp_path / "result.nc") as tmp:
                    tmp.write_text("a finished result")
            assert list(tmp_path.iterdir()) == []
        assert not interrupt._RECEIVED.is_set()                 # cleared on leaving
    finally:
        sig.signal(sig.SIGINT, old)


def test_a_command_that_finishes_after_a_swallowed_interrupt_ends_interrupted():
    program = ("import os, signal, sys, time\n"
               "import brwsim.cli.main\n"
               "m = sys.modules['brwsim.cli.main']\n"
               "def work(argv, guard):\n"
               "    try:\n"
               "        os.kill(os.getpid(), signal.SIGINT); time.sleep(5)\n"
               "    except:\n"
               "        pass\n"
               "    print('finished'); return 0\n"
               "m._main = work\n"
               "sys.argv = ['brwsim', '--version']\n"
               "m.main()\n")
    res = subprocess.run([sys.executable, "-c", program], env=ENV, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 130, res.stderr
    assert res.stdout.splitlines() == ["finished"]
    assert res.stderr.splitlines() == ["brwsim: interrupted"]


#: A program that runs the command's ``main`` with a thread and an exit function of its own.
_ENDING = ("import atexit, sys, threading, time\n"
           "atexit.register(lambda: print('atexit ran'))\n"
           "threading.Thread(target=lambda: (time.sleep(0.3), print('thread done'))).start()\n"
           "sys.argv = ['brwsim', *sys.argv[1:]]\n"
           "from brwsim.cli.main import main\n"
           "main()\n"
           "print('not reached')\n")


def test_the_command_ends_after_the_threads_and_exit_functions_with_its_status():
    """A normal end skips the interpreter's teardown (``os._exit``) but not what an exit
    does first: other threads joined, ``atexit``'s functions run, output flushed, the
    command's status kept."""
    from brwsim import __version__

    ok = subprocess.run([sys.executable, "-c", _ENDING, "--version"], env=ENV,
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines() == [f"brwsim {__version__}", "thread done", "atexit ran"]
    bad = subprocess.run([sys.executable, "-c", _ENDING, "no-such-command"], env=ENV,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stdout.splitlines() == ["thread done", "atexit ran"]
    assert len(bad.stderr.splitlines()) == 1 and "no-such-command" in bad.stderr


def test_an_interrupt_wrapped_by_numba_is_recognised():
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise SystemError("CPUDispatcher(...) returned a result with an exception set")
    except SystemError as exc:
        assert is_interrupt(exc)
    assert not is_interrupt(ValueError("x"))


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_sweep_workers_end_with_a_killed_driver(tmp_path, warm):
    toml = tmp_path / "s.toml"
    toml.write_text('[sweep]\niterations = 4000000\nchunk = 1000000\nbudgets = [1, 4096]\n'
                    'prediction = "none"\n[[sweep.family]]\nname = "zipf"\nvocab = 10\n'
                    's = [1.1, 1.2]\n')
    child = _start(["sweep", toml, "--out", tmp_path / "sw", "--jobs", "2", "--quiet"], tmp_path)
    workers: list[int] = []
    deadline = time.time() + 120
    while time.time() < deadline and len(workers) < 2:
        time.sleep(0.5)
        workers = [p for p in _children(child.pid)
                   if "loky" in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")]
    assert len(workers) >= 2, "no loky workers started"
    time.sleep(3)                                       # the workers are inside their tasks
    child.kill()
    child.wait()
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(p) for p in workers):
        time.sleep(0.2)
    alive = [p for p in workers if _alive(p)]
    for p in alive:
        os.kill(p, signal.SIGKILL)
    assert not alive, f"workers {alive} outlived their driver"


@pytest.mark.slow
def test_sigint_during_a_sweep_leaves_no_exception_lines(tmp_path, warm):
    toml = tmp_path / "s.toml"
    toml.write_text('[sweep]\niterations = 4000000\nchunk = 1000000\nbudgets = [1, 4096]\n'
                    'prediction = "none"\n[[sweep.family]]\nname = "zipf"\nvocab = 10\n'
                    's = [1.1, 1.2]\n')
    child = _start(["sweep", toml, "--out", tmp_path / "sw", "--jobs", "2", "--quiet"], tmp_path)
    time.sleep(12)
    assert child.poll() is None
    for pid in [child.pid, *_children(child.pid)]:      # as a terminal's Ctrl-C: everyone
        try:
            os.kill(pid, signal.SIGINT)
        except ProcessLookupError:
            pass
    out, err = child.communicate(timeout=60)
    assert child.returncode == 130, err[-2000:]
    assert err.splitlines() == ["brwsim: interrupted"], err[-3000:]
    assert not (tmp_path / "sw" / "results.nc").exists()


@pytest.mark.slow
@pytest.mark.parametrize("delay", [2.5, 4.0])
def test_sigint_while_a_resumed_sweep_reads_and_merges_its_shards(tmp_path, warm, delay):
    """Every shard present: the command reads them all and merges; interrupted there it
    leaves no results.nc and no temporary file, and a rerun still merges them all."""
    toml = tmp_path / "s.toml"
    toml.write_text('[sweep]\niterations = 2\nchunk = 1\nbudgets = [1, 2]\nprediction = "none"\n'
                    '[[sweep.family]]\nname = "zipf"\nvocab = 10\ns = ['
                    + ", ".join(f"{1.01 + i / 100:.2f}" for i in range(400)) + "]\n")
    argv = ["sweep", toml, "--out", tmp_path / "sw", "--quiet"]
    res = subprocess.run([sys.executable, "-m", "brwsim.cli", *map(str, argv)], env=ENV,
                         capture_output=True, text=True, timeout=1200, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    (tmp_path / "sw" / "results.nc").unlink()
    shards = listing(tmp_path / "sw")
    _interrupt_after(argv, tmp_path, delay)
    assert listing(tmp_path / "sw") == shards            # no results.nc, no temporary
    res = subprocess.run([sys.executable, "-m", "brwsim.cli", *map(str, argv)], env=ENV,
                         capture_output=True, text=True, timeout=1200, cwd=tmp_path)
    assert res.returncode == 0 and "0 run, 1200 reused" in res.stdout, res.stdout + res.stderr
