"""Tree nodes per second: brwsim's kernels against a plain heapq + numpy baseline.

Both run in this process, on the same machine state; the ratio is what to compare
across machines. The baseline (:func:`brwsim.reference.best_first` with
:func:`brwsim.reference.sampling_provider`) pops nodes from ``heapq`` and draws each
popped node's whole distribution with numpy. Its cost per node does not fall with P, so
for large P it is timed on a smaller tree (``baseline P`` column) to keep the run short.

Usage::

    python benchmarks/bench_core.py            # full table (about 2 minutes)
    python benchmarks/bench_core.py --quick    # fewer repetitions
    python benchmarks/bench_core.py --forest   # only the batch (forest) rows

The forest rows time one shared budget P over a batch of B roots
(:func:`brwsim.simulate.run_forest`) next to B = 1 on the same family and P, in this
process: nodes/s counts P nodes per forest; "+ split" also scores the equal split on the
same roots.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time

import numpy as np

from brwsim import Dirichlet, Zipf
from brwsim.reference import best_first, sampling_provider
from brwsim.simulate import run_forest, run_iterations, seed_key, validate_budgets

CASES = [  # family, P, baseline P cap
    (Dirichlet(0.05, 200), 64, 64),
    (Dirichlet(0.05, 200), 1024, 1024),
    (Dirichlet(0.05, 200), 65536, 4096),
    (Dirichlet(0.05, 32000), 256, 256),
    (Zipf(1.5, 128000, spread=0.4), 64, 64),
    (Zipf(1.5, 128000, spread=0.4), 1024, 256),
    (Zipf(1.5, 128000, spread=0.4), 65536, 256),
]


def brwsim_rate(fam, p: int, seconds: float) -> float:
    """Tree nodes (P per tree) per second of the numba kernels, after a warm-up."""
    spec, budgets, key = fam.spec(), validate_budgets([p]), seed_key(0)
    run_iterations(spec, budgets, key, 0, 1)
    trees, t0, first = 0, time.perf_counter(), 1
    count = max(1, int(2e5 // p))
    while time.perf_counter() - t0 < seconds:
        run_iterations(spec, budgets, key, first, count)
        first += count
        trees += count
    return trees * p / (time.perf_counter() - t0)


FOREST_CASES = [  # family, P, batch sizes
    (Dirichlet(0.05, 200), 4096, [1, 64]),
    (Zipf(1.5, 128000, spread=0.4), 4096, [1, 64]),
]


def forest_rate(fam, p: int, batch: int, seconds: float, split: bool) -> float:
    """Forest nodes (P per forest of ``batch`` roots) per second, after a warm-up."""
    spec, budgets, key = fam.spec(), validate_budgets([p]), seed_key(0)
    if batch == 1 and not split:
        return brwsim_rate(fam, p, seconds)
    _, _, _, _, _, _, _, t = run_forest(spec, budgets, key, 0, 1, batch, split=split)
    forests, t0, first = 0, time.perf_counter(), 1
    count = max(1, int(2e5 // p))
    while time.perf_counter() - t0 < seconds:
        t = run_forest(spec, budgets, key, first, count, batch, t, split=split)[-1]
        first += count
        forests += count
    return forests * p / (time.perf_counter() - t0)


def forest_table(seconds: float) -> None:
    """Shared-budget forests at B = 64 next to the single tree (B = 1), same family and P."""
    print(f"\n{'family':40s} {'P':>6s} {'B':>4s} {'nodes/s':>10s} {'+ split':>10s} {'vs B=1':>7s}")
    for fam, p, batches in FOREST_CASES:
        base = None
        for b in batches:
            rate = forest_rate(fam, p, b, seconds, split=False)
            both = forest_rate(fam, p, b, seconds, split=True) if b > 1 else rate
            base = rate if base is None else base
            print(f"{fam!r:40s} {p:6d} {b:4d} {rate:10.4g} {both:10.4g} {rate / base:6.2f}x",
                  flush=True)


def baseline_rate(fam, p: int, seconds: float) -> float:
    """Tree nodes per second of heapq + numpy (at least one tree)."""
    rng = np.random.default_rng(0)
    trees, t0 = 0, time.perf_counter()
    while trees == 0 or time.perf_counter() - t0 < seconds:
        best_first(sampling_provider(fam, rng), [p])
        trees += 1
    return trees * p / (time.perf_counter() - t0)


def million_node_tree() -> str:
    """Time and peak memory of one P = 2**20 tree, in a fresh process."""
    code = (
        "import time\n"
        "from brwsim import Zipf\n"
        "from brwsim.simulate import run_iterations, seed_key, validate_budgets\n"
        "hwm = lambda: int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])\n"
        "fam = Zipf(1.5, 128000, spread=0.4); spec = fam.spec(); b = validate_budgets([2**20]); k = seed_key(0)\n"
        "run_iterations(spec, validate_budgets([64]), k, 0, 1)\n"
        "base = hwm()\n"
        "t = time.perf_counter(); run_iterations(spec, b, k, 0, 3); dt = (time.perf_counter() - t) / 3\n"
        "print(f'{dt:.3f} s per tree; peak RSS {hwm() / 1024:.0f} MB, of which '\n"
        "      f'{(hwm() - base) / 1024:.0f} MB for the tree (python + numba + scipy: {base / 1024:.0f} MB)')\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter timings")
    ap.add_argument("--forest", action="store_true", help="only the batch (forest) rows")
    args = ap.parse_args()
    sec = 1.0 if args.quick else 4.0
    if args.forest:
        forest_table(sec)
        return
    print(f"{'family':40s} {'P':>7s} {'brwsim nodes/s':>15s} {'baseline P':>10s} "
          f"{'baseline nodes/s':>16s} {'speed-up':>9s}")
    for fam, p, p_base in CASES:
        fast = brwsim_rate(fam, p, sec)
        slow = baseline_rate(fam, p_base, sec)
        print(f"{fam!r:40s} {p:7d} {fast:15.4g} {p_base:10d} {slow:16.4g} {fast / slow:8.1f}x",
              flush=True)
    forest_table(sec)
    print(f"P = 1,048,576 on zipf(s=1.5, vocab=128000, spread=0.4): {million_node_tree()}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"(this process peaked at {rss:.0f} MB)")


if __name__ == "__main__":
    main()
