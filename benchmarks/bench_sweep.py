"""Sweep throughput: optimal-tree nodes per second on N workers against one, and efficiency.

The sweep has four Zipf points (s = 1.1, 1.5; spread = 0, 0.3; vocab 32000) and budgets
1..4096, with enough iterations for ``--nodes`` optimal-tree nodes in total
(iterations x 4096; default 1e9, about 5 minutes per core). ``--quick`` runs 2e7 nodes.
Both runs are summary-only (``--raw`` keeps the per-iteration arrays) and must give
identical data. The worker pool is started by a tiny warm-up sweep first, so the
timings measure steady-state throughput, not process start-up.

Usage::

    python benchmarks/bench_sweep.py --quick
    python benchmarks/bench_sweep.py --nodes 1e9 --jobs 2 [--backend dask]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import xarray as xr

from brwsim.sweep import SweepReport, sweep

P_MAX = 4096
POINTS = 4
TASK_ITERATIONS = 1000          # about 4e6 tree nodes, 1 s on one core


def config(nodes: float) -> dict:
    """A four-point Zipf sweep of about ``nodes`` optimal-tree nodes."""
    iterations = max(1, math.ceil(nodes / (POINTS * P_MAX)))
    chunk = min(TASK_ITERATIONS, max(1, math.ceil(iterations / 10)))
    return {"sweep": {"seed": 1, "iterations": iterations, "chunk": chunk,
                      "budgets": f"1..{P_MAX}", "prediction": "none",
                      "family": [{"name": "zipf", "s": [1.1, 1.5], "spread": [0.0, 0.3],
                                  "vocab": 32000}]}}


def _timed(cfg: dict, out: Path, jobs: int, backend: str | None, scheduler: Any,
           raw: bool) -> SweepReport:
    rep = sweep(cfg, out, jobs=jobs, backend=backend, scheduler=scheduler, summary_only=not raw,
                quiet=False)
    print(f"  jobs={jobs}: {rep.tasks} tasks in {rep.seconds:.2f} s, "
          f"{rep.tree_nodes / rep.seconds:.4g} tree nodes/s")
    return rep


def _same(a: Path, b: Path) -> bool:
    with xr.open_datatree(a) as ta, xr.open_datatree(b) as tb:
        return all(ta[g].to_dataset().identical(tb[g].to_dataset()) for g in ta.children)


@contextlib.contextmanager
def _scheduler(backend: str, jobs: int) -> Iterator[Any]:
    """One dask LocalCluster for the warm-up and the timed run (None for loky)."""
    if backend != "dask":
        yield None
        return
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        yield client


def main() -> None:
    """Parse arguments, run the sweep on 1 and N workers, print throughput and efficiency."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=float, default=1e9, help="optimal-tree nodes in total (default 1e9)")
    ap.add_argument("--quick", action="store_true", help="2e7 nodes (a smoke run)")
    ap.add_argument("--jobs", type=int, default=2, help="workers of the parallel run (default 2)")
    ap.add_argument("--backend", choices=("loky", "dask"), default="loky")
    ap.add_argument("--raw", action="store_true", help="keep per-iteration arrays")
    args = ap.parse_args()
    nodes = 2e7 if args.quick else args.nodes
    cfg = config(nodes)
    s = cfg["sweep"]
    total = POINTS * s["iterations"] * P_MAX
    print(f"sweep: {POINTS} points x {s['iterations']} iterations x P_max {P_MAX} = {total:.3g} "
          f"tree nodes, chunk {s['chunk']} ({POINTS * -(-s['iterations'] // s['chunk'])} chunk tasks)")
    with tempfile.TemporaryDirectory(prefix="bench_sweep_") as tmp, \
            _scheduler(args.backend, args.jobs) as client:
        root = Path(tmp)
        sweep(config(POINTS * P_MAX * 4), root / "warm", jobs=args.jobs, backend=args.backend,
              scheduler=client)
        one = _timed(cfg, root / "one", 1, None, None, args.raw)
        many = _timed(cfg, root / "many", args.jobs, args.backend, client, args.raw)
        speedup = one.seconds / many.seconds
        print(f"speed-up {speedup:.2f}x on {args.jobs} workers, parallel efficiency "
              f"{speedup / args.jobs:.0%} ({args.backend}); identical data: "
              f"{_same(one.path, many.path)}")


if __name__ == "__main__":
    main()
