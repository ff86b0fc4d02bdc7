"""Theory at the speed of the kernel: what a fresh family instance costs before its first number.

For each family: a *fresh instance* (nothing memoised) is timed through
``brwsim.theory.prediction_with_se`` and ``upper_bound`` at budgets 1 .. 2**20 (the spine
law is built once and shared, as in ``simulate``), with the peak of traced memory (numpy
arrays included, via tracemalloc); next to it, 1000 trees at P = 64 of the same family in
the same process (numba cache warm: a first call of each is made before timing).

Run: ``python benchmarks/bench_theory.py`` (about a minute). Targets (issue 11): at most
0.25 s and 200 MB of theory per family, any vocabulary up to 262,144.
"""

from __future__ import annotations

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
    DEFAULT_FAMILY,
]
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


def main() -> None:
    theory_cost("geometric(r=0.5)")                       # load every kernel once
    print(f"{'family':66s} {'theory s':>9s} {'peak MB':>8s} {'max SE':>8s} {'1000 trees s':>13s}")
    for text in FAMILIES:
        theory_cost(text)                                 # warm the kernels of this family
        seconds, peak, se = theory_cost(text)
        trees = tree_cost(text)
        print(f"{text[:66]:66s} {seconds:9.3f} {peak:8.1f} {se:8.4f} {trees:13.3f}", flush=True)


if __name__ == "__main__":
    main()
