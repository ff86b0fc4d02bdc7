"""A thread's tree workspace is kept between calls (``engine._workspace``) without changing results.

Runs reuse the memory of their first call; what a workspace learnt (thresholds' aim, ties)
is reset by every call, so results and even the passes (nodes visited) are those of a
fresh workspace, also across threads.
"""

from __future__ import annotations

import threading

import numpy as np

from brwsim import Dirichlet, Uniform, Zipf, engine

BUDGETS = engine.validate_budgets([1, 30, 300])


def _run(family, first=0, count=6):
    spec = family.spec()
    acc, exp, dep, visited, _ = engine.run_iterations(spec, BUDGETS, engine.seed_key(4), first, count)
    return acc, exp, dep, visited


def test_a_thread_reuses_its_workspace():
    head_cap = Zipf(1.5, 1000, spread=0.4).spec().head_cap
    ws = engine._workspace(300, head_cap)
    assert engine._workspace(300, head_cap) is ws      # a run's next chunk
    assert engine._workspace(301, head_cap) is not ws  # another P_max: a new one


def test_results_and_passes_do_not_depend_on_what_ran_before():
    zipf = Zipf(1.5, 1000, spread=0.4)
    first = _run(zipf)
    _run(Uniform(3))                # a lattice: its workspace learns exact ties
    _run(Dirichlet(0.05, 200))
    second = _run(zipf)
    for x, y in zip(first[:3], second[:3]):
        np.testing.assert_array_equal(x, y)
    assert first[3] == second[3]    # the same passes: nothing carried over


def test_threads_have_workspaces_of_their_own():
    zipf = Zipf(1.2, 5000, spread=0.3)
    want = [_run(zipf, first=10 * i, count=4) for i in range(4)]
    got = [None] * 4

    def work(i):
        for _ in range(3):
            got[i] = _run(zipf, first=10 * i, count=4)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for w, g in zip(want, got):
        for x, y in zip(w[:3], g[:3]):
            np.testing.assert_array_equal(x, y)
