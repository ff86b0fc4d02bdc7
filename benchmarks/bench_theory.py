"""Theory at the speed of the kernel: what a fresh family instance costs before its first number.

For each family: a *fresh instance* (nothing memoised) is timed through
``brwsim.theory.prediction_with_se`` and ``upper_bound`` at budgets 1 .. 2**20 (the spine
law is built once and shared, as in ``simulate``), three times, with the median and the
largest time and the peak of traced memory (numpy arrays included, via tracemalloc); next to
it, 1000 trees at P = 64 of the same family in the same process (numba cache warm: a first
call of each is made before timing).

``--shell`` instead times what a user meets from the shell, in fresh processes (best of 5):
``brwsim --version`` (start-up: Python, numpy, numba, scipy.special), then ``brwsim theory``
on an exact and on a sampled family; the difference is what the theory adds, including
numba's own one-time start-up where the first kernel of the process is a theory kernel.

Run: ``python benchmarks/bench_theory.py`` (about a minute) or ``--shell`` (half a minute).
Targets (issue 11): at most 0.25 s and 200 MB of theory per family, any vocabulary up to
262,144.
"""

from __future__ import annotations

import math
import sys
import time
import tracemalloc

import numpy as np

import brwsim
from brwsim import theory
from brwsim.families import DEFAULT_FAMILY

FAMILIES = [
    "uniform(k=3)",
    "fixed(probs=[0.5, 0.3, 0.15])",
    "geometric(r=0.6)",
    "zipf(s=1.1, vocab=262144)",
    "zipf(s=1.5, vocab=128000, spread=0.4)",
    "dirichlet(alpha=0.05, vocab=200)",
    "dirichlet(alpha=0.3, vocab=200)",
    "dirichlet(alpha=0.05, vocab=32000)",
    "dirichlet(alpha=0.1, vocab=262144)",
    "peaked(a=8, b=0.5, s=1.2, vocab=32000)",
    "softmaxnormal(sigma=1.5, vocab=3000)",
    "softmaxnormal(sigma=3.0, vocab=32000)",
    "softmaxnormal(sigma=1.0, vocab=262144)",
    "softmaxnormal(sigma=3.0, vocab=262144)",
    "tempered(family=dirichlet(alpha=0.3, vocab=200), T=0.7)",
    "tempered(family=dirichlet(alpha=0.1, vocab=262144), T=0.7)",
    "tempered(family=softmaxnormal(sigma=2.0, vocab=131072), T=1.5)",
    "tempered(family=peaked(a=8, b=0.5, s=1.2, vocab=262144), T=0.7)",
    "entropytarget(entropies=lognorm(s=0.5, scale=2), shape=zipf, vocab=262144)",
    "entropytarget(entropies=[0.1, 0.5, 3.0], shape=zipf, vocab=50000)",
    "entropytarget(entropies=lognorm(s=1.5, scale=0.1), shape=geometric)",
    "tempered(family=softmaxnormal(sigma=3.0, vocab=262144), T=0.5)",
    DEFAULT_FAMILY,
]
SHELL = [("start-up", ["--version"]),
         ("exact: dirichlet(0.05, 200)",
          ["theory", "--family", "dirichlet(alpha=0.05, vocab=200)", "--budgets", "1,64,4096"]),
         ("exact: tempered peaked 262144",
          ["theory", "--family", "tempered(family=peaked(a=8, b=0.5, s=1.2, vocab=262144), T=0.7)",
           "--budgets", "1,64,4096"]),
         ("sampled: softmaxnormal(3, 32000)",
          ["theory", "--family", "softmaxnormal(sigma=3.0, vocab=32000)", "--budgets",
           "1,64,4096"])]
BUDGETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 2 ** 20]


def theory_cost(text: str) -> tuple[float, float, float]:
    """Seconds and peak MB of the prediction + bound of a fresh instance, and the max SE."""
    fam = brwsim.parse_family(text)
    tracemalloc.start()
    t0 = time.perf_counter()
    pred = theory.prediction_with_se(fam, BUDGETS)
    theory.upper_bound(fam, BUDGETS)
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / 2 ** 20
    tracemalloc.stop()
    return seconds, peak, float(np.max(pred.se))


def tree_cost(text: str) -> float:
    """Seconds of 1000 trees at P = 64 (theory excluded: the kernel through simulate's core)."""
    from brwsim.simulate import run_iterations, seed_key

    spec = brwsim.parse_family(text).spec()
    b = np.array([64])
    run_iterations(spec, b, seed_key(0), 0, 8)            # compile / load
    t0 = time.perf_counter()
    run_iterations(spec, b, seed_key(0), 0, 1000)
    return time.perf_counter() - t0


def shell() -> None:
    """Best of 5 fresh ``brwsim`` processes per command, and what each adds to start-up."""
    import shutil
    import subprocess

    exe = shutil.which("brwsim")
    if exe is None:
        raise SystemExit("brwsim is not on PATH: install the package first")
    subprocess.run([exe, *SHELL[-1][1]], check=True, capture_output=True)   # numba cache warm
    base = None
    print(f"{'command':34s} {'wall s (best of 5)':>19s} {'added s':>8s}")
    for label, args in SHELL:
        best = math.inf
        for _ in range(5):
            t0 = time.perf_counter()
            subprocess.run([exe, *args], check=True, capture_output=True)
            best = min(best, time.perf_counter() - t0)
        base = best if base is None else base
        print(f"{label:34s} {best:19.3f} {best - base:8.3f}", flush=True)


def main() -> None:
    if "--shell" in sys.argv[1:]:
        shell()
        return
    theory_cost("geometric(r=0.5)")                       # load every kernel once
    print(f"{'family':66s} {'median s':>9s} {'max s':>6s} {'peak MB':>8s} {'max SE':>8s} "
          f"{'1000 trees s':>13s}")
    for text in FAMILIES:
        theory_cost(text)                                 # warm the kernels of this family
        runs = [theory_cost(text) for _ in range(3)]
        times = sorted(r[0] for r in runs)
        peak, se = max(r[1] for r in runs), runs[0][2]
        trees = tree_cost(text)
        print(f"{text[:66]:66s} {times[1]:9.3f} {times[2]:6.3f} {peak:8.1f} {se:8.4f} "
              f"{trees:13.3f}", flush=True)


if __name__ == "__main__":
    main()
