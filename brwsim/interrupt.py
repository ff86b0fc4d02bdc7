"""Ctrl-C and the death of a driver: how every ``brwsim`` process ends when interrupted.

* The command (:func:`brwsim.cli.main`) answers SIGINT with ``brwsim: interrupted`` and
  exit status 130. Before :func:`~brwsim.cli.main` runs (the imports of start-up) and
  after it returns (the interpreter's exit, a worker pool's shutdown) no file is being
  written, so :func:`install_startup_handler`'s handler prints that line and ends the
  process at once; inside it a ``KeyboardInterrupt`` unwinds the call, which removes every
  temporary file (:func:`brwsim.io.atomic_path`), and :func:`is_interrupt` recognises one
  that a library wrapped in another exception (numba's dispatcher turns an interrupt while
  it loads a cached kernel into ``SystemError``).
* An interrupt can be lost on the way: C code that cannot raise drops it (a ctypes
  callback, a Cython function without an exception clause) and a library can catch it (a
  bare ``except:``). The command's handler remembers every SIGINT; a dropped one is
  delivered again a moment later, and :func:`check_interrupted` raises a caught one before
  any file is renamed into place, between a sweep's shards, around kernel calls and when
  the command ends, so an interrupted command never ends with status 0 or a result.
* A compiled kernel does not return to the interpreter until it is done, so a signal
  handler cannot run inside one long call (a huge tree, a policy's run). Inside the
  command, :func:`answering` runs such a call in a helper thread (the kernels release the
  GIL) while the main thread waits in short joins, where its handler runs at once.
* A sweep's worker processes (:func:`worker_guard`) ignore SIGINT (the driver, which
  receives it too from a terminal, ends the sweep) and end themselves when the driver
  process no longer exists (after ``kill -9`` of the driver), polling every
  :data:`POLL_SECONDS`.

This module imports nothing heavy: it runs first, before numpy and numba are loaded.
"""

from __future__ import annotations

import _thread
import atexit
import os
import signal
import sys
import threading
from typing import Any

__all__ = ["MESSAGE", "EXIT_INTERRUPTED", "POLL_SECONDS", "install_startup_handler",
           "is_interrupt", "driver_tag", "worker_guard", "command_handlers", "raise_interrupt",
           "check_interrupted", "answering"]

#: The one line an interrupted command prints on stderr.
MESSAGE = "brwsim: interrupted"
#: Exit status of an interrupted command (128 + SIGINT).
EXIT_INTERRUPTED = 130
#: How often a sweep worker checks that its driver is alive.
POLL_SECONDS = 0.25
#: How long the main thread waits at a time for a call in :func:`answering`.
JOIN_SECONDS = 0.05


def _exit_now(signum: int, frame: Any) -> None:
    """SIGINT outside :func:`brwsim.cli.main`: the line, status 130, no clean-up to do."""
    try:
        os.write(2, (MESSAGE + "\n").encode())
    finally:
        os._exit(EXIT_INTERRUPTED)


def _is_command() -> bool:
    """Whether this process is the ``brwsim`` command (the console script, or
    ``python -m brwsim.cli``), not a program importing brwsim as a library."""
    argv0 = os.path.basename(sys.argv[0]) if sys.argv else ""
    if argv0 in ("brwsim", "brwsim.exe"):
        return True
    orig = list(getattr(sys, "orig_argv", ()))
    return "-m" in orig[:-1] and orig[orig.index("-m") + 1] in ("brwsim", "brwsim.cli")


def install_startup_handler() -> None:
    """In the ``brwsim`` command's main thread, answer SIGINT during start-up at once."""
    if _is_command() and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _exit_now)
        # a parent that blocked SIGINT (a thread pool's mask, inherited across exec) would
        # leave Ctrl-C pending until exit: the command takes it
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


#: Set by :func:`raise_interrupt`: the command received SIGINT. C code that cannot raise
#: drops a ``KeyboardInterrupt`` raised inside it (``sys.unraisablehook``; the command's
#: hook delivers it again) and a library may catch it (a bare ``except:``);
#: :func:`check_interrupted` raises it again where the command must not go on.
_RECEIVED = threading.Event()


#: Set while the command's ``sys.unraisablehook`` runs (where an exception is dropped).
_IN_HOOK = threading.Event()
#: How long after C code dropped an interrupt it is delivered again.
REDELIVER_SECONDS = 0.005


def raise_interrupt(signum: int, frame: Any) -> None:
    """The command's SIGINT handler inside :class:`command_handlers`: remember the signal
    (:data:`_RECEIVED`) and raise ``KeyboardInterrupt`` (inside the unraisable hook, where
    it would be dropped, deliver it again a moment later instead)."""
    _RECEIVED.set()
    if _IN_HOOK.is_set():
        _deliver_again()
        return
    raise KeyboardInterrupt


def check_interrupted() -> None:
    """Raise ``KeyboardInterrupt`` if the command received SIGINT that did not end it: a
    library caught the ``KeyboardInterrupt`` (a bare ``except:``, as netCDF4 has around
    its attribute lookups) or C code dropped it. Called before a file is renamed into place
    (:func:`brwsim.io.atomic_path`), after each shard file read
    (:func:`brwsim.sweep.shardfile.read_shard_file`) and around kernel calls
    (:func:`answering`), so an interrupted command leaves no result;
    :func:`brwsim.cli.main` ends with status 130 after one."""
    if _RECEIVED.is_set():
        raise KeyboardInterrupt


def _deliver_again() -> None:
    """SIGINT once more, :data:`REDELIVER_SECONDS` from now, from a helper thread: its
    handler then runs in the main thread, outside the code that dropped the first."""
    timer = threading.Timer(REDELIVER_SECONDS, _thread.interrupt_main)
    timer.daemon = True
    timer.start()


class command_handlers:
    """Context manager around :func:`brwsim.cli.main`'s work: SIGINT raises
    ``KeyboardInterrupt`` inside (so temporary files are removed as the call unwinds);
    on leaving, the handler of start-up is restored in the command, the caller's own in a
    program or a test that calls ``main`` (only the main thread can set handlers)."""

    def __enter__(self) -> "command_handlers":
        self.old = None
        self.old_hook = sys.unraisablehook
        if threading.current_thread() is threading.main_thread():
            _RECEIVED.clear()
            self.old = signal.getsignal(signal.SIGINT)
            signal.signal(signal.SIGINT, raise_interrupt)
            sys.unraisablehook = self._unraisable
        return self

    def _unraisable(self, unraisable: Any) -> None:
        """``sys.unraisablehook`` inside: an interrupt that C code could not raise (a ctypes
        callback such as llvmlite's object-cache notification, a Cython function without
        an exception clause such as netCDF4's error check, a finaliser) is delivered again,
        without the traceback Python would print: SIGINT comes once more a moment later
        (:func:`_deliver_again`), when the main thread has left that code. Anything else
        goes to the hook before."""
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            _IN_HOOK.set()              # (raise_interrupt already set _RECEIVED)
            try:
                _deliver_again()
            finally:
                _IN_HOOK.clear()
            return
        self.old_hook(unraisable)

    def exit_now(self, code: int = EXIT_INTERRUPTED) -> None:
        """In the command: flush and end the process with status ``code`` at once. Every
        file was closed and every temporary removed before (as the call returned or
        unwound); the interpreter's teardown (freeing every module's objects, 0.1-0.3 s)
        would only delay the answer. After an interrupt nothing else runs; after a normal
        end the other threads that are not daemons are joined and ``atexit``'s functions
        run first, as at a normal exit. Nothing in a program or a test that calls ``main``."""
        if not _is_command():
            return
        if code != EXIT_INTERRUPTED:
            # the interpreter's own first steps of an exit (CPython): the threading module's
            # exit functions (a worker pool's shutdown), the join of every other thread
            # that is no daemon, then atexit's functions
            shutdown = getattr(threading, "_shutdown", None)
            run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
            if (shutdown is None or run_exitfuncs is None
                    or threading.current_thread() is not threading.main_thread()):
                return                          # the usual exit
            shutdown()
            run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        os._exit(code)

    def __exit__(self, *exc: Any) -> None:
        if self.old is not None:
            signal.signal(signal.SIGINT, _exit_now if _is_command() else self.old)
            sys.unraisablehook = self.old_hook
            _RECEIVED.clear()


def is_interrupt(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a ``KeyboardInterrupt`` or was caused by one (its ``__cause__``
    or ``__context__`` chain), as numba's ``SystemError`` of an interrupted cache load."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _host() -> str:
    import hashlib
    import socket

    return hashlib.sha256(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:8]


def driver_tag() -> str:
    """``<host>-<pid>`` of this process, the driver of the tasks it hands to workers."""
    return f"{_host()}-{os.getpid()}"


_GUARDED = threading.Event()


def worker_guard(driver: str) -> None:
    """In a worker process of the driver ``driver`` (:func:`driver_tag`): ignore SIGINT and
    end this process once the driver is gone. Nothing in the driver's own process, nor on
    another host (a remote dask worker's driver is not a local process)."""
    if not driver or _GUARDED.is_set():
        return
    host, _, pid_text = driver.partition("-")
    if host != _host() or not pid_text.isdigit() or int(pid_text) == os.getpid():
        return
    _GUARDED.set()
    pid = int(pid_text)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        event = threading.Event()
        while not event.wait(POLL_SECONDS):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(1)           # the driver is gone: nobody will read this work
            except OSError:           # another user's process: alive
                pass

    threading.Thread(target=watch, name="brwsim-driver-watch", daemon=True).start()


def answering(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, with SIGINT answered while it runs.

    In the ``brwsim`` command's main thread while SIGINT raises ``KeyboardInterrupt``
    (inside :class:`command_handlers`), the call runs in a helper thread and the main thread waits
    in joins of :data:`JOIN_SECONDS`, so the interrupt is raised there within that time
    even while the call sits in one long compiled kernel (which must release the GIL:
    brwsim's kernels are compiled ``nogil``). The interrupted call is abandoned: its
    thread finishes into arrays nobody reads (the command ends the process at once);
    callers must not hand its buffers to another call afterwards. An interrupt that was
    swallowed (:func:`check_interrupted`) is raised here, before or during the call.
    Anywhere else (a
    program or a notebook calling brwsim, where an abandoned call would go on using a
    core; a worker thread or process) it is a plain call.

    Returns
    -------
    Any
        ``fn``'s result; an exception it raised is raised here.
    """
    if (not _is_command() or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not raise_interrupt):
        return fn(*args, **kwargs)
    check_interrupted()                     # an interrupt that was swallowed
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as exc:        # handed to the caller's thread as is
            box["error"] = exc

    worker = threading.Thread(target=target, name="brwsim-kernel-call", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(JOIN_SECONDS)
        check_interrupted()
    if "error" in box:
        raise box.pop("error")
    return box["value"]
