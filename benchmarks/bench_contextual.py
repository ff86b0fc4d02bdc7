"""Tree nodes per second of the context-dependent real-text families, in one run.

``charlstm`` (textgenrnn's pretrained LSTM, one LSTM step per node) next to
``ngram(corpus=prose, order=5)``, both at P = 64 and 1024, on the same machine state.
Two rates per case: *tree nodes/s* counts the P nodes of each optimal tree (as
``bench_core.py``), *visited/s* every node the threshold passes set up (each costs one
distribution, so this is the per-node cost of the family). The machine's load is
printed with them: on a shared machine the ratio between the rows is what to compare.

Usage::

    python benchmarks/bench_contextual.py            # about 1 minute
    python benchmarks/bench_contextual.py --quick    # fewer repetitions
"""

from __future__ import annotations

import argparse
import os
import time

from brwsim import CharLSTM, NGram
from brwsim.simulate import run_iterations, seed_key, validate_budgets


def rates(fam, p: int, seconds: float) -> tuple[float, float, int]:
    """(tree nodes/s, visited nodes/s, trees) after a warm-up tree."""
    spec, budgets, key = fam.spec(), validate_budgets([p]), seed_key(0)
    *_, t = run_iterations(spec, budgets, key, 0, 1)
    trees, visited, first = 0, 0, 1
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        *_, v, t = run_iterations(spec, budgets, key, first, 1, t)
        first += 1
        trees += 1
        visited += v
    dt = time.perf_counter() - t0
    return trees * p / dt, visited / dt, trees


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter timings")
    args = ap.parse_args()
    sec = 2.0 if args.quick else 8.0
    cases = [(NGram("prose", order=5), p) for p in (64, 1024)]
    cases += [(CharLSTM(), p) for p in (64, 1024)]
    print(f"load average before: {os.getloadavg()[0]:.2f} (cores: {os.cpu_count()})")
    print(f"{'family':52s} {'P':>5s} {'tree nodes/s':>13s} {'visited/s':>10s} {'trees':>6s}")
    for fam, p in cases:
        tree, vis, n = rates(fam, p, sec)
        print(f"{fam!r:52s} {p:5d} {tree:13.4g} {vis:10.4g} {n:6d}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
