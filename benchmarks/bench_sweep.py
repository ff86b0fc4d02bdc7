"""Sweep throughput: optimal-tree nodes per second on N workers against one, and efficiency.

The sweep has four Zipf points (s = 1.1, 1.5; spread = 0, 0.3; vocab 32000) and budgets
1..4096, with enough iterations for ``--nodes`` optimal-tree nodes in total
(iterations x 4096; default 1e9, about 5 minutes per core). ``--quick`` runs 2e7 nodes.
Both runs are summary-only (``--raw`` keeps the per-iteration arrays) and must give
identical data. The worker pool is started by a tiny warm-up sweep first, so the
timings measure steady-state throughput, not process start-up.

``--many-small`` instead times a sweep of many small points end to end on one worker,
theory included (32 Dirichlet points, vocabularies 200 to 262,144, 500 trees each at
budgets 1..1024, the numerical prediction and the upper bound per point), against the
kernel alone on the same trees in the same process (issue 11: at least half the kernel's
rate end to end, at most 0.25 s of theory per point).

Usage::

    python benchmarks/bench_sweep.py --quick
    python benchmarks/bench_sweep.py --nodes 1e9 --jobs 2 [--backend dask]
    python benchmarks/bench_sweep.py --many-small
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


SMALL_ALPHAS = [0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0]
SMALL_VOCABS = [200, 1000, 32000, 262144]
SMALL_P, SMALL_IT = 1024, 500


def many_small(root: Path) -> None:
    """End-to-end rate of a sweep of 32 small points against the kernel on the same trees."""
    import time

    import numpy as np

    from brwsim import Dirichlet
    from brwsim.simulate import run_iterations, seed_key
    from brwsim.theory import prediction_with_se, upper_bound

    cfg = {"sweep": {"seed": 2, "iterations": SMALL_IT, "chunk": SMALL_IT,
                     "budgets": f"1..{SMALL_P}", "prediction": "numerical",
                     "family": [{"name": "dirichlet", "alpha": SMALL_ALPHAS,
                                 "vocab": SMALL_VOCABS}]}}
    budgets = 2 ** np.arange(11)
    fams = [Dirichlet(a, v) for a in SMALL_ALPHAS for v in SMALL_VOCABS]
    for f in fams[:2]:                              # load the kernels once
        run_iterations(f.spec(), budgets, seed_key(0), 0, 4)
        prediction_with_se(f, budgets)
    kernel = 0.0
    for f in fams:
        spec = f.spec()
        t0 = time.perf_counter()
        run_iterations(spec, budgets, seed_key(0), 0, SMALL_IT)
        kernel += time.perf_counter() - t0
    theory = []
    for a in SMALL_ALPHAS:
        for v in SMALL_VOCABS:
            f = Dirichlet(a, v)                     # a fresh instance: nothing memoised
            t0 = time.perf_counter()
            prediction_with_se(f, budgets)
            upper_bound(f, budgets)
            theory.append(time.perf_counter() - t0)
    nodes = len(fams) * SMALL_IT * SMALL_P
    rep = sweep(cfg, root / "small", jobs=1)
    print(f"many small points: {len(fams)} points x {SMALL_IT} trees x P_max {SMALL_P} = "
          f"{nodes:.3g} tree nodes")
    print(f"  kernel alone: {nodes / kernel:.3g} tree nodes/s; sweep end to end (theory, shards, "
          f"merge): {nodes / rep.seconds:.3g} tree nodes/s = {kernel / rep.seconds:.2f} of the "
          f"kernel's rate")
    print(f"  theory per point (prediction + bound, fresh family): median "
          f"{np.median(theory):.3f} s, max {max(theory):.3f} s")


SHELL_ALPHAS = [0.05, 0.1, 0.3, 1.0, 3.0]
SHELL_VOCABS = [200, 1000, 32000, 262144]
SHELL_P, SHELL_IT = 1024, 600


def shell(root: Path, jobs: int, rounds: int = 4) -> None:
    """``brwsim sweep`` of 20 Dirichlet points from the shell (a fresh process, kernels
    cached, the package byte-compiled, no theory) against the kernel's own rate on the
    same trees in this process, the two timed alternately ``rounds`` times (the machine is
    shared: each pair sees about the same load; the best of each and the median of the
    rounds' ratios are printed too)."""
    import os
    import subprocess
    import sys
    import time

    import numpy as np

    from brwsim.simulate import run_iterations
    from brwsim.sweep.config import load_config

    text = (f'[sweep]\nseed = 3\niterations = {SHELL_IT}\nchunk = {SHELL_IT // 2}\n'
            f'budgets = "1..{SHELL_P}"\nprediction = "none"\n[[sweep.family]]\nname = "dirichlet"\n'
            f'alpha = {SHELL_ALPHAS}\nvocab = {SHELL_VOCABS}\n')
    toml = root / "s.toml"
    toml.write_text(text)
    cfg = load_config(toml)
    budgets = 2 ** np.arange(11)
    argv = [sys.executable, "-m", "brwsim.cli", "sweep", str(toml), "--quiet", "--summary-only",
            "--jobs", str(jobs)]
    env = {**os.environ, "BRWSIM_COMPILE_NOTICE": "0"}
    # the package's bytecode, as an installed wheel (and any checkout on a machine that
    # does not set PYTHONDONTWRITEBYTECODE) has it: else each run compiles its source
    import compileall

    import brwsim

    compileall.compile_dir(Path(brwsim.__file__).parent, quiet=1)
    subprocess.run(argv + ["--out", str(root / "warm")], check=True, env=env)   # caches
    points = [(p.family.spec(), np.uint64(cfg.point_key(p.index))) for p in cfg.points()]
    for spec, key in points:
        run_iterations(spec, budgets, key, 0, 2)
    nodes = len(points) * SHELL_IT * SHELL_P
    print(f"shell sweep: 20 Dirichlet points x {SHELL_IT} trees x P_max {SHELL_P} = "
          f"{nodes:.3g} tree nodes, --jobs {jobs}")
    kernels, walls = [], []
    for r in range(rounds):
        kernel = 0.0
        for spec, key in points:                  # the same trees, one call per chunk
            for _, first, count in cfg.chunks():
                t0 = time.perf_counter()
                run_iterations(spec, budgets, key, first, count)
                kernel += time.perf_counter() - t0
        t0 = time.perf_counter()
        subprocess.run(argv + ["--out", str(root / f"timed{r}")], check=True, env=env)
        wall = time.perf_counter() - t0
        kernels.append(kernel)
        walls.append(wall)
        print(f"  round {r + 1}: kernel alone {kernel:.2f} s ({nodes / kernel:.3g} nodes/s); "
              f"`brwsim sweep` from the shell {wall:.2f} s = {kernel / wall:.2f} of the kernel's rate"
              f"{'' if jobs == 1 else f' (on {jobs} workers)'}")
    ratios = sorted(k / w for k, w in zip(kernels, walls))
    print(f"  best of {rounds}: kernel alone {min(kernels):.2f} s, the shell sweep {min(walls):.2f} s "
          f"= {min(kernels) / min(walls):.2f} of the kernel's rate; median of the rounds' "
          f"ratios {float(np.median(ratios)):.2f} ({', '.join(f'{r:.2f}' for r in ratios)})")


def main() -> None:
    """Parse arguments, run the sweep on 1 and N workers, print throughput and efficiency."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=float, default=1e9, help="optimal-tree nodes in total (default 1e9)")
    ap.add_argument("--quick", action="store_true", help="2e7 nodes (a smoke run)")
    ap.add_argument("--jobs", type=int, default=2, help="workers of the parallel run (default 2)")
    ap.add_argument("--backend", choices=("loky", "dask"), default="loky")
    ap.add_argument("--raw", action="store_true", help="keep per-iteration arrays")
    ap.add_argument("--many-small", action="store_true",
                    help="a sweep of 32 small points end to end against the kernel alone")
    ap.add_argument("--shell", action="store_true",
                    help="`brwsim sweep` of 20 Dirichlet points from the shell against the kernel")
    ap.add_argument("--rounds", type=int, default=4,
                    help="--shell: alternate rounds of the kernel and the sweep (default 4)")
    args = ap.parse_args()
    if args.shell:
        with tempfile.TemporaryDirectory(prefix="bench_sweep_") as tmp:
            shell(Path(tmp), 1, args.rounds)
        return
    if args.many_small:
        with tempfile.TemporaryDirectory(prefix="bench_sweep_") as tmp:
            many_small(Path(tmp))
        return
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
