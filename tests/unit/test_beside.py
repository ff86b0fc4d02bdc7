"""A process beside a cold run (brwsim.beside): what it runs, that it stays quiet and
apart, and that it compiles the tree's callees with the tree kernel's own types.

Each case runs in a fresh interpreter: pytest-xdist's workers hold other threads, where
:func:`brwsim.beside.start` (rightly) declines to fork.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from brwsim import beside
from brwsim.kernels.tree import simulate_chunk


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **env})


def test_child_runs_the_work_quietly_and_reports_its_status(tmp_path):
    code = """
        import json, os, sys
        from brwsim import beside

        def work(path, fail):
            print("from the child")                 # must not reach the parent's streams
            print("from the child", file=sys.stderr)
            if fail:
                raise ValueError("failed")
            with open(path, "w") as f:
                f.write(str(os.getpid()))

        helper = beside.start(work, sys.argv[1], sys.argv[2] == "fail")
        again = beside.start(work, sys.argv[1] + ".2", False)   # one helper per process
        print(json.dumps([helper.wait(), again is None, os.getpid()]))
    """
    runs = [subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(tmp_path / name), how],
                           capture_output=True, text=True, timeout=300)
            for name, how in (("done", "ok"), ("never", "fail"))]
    for res in runs:
        assert res.returncode == 0, res.stderr
        assert "from the child" not in res.stdout + res.stderr
    (ok, once, parent), (bad, _, _) = (json.loads(r.stdout) for r in runs)
    assert (ok, once, bad) == (True, True, False)
    assert int((tmp_path / "done").read_text()) != parent      # it ran in another process
    assert not (tmp_path / "never").exists() and not (tmp_path / "done.2").exists()


def test_no_fork_when_switched_off_or_threads_run():
    res = _run("""
        import threading, time
        from brwsim import beside

        off = beside.start(print, "x")
        print(off is None)
    """, BRWSIM_BESIDE="0")
    assert res.stdout.split() == ["True"], res.stderr
    res = _run("""
        import threading
        from brwsim import beside

        gate = threading.Event()
        t = threading.Thread(target=gate.wait)
        t.start()
        print(beside.start(print, "x") is None)
        gate.set()
    """)
    assert res.stdout.split() == ["True"], res.stderr


def test_cold_reads_the_cache_index(tmp_path):
    assert beside.cold(simulate_chunk) == (not os.path.exists(
        simulate_chunk._cache._cache_file._index_path))
    assert not beside.cold(object())            # nothing cached to ask about: never cold


@pytest.mark.slow
def test_beside_compiles_with_the_tree_kernels_types(tmp_path):
    """The node sampler (through node_logprobs) and the tree's pass callees compiled first
    are the ones the tree kernel then calls: on an empty cache (where the tree kernel
    compiles its callees rather than loading itself whole), each kernel holds one
    signature after a run (a mismatch would add a second). About a minute."""
    res = _run("""
        import json
        from brwsim.engine import (_workspace, compile_pass_callees, run_iterations, seed_key,
                                   validate_budgets)
        from brwsim.environment import node_logprobs
        from brwsim.families import parse_family
        from brwsim.kernels.dist import dist_init, dist_next
        from brwsim.kernels.spec import Out
        from brwsim.kernels.tree import pass_callees
        from brwsim.theory import check_family

        spec = check_family(parse_family("mixture(families=[peaked(a=4.0, b=0.5, s=1.1, vocab=300), "
                                         "zipf(s=1.1, vocab=300, spread=0.3)], weights=[0.75, 0.25])"))
        b = validate_budgets([1, 4, 16])
        node_logprobs(spec, 0, 0, (0,))
        compile_pass_callees(spec, b)
        callees = pass_callees(_workspace(16, spec.head_cap), spec.head_cap, b, Out.new(3, 1))
        kernels = [dist_init, dist_next] + [k for k, _ in callees]
        before = [len(k.signatures) for k in kernels]
        run_iterations(spec, b, seed_key(0), 0, 20)
        print(json.dumps([before, [len(k.signatures) for k in kernels]]))
    """, BRWSIM_COMPILE_NOTICE="0", NUMBA_CACHE_DIR=str(tmp_path))
    assert res.returncode == 0, res.stderr
    before, after = json.loads(res.stdout)
    assert before == [1] * 6 and after == before
