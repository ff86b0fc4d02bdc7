"""Exact ties of any size in the tree kernels (issue 40, item 1).

Laws whose children tie exactly (a flat softmax, a uniform ``fixed``, a network at an
infinite temperature or with all-zero weights, a depth-drifting lattice, a vast Dirichlet
tail) once sent the threshold passes into an endless loop: more nodes tied at the cut
than the buffers held, and a pass that held P_max nodes only in its tie margin never
moved its threshold. Each case runs in a child process beside an untied law of the same
kernel group: the child first compiles (or loads) the kernels on the untied law, says so,
then times both. A hang fails the test after :data:`LIMIT` seconds instead of blocking the
suite, and the tied law must run at about the speed of the untied one. Where the trees
are flat at the top, E[X | T] has an exact value: P / V for P <= V children of V.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from tinyckpt import write_gpt2  # noqa: E402

#: Seconds a tied run may take once the kernels are compiled (a hang fails after this).
LIMIT = 60.0
#: Seconds allowed for the child's start-up and compile (a cold numba cache).
COMPILE_LIMIT = 1800.0
#: The tied law may take this many times the untied one's time, plus SLACK seconds.
RATIO = 10.0
SLACK = 2.0

CHILD = r"""
import json, sys, time
import numpy as np
import brwsim
from brwsim import engine

tied, untied, budgets, iterations = json.loads(sys.argv[1])
b = engine.validate_budgets(budgets)

def run(text):
    spec = brwsim.parse_family(text).spec()
    t0 = time.perf_counter()
    out = engine.run_iterations(spec, b, engine.seed_key(0), 0, iterations)
    return time.perf_counter() - t0, out

run(untied)                                  # compile or load the kernel group
print("warm", flush=True)
t_untied = min(run(untied)[0] for _ in range(2))
t_tied, (acc, exp, dep, visited, _) = run(tied)
print(json.dumps({"tied": t_tied, "untied": t_untied, "accepted": acc.tolist(),
                  "expected": exp.tolist(), "depth": dep.tolist(), "visited": visited}),
      flush=True)
"""


def _lines(stream, q):
    for line in stream:
        q.put(line)
    q.put(None)


def run_tied(tied: str, untied: str, budgets: list[int], iterations: int) -> dict:
    """Time ``tied`` against ``untied`` in a child; fail if the tied run outlasts LIMIT."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BRWSIM_COMPILE_NOTICE": "0"}
    proc = subprocess.Popen([sys.executable, "-c", CHILD,
                             json.dumps([tied, untied, budgets, iterations])],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    q: queue.Queue = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, q), daemon=True).start()
    try:
        first = q.get(timeout=COMPILE_LIMIT)
        assert first == "warm\n", (first, proc.stderr.read()[-3000:] if first is None else "")
        try:
            result = q.get(timeout=LIMIT + 3 * SLACK)
        except queue.Empty:
            pytest.fail(f"{tied} did not finish within {LIMIT:.0f} s (a hang on ties)")
        assert result is not None, proc.stderr.read()[-3000:]
        out = json.loads(result)
    finally:
        proc.kill()
        proc.wait()
    print(f"{tied}: {out['tied']:.3f} s, {untied}: {out['untied']:.3f} s")
    assert out["tied"] <= RATIO * out["untied"] + SLACK, out
    return out


def _flat_top(out: dict, budgets: list[int], vocab: int) -> None:
    """P <= V nodes of a flat law are P children of the root: E[X | T] = P / V, depth 1."""
    exp = np.array(out["expected"])
    for i, p in enumerate(budgets):
        if p <= vocab:
            np.testing.assert_allclose(exp[i], p / vocab, rtol=1e-12)
            assert set(out["depth"][i]) == {1}


def test_softmaxnormal_of_zero_sigma():
    budgets = [1, 4]
    out = run_tied("softmaxnormal(sigma=0, vocab=200)", "softmaxnormal(sigma=1, vocab=200)",
                   budgets, 20)
    _flat_top(out, budgets, 200)


def test_uniform_fixed_over_80_tokens_at_p1():
    budgets = [1]
    flat = ", ".join(["0.0125"] * 80)
    rng = np.random.default_rng(0)
    w = rng.random(80)
    varied = ", ".join(repr(float(x)) for x in w / w.sum())
    out = run_tied(f"fixed(probs=[{flat}])", f"fixed(probs=[{varied}])", budgets, 20)
    _flat_top(out, budgets, 80)


def test_fixed_lattice_at_large_budgets():
    """Two tokens of 1/2: every level is one tie of 2**d nodes, cut at P = 65536 + 5."""
    out = run_tied("fixed(probs=[0.5, 0.5])", "fixed(probs=[0.6, 0.4])", [1, 65541], 3)
    np.testing.assert_allclose(np.array(out["expected"])[0], 0.5, rtol=1e-12)


def test_charlstm_at_an_infinite_temperature():
    budgets = [1, 4]
    out = run_tied("charlstm(temperature=1e308)", "charlstm(temperature=1.0)", budgets, 4)
    vocab = round(1 / out["expected"][0][0])
    assert vocab >= 40                      # the shipped character model's tokens
    _flat_top(out, budgets, vocab)


def test_transformer_at_an_infinite_temperature():
    budgets = [1, 4]
    out = run_tied("transformer(path=target, temperature=1e308)", "transformer(path=target)",
                   budgets, 4)
    vocab = round(1 / out["expected"][0][0])
    assert vocab >= 256                     # the shipped byte-level model's tokens
    _flat_top(out, budgets, vocab)


def test_transformer_of_all_zero_weights(tmp_path):
    write_gpt2(tmp_path / "zero", seed=1, scale=0.0)
    write_gpt2(tmp_path / "ck", seed=1)
    budgets = [1, 4]
    out = run_tied(f"transformer(path={tmp_path / 'zero'})", f"transformer(path={tmp_path / 'ck'})",
                   budgets, 4)
    _flat_top(out, budgets, 257)


def test_depthdrift_lattice_up_to_65536():
    """Uniform laws at every depth: levels of exact ties, cut anywhere up to P = 65536."""
    budgets = [1, 5, 1000, 65536]
    out = run_tied("depthdrift(families=[uniform(k=3), uniform(k=2)])",
                   "depthdrift(families=[zipf(s=1.1, vocab=3), zipf(s=1.3, vocab=2)])", budgets, 3)
    _flat_top(out, budgets[:2], 3)


def test_dirichlet_over_2_40_tokens():
    """2**40 children per node, billions of them within a hair of each other."""
    budgets = [1, 64, 4096]
    run_tied("dirichlet(alpha=0.05, vocab=1099511627776)", "dirichlet(alpha=0.05, vocab=32000)",
             budgets, 20)


def test_conditioned_bound_refuses_a_law_too_wide_to_expand():
    """The small-P bound of dirichlet(0.05, 2**40) once drew billions of children per node
    (out of memory); it is refused by the frontier it would need, within seconds."""
    import brwsim
    from brwsim import UserError
    from brwsim.theory.conditioned import small_budget_bound

    fam = brwsim.parse_family("dirichlet(alpha=0.05, vocab=1099511627776)")
    with pytest.raises(UserError, match="children within reach of a node"):
        small_budget_bound(fam, [1, 64, 4096])
