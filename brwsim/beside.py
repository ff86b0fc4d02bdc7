"""Compiling beside a run: a second process fills numba's cache while the first works.

A run on a cold cache compiles its tree kernel (the longest wait of a first run) and then,
after the trees, the theory's kernels (the small-P bound's sampled trees, the spine law's
quadratures). :func:`start` forks a process that compiles, while this one compiles and
grows the trees, what the caller gives it: for ``simulate``, the kernels the tree kernel
calls first and last (the family's node sampler, the scoring after a pass) and the
theory's, by running each once for its compiled code only (the numbers are thrown away).
:meth:`Beside.wait` then waits for it, and this process loads that work from the cache
instead of compiling it. A kernel both reach is compiled by whichever gets there first
and loaded by the other; numba writes each cache file under a temporary name and renames
it, and its index is saved under a lock (:func:`brwsim.kernels._locked`), so neither reads
a half-written file or loses the other's entry. Nothing of the run's results passes
between them.

It forks only where that is safe and pays: a cold cache (the tree kernel never compiled
into it, :func:`cold`), a fork start method, no other thread in this process, at least two
usable cores, ``BRWSIM_BESIDE`` not ``0``, and no fork before in this process (the first
one compiled what a second would). The child ignores SIGINT (the run answers
it), is killed with its parent (Linux), prints nothing, and exits without running this
process's exit handlers; whatever it fails at, the run computes (and reports) itself.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from brwsim.kernels import COMPILE_NOTICE

#: Longest wait, in seconds, for the child: one still busy then is killed, and the run
#: compiles what it lacks itself (a child only compiles, so it never needs this long).
WAIT_LIMIT = 600.0

_FORKED = False         # a helper was forked from this process (never a second)


def cold(dispatcher: Any) -> bool:
    """Whether numba's cache holds no machine code of ``dispatcher`` (no index file): no run
    has compiled it into this cache yet, for any signature."""
    path = getattr(getattr(getattr(dispatcher, "_cache", None), "_cache_file", None),
                   "_index_path", None)
    return path is not None and not os.path.exists(path)


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (``PR_SET_PDEATHSIG``)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))
    except (OSError, AttributeError):    # another system: the child ends when its work does
        pass


class Beside:
    """A forked process running compile work beside this one (:func:`start`)."""

    def __init__(self, process: Any) -> None:
        self.process = process

    def wait(self, limit: float = WAIT_LIMIT) -> bool:
        """Wait (at most ``limit`` seconds) for the child; True if its work completed."""
        self.process.join(limit)
        if self.process.is_alive():
            self.stop()
        return self.process.exitcode == 0

    def stop(self) -> None:
        """End the child now (the run failed or was interrupted: nothing waits for it)."""
        self.process.kill()
        self.process.join()


def _child(work: Callable[..., Any], args: tuple) -> None:
    """The child's body: quiet, detached from SIGINT, ``work(*args)``, then exit at once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    code = 1
    try:
        devnull = open(os.devnull, "w")
        sys.stdout = sys.stderr = devnull
        COMPILE_NOTICE.stream = devnull
        work(*args)
        code = 0
    except BaseException:                # noqa: BLE001 - the run does this work itself
        pass
    os._exit(code)                       # (no exit handlers, no flush of inherited buffers)


def start(work: Callable[..., Any], *args: Any) -> Beside | None:
    """Fork a process that runs ``work(*args)`` for the kernels it compiles, where that is
    safe and pays (see the module's docstring; the caller decides whether the cache is
    cold); None where it is not."""
    import multiprocessing

    global _FORKED
    if _FORKED or os.environ.get("BRWSIM_BESIDE", "1") == "0" or _usable_cores() < 2:
        return None
    if "fork" not in multiprocessing.get_all_start_methods() or threading.active_count() > 1:
        return None
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()               # (a child must not inherit unwritten output)
        except (AttributeError, OSError, ValueError):
            pass
    process = multiprocessing.get_context("fork").Process(target=_child, args=(work, args),
                                                          daemon=True)
    process.start()
    _FORKED = True
    return Beside(process)


@contextmanager
def compiling(work: Callable[..., Any], *args: Any, when: bool = True) -> Iterator[Beside | None]:
    """``work(*args)`` in a process beside the block (:func:`start`, if ``when``): waited
    for when the block ends, ended at once when it raises (an error, an interrupt)."""
    helper = start(work, *args) if when else None
    try:
        yield helper
    except BaseException:
        if helper is not None:
            helper.stop()
        raise
    if helper is not None:
        helper.wait()
