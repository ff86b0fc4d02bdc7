"""Where the renewal prediction is accurate: prediction / Monte Carlo over held-out families.

The families below are not the test table's (``tests/conftest.py``) nor the ones the
prediction's tests were tuned on: spread entropies, near-deterministic LLM-like mixtures,
heavy and light tails. For each, E[X] is estimated by Monte Carlo (E[X | T_P], fixed seed)
at P = 1 .. 4096 and compared with ``brwsim.theory.prediction``; the summary gives, per
band of mu P (mu the mean entropy in nats), the largest relative error that is beyond 3
combined standard errors (sampling noise is not counted as error).

Usage: ``python benchmarks/prediction_accuracy.py [--trees N] [--out file.json]``.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

from brwsim import parse_family, simulate, summarize

FAMILIES = [
    "entropytarget(entropies=[0.05, 0.3, 1.0, 3.0], shape=zipf, vocab=32000)",
    "entropytarget(entropies=[0.1, 2.5], shape=geometric)",
    "zipf(s=1.05, vocab=50000, spread=0.8)",
    "zipf(s=1.4, vocab=8000, spread=0.5)",
    "mixture(families=[peaked(a=8, b=0.5, s=1.2, vocab=32000), zipf(s=1.3, vocab=32000, "
    "spread=0.5)], weights=[0.9, 0.1])",
    "mixture(families=[fixed(probs=[0.97, 0.02, 0.01]), dirichlet(alpha=0.5, vocab=200)], "
    "weights=[0.8, 0.2])",
    "mixture(families=[geometric(r=0.05), uniform(k=20)], weights=[0.7, 0.3])",
    "dirichlet(alpha=0.1, vocab=1000)",
    "softmaxnormal(sigma=3, vocab=32000)",
    "tempered(family=zipf(s=1.1, vocab=10000, spread=0.4), T=1.5)",
    "peaked(a=1, b=3, s=1.5, vocab=5000)",
]
BUDGETS = [1, 4, 16, 64, 256, 1024, 4096]
#: Bands of mu P for the summary.
BANDS = [(0, 1), (1, 10), (10, 100), (100, 1000), (1000, math.inf)]


def measure(text: str, trees: int) -> list[dict]:
    family = parse_family(text)
    ds = simulate(family, BUDGETS, trees, seed=2026)
    s = summarize(ds)
    mu = float(ds.mu)
    rows = []
    for i, p in enumerate(BUDGETS):
        mc, se = float(s.expected_mean[i]), float(s.expected_se[i])
        pred, pse = float(ds.prediction[i]), float(ds.prediction_se[i])
        rows.append({"family": text, "budget": p, "mu_P": mu * p, "prediction": pred,
                     "prediction_se": pse, "monte_carlo": mc, "monte_carlo_se": se,
                     "relative_error": pred / mc - 1.0,
                     "significant": abs(pred - mc) > 3 * math.hypot(se, pse)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", type=int, default=400)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    rows = []
    for text in FAMILIES:
        start = time.perf_counter()
        got = measure(text, args.trees)
        rows += got
        print(f"{text}  ({time.perf_counter() - start:.0f} s)")
        for r in got:
            print(f"  P={r['budget']:5d}  mu P={r['mu_P']:9.3g}  pred={r['prediction']:.4f}  "
                  f"MC={r['monte_carlo']:.4f}±{r['monte_carlo_se']:.4f}  "
                  f"{100 * r['relative_error']:+6.1f}%{'' if r['significant'] else ' (noise)'}",
                  flush=True)
    print("\nlargest significant relative error of the prediction, by mu P:")
    for lo, hi in BANDS:
        band = [r for r in rows if lo <= r["mu_P"] < hi]
        sig = [r["relative_error"] for r in band if r["significant"]]
        worst = max(sig, key=abs) if sig else 0.0
        print(f"  {lo:>5} <= mu P < {hi:<5}: {len(band):3d} points, {len(sig):3d} beyond 3 SE, "
              f"worst {100 * worst:+.1f}%")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
