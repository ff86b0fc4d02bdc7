"""Tree nodes per second of the kernels: against two bare floors and the previous revision.

Every figure is measured in this one process, on the same machine state, and is the best
of three timings (after and before: of six half-length timings, taken in turn, so that a
drift of the machine's speed slows both alike); the ratios are what to compare across
machines.

* *after*: this worktree's kernels (:func:`brwsim.engine.run_iterations`), P nodes per tree.
* *before*: the same call into the kernels of a reference revision (``--before``, default
  ``main``), imported beside the current code (``benchmarks/before.py``: ``git archive``
  of that revision's ``brwsim/``, its own ``sys.modules`` entries and numba cache).
* *heap floor* and *threshold floor* (``benchmarks/floors.py``): a binary-heap best-first
  search and a depth-first threshold pass over a fixed Zipf(1.5, 128000) tree, with no
  distribution draws, hashing, path sampling or selection, at the same P.

``--python`` adds the plain heapq + numpy baseline (:func:`brwsim.reference.best_first`
with :func:`brwsim.reference.sampling_provider`, drawing every popped node's whole
distribution); its cost per node does not fall with P, so large trees are timed at the
``python P`` shown.

Usage::

    python benchmarks/bench_core.py            # full table (a few minutes)
    python benchmarks/bench_core.py --quick    # shorter timings
    python benchmarks/bench_core.py --forest   # only the batch (forest) rows

The forest rows time one shared budget P over a batch of B roots
(:func:`brwsim.engine.run_forest`) next to B = 1 on the same family and P, in this
process: nodes/s counts P nodes per forest; "+ split" also scores the equal split on the
same roots.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import floors  # noqa: E402
from before import Reference  # noqa: E402

from brwsim import Dirichlet, Zipf, parse_family  # noqa: E402
from brwsim.families import DEFAULT_FAMILY  # noqa: E402
from brwsim.reference import best_first, sampling_provider  # noqa: E402
from brwsim.simulate import _CHUNK, run_forest, run_iterations, seed_key, validate_budgets  # noqa: E402

#: Trees per kernel call in :func:`brwsim.simulate` (its chunk).
ENGINE_CHUNK = _CHUNK
#: Most nodes per timed call (so that one call of a large P stays within a timing).
CALL_NODES = 1e6

CASES = [  # family, P, python baseline P cap
    ("dirichlet(alpha=0.05, vocab=200)", 64, 64),
    ("dirichlet(alpha=0.05, vocab=200)", 1024, 1024),
    ("dirichlet(alpha=0.05, vocab=200)", 65536, 4096),
    ("dirichlet(alpha=0.05, vocab=32000)", 256, 256),
    ("zipf(s=1.5, vocab=128000, spread=0.4)", 64, 64),
    ("zipf(s=1.5, vocab=128000, spread=0.4)", 1024, 256),
    ("zipf(s=1.5, vocab=128000, spread=0.4)", 65536, 256),
    (DEFAULT_FAMILY, 4096, 256),
]


def calls_of(p: int) -> int:
    """Trees per kernel call at budget P: as many as :func:`brwsim.simulate` puts in one
    call (its chunk), at most about ``CALL_NODES`` nodes.

    Every call has a cost of its own (its buffers are allocated afresh; the nodes visited
    per tree do not change with the call's size), which shows at large P: zipf(1.5,
    128000, 0.4) at P = 65536 ran 2.02e7 nodes/s in calls of 3 trees (the 2e5 nodes per
    call this benchmark timed until issue 23's sixth round), 2.19e7 in calls of 30 and
    2.34e7 in calls of 256 (one process, best of 4 x 0.5 s; Dirichlet-200: no difference).
    A run makes calls of 256 trees; timing much smaller calls would charge the kernel a
    cost that runs do not pay. At P = 65536 the cap gives calls of 15 trees.
    """
    return min(ENGINE_CHUNK, max(1, int(CALL_NODES // p)))


class _Timer:
    """Timings of one engine's kernel on one family and P: P nodes per tree, each iteration
    new (first warmed up, so not compiled), trees in calls of the size a run makes
    (:func:`calls_of`)."""

    def __init__(self, engine, fam, p: int) -> None:
        self.engine, self.p = engine, p
        self.spec, self.budgets, self.key = fam.spec(), engine.validate_budgets([p]), engine.seed_key(0)
        self.t = engine.run_iterations(self.spec, self.budgets, self.key, 0, 1)[-1]
        self.count = calls_of(p)
        self.first = 1

    def rate(self, seconds: float) -> float:
        """Tree nodes per second over one timing of about ``seconds``."""
        trees, t0 = 0, time.perf_counter()
        while trees == 0 or time.perf_counter() - t0 < seconds:
            self.t = self.engine.run_iterations(self.spec, self.budgets, self.key, self.first,
                                                self.count, self.t)[-1]
            self.first += self.count
            trees += self.count
        return trees * self.p / (time.perf_counter() - t0)


def kernel_rates(engines, fams, p: int, seconds: float, repeats: int = 3) -> list[float]:
    """Best tree-node rate of each engine's kernel (with its own family object) over
    ``repeats`` rounds, the engines timed in turn within each round: a machine whose speed
    drifts (this shared one does, by 10-20% over seconds) then slows every engine alike."""
    timers = [_Timer(e, f, p) for e, f in zip(engines, fams)]
    best = [0.0] * len(timers)
    for _ in range(repeats):
        for i, tm in enumerate(timers):
            best[i] = max(best[i], tm.rate(seconds))
    return best


def kernel_rate(engine, fam, p: int, seconds: float, repeats: int = 3) -> float:
    """Tree nodes (P per tree) per second of ``engine.run_iterations``: best of ``repeats``."""
    return kernel_rates([engine], [fam], p, seconds, repeats)[0]


def brwsim_rate(fam, p: int, seconds: float) -> float:
    """Tree nodes per second of this worktree's kernels (best of 3)."""
    from brwsim import engine
    return kernel_rate(engine, fam, p, seconds)


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
        "      f'{(hwm() - base) / 1024:.0f} MB for the tree (python + numba + scipy: {base / 1024:.0f} MB; '\n"
        "      f'bound 2 x 2**20 nodes x 32 B = 64 MB)')\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="shorter timings")
    ap.add_argument("--forest", action="store_true", help="only the batch (forest) rows")
    ap.add_argument("--before", default="main", help="reference revision (default: main)")
    ap.add_argument("--python", action="store_true", help="add the heapq + numpy baseline")
    args = ap.parse_args()
    sec = 0.5 if args.quick else 2.0
    if args.forest:
        forest_table(sec)
        return
    from brwsim import engine
    ref = Reference(args.before)
    print(f"before = {args.before} ({ref.root.name[:10]}); after and before: best of 6 "
          f"alternating timings of {sec / 2:g} s; floors: best of 3 of {sec:g} s; ratios in this process")
    print(f"{'family':40.40s} {'P':>6s} {'after/s':>9s} {'before/s':>9s} {'a/b':>6s} "
          f"{'heap/s':>9s} {'a/heap':>7s} {'b/heap':>7s} {'thr/s':>9s} {'a/thr':>6s}"
          + (f" {'python P':>8s} {'python/s':>9s}" if args.python else ""))
    floor_cache: dict[int, tuple[float, float]] = {}
    for text, p, p_py in CASES:
        if p not in floor_cache:
            floor_cache[p] = (floors.heap_rate(p, sec), floors.threshold_rate(p, sec))
        heap, thr = floor_cache[p]
        after, before = kernel_rates([engine, ref.engine],
                                     [parse_family(text), ref.brwsim.parse_family(text)], p,
                                     sec / 2, repeats=6)
        line = (f"{text:40.40s} {p:6d} {after:9.3g} {before:9.3g} {after / before:5.2f}x "
                f"{heap:9.3g} {after / heap:6.2f}x {before / heap:6.2f}x {thr:9.3g} "
                f"{after / thr:5.3f}")
        if args.python:
            line += f" {p_py:8d} {baseline_rate(parse_family(text), p_py, sec):9.3g}"
        print(line, flush=True)
    forest_table(sec)
    print(f"P = 1,048,576 on zipf(s=1.5, vocab=128000, spread=0.4): {million_node_tree()}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"(this process peaked at {rss:.0f} MB)")


if __name__ == "__main__":
    main()
