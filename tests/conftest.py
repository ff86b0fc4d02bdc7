"""Shared test helpers: the family table the suite is parametrised over."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from brwsim import Dirichlet, EntropyTarget, parse_family
from brwsim.families.base import REGISTRY

#: One instance of every registered i.i.d. family (its declared ``example``), plus variants
#: that exercise other code paths (lazy large vocabularies, a geometric entropy target).
FAMILY_TABLE = {
    **{name: parse_family(cls.example) for name, cls in sorted(REGISTRY.items())
       if cls.iid and cls.example and cls.__module__.startswith("brwsim.")},
    "dirichlet_lazy": Dirichlet(0.3, 2000),
    "entropytarget_geometric": EntropyTarget([0.3, 1.0, 2.0]),
}


@pytest.fixture(params=sorted(FAMILY_TABLE), ids=sorted(FAMILY_TABLE))
def family(request):
    """Each family of :data:`FAMILY_TABLE` in turn."""
    return FAMILY_TABLE[request.param]


def mean_se(x: np.ndarray) -> tuple[float, float]:
    """Sample mean and its standard error."""
    x = np.asarray(x, dtype=np.float64)
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(x.size))


#: Tests that run whole experiments or documents in fresh processes: they run last, so that
#: the numba kernels they need are already in the cache the unit tests filled (a cold cache
#: makes each worker process of an experiment compile the same kernels side by side).
RUN_LAST = ("tests/integration/test_notebooks.py::test_notebook_runs_top_to_bottom",
            "tests/integration/test_readme.py")


def pytest_collection_modifyitems(config, items):
    """Move the :data:`RUN_LAST` tests to the end, keeping the order within each group."""
    last = [it for it in items if it.nodeid.startswith(RUN_LAST)]
    if last:
        first = [it for it in items if not it.nodeid.startswith(RUN_LAST)]
        items[:] = first + last


#: Scripts that compile the largest kernel groups: the optimal tree and the forest, for
#: closed, plain, contextual (n-gram) and neural kinds (four specialisations each,
#: :func:`brwsim.kernels.dist.kinds_dtype`; the neural one with the networks' set-up).
#: Each compiles in a thread, as the ``brwsim`` command does (``interrupt.answering``):
#: from a script's main thread CPython 3.11 frees and maps a frame-stack chunk each time
#: numba's recursion crosses its boundary (python/cpython#142183), and the plain group took
#: 96.8 s (31 s of it system time) against 64.6 s (4.8 s) in a thread.
WARM_UP = tuple(
    "import sys, threading; import brwsim as b\n"
    f"def work():\n    f = b.parse_family({family!r})\n"
    "    b.simulate(f, [1, 4], 2); b.simulate(f, [2, 4], 2, batch=2)\n"
    "    done.append(True)\n"
    "done = []; t = threading.Thread(target=work); t.start(); t.join(); sys.exit(0 if done else 1)"
    for family in ("zipf(s=1.1, vocab=50)", "dirichlet(alpha=0.05, vocab=200)",
                   "ngram(corpus=prose, order=3)", "charlstm(carry=3)"))


def warm_up(scripts, write, heartbeat: float = 30.0) -> list[int]:
    """Run ``scripts`` (Python source) side by side, saying what happens through ``write``
    (one line per call): a line at the start, one every ``heartbeat`` seconds while any
    runs, one as each ends (with its time and status). Their stderr (the compile notices)
    goes to this process's stderr. Returns their exit statuses."""
    import time

    start = time.perf_counter()
    write(f"brwsim tests: compiling {len(scripts)} numba kernel groups into the cache before "
          "the workers start (a minute or more when the cache is cold; seconds when warm)")
    # (each compiles in a thread, where brwsim.beside forks no helper of its own: they
    # already run side by side)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL)
             for code in scripts]
    codes: list[int | None] = [None] * len(procs)
    last = start
    while any(c is None for c in codes):
        for i, proc in enumerate(procs):
            if codes[i] is None and proc.poll() is not None:
                codes[i] = proc.returncode
                write(f"brwsim tests: kernel group {i + 1}/{len(procs)} ready after "
                      f"{time.perf_counter() - start:.0f} s (status {proc.returncode})")
        now = time.perf_counter()
        if now - last >= heartbeat and any(c is None for c in codes):
            last = now
            write(f"brwsim tests: still compiling ({now - start:.0f} s, "
                  f"{sum(c is None for c in codes)} groups left)")
        time.sleep(0.1)
    return [int(c) for c in codes]


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    """With ``-n`` (pytest-xdist), compile the :data:`WARM_UP` groups into the numba cache
    once, side by side, before the workers start: otherwise every worker compiles each of
    them itself at the same time. Progress is printed (:func:`warm_up`); failures are left
    to the tests."""
    config = session.config
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        reporter = config.pluginmanager.get_plugin("terminalreporter")

        def write(line: str) -> None:
            if reporter is not None:
                reporter.write_line(line)
            else:
                print(line, file=sys.stderr, flush=True)

        warm_up(WARM_UP, write)
