"""Check that this worktree's kernels give the reference revision's trees, bit for bit.

Runs :func:`brwsim.engine.run_iterations` of both copies (``benchmarks/before.py``) on a
few families and budget lists, six iterations each, and compares accepted counts,
E[X | T] and depths exactly (and prints the nodes visited by each, which agree when the
threshold passes are the same). Usage: ``python benchmarks/same_trees.py [--before REV]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from before import Reference  # noqa: E402

import brwsim  # noqa: E402
from brwsim import engine  # noqa: E402
from brwsim.families import DEFAULT_FAMILY  # noqa: E402

FAMILIES = ["zipf(s=1.5, vocab=128000, spread=0.4)", DEFAULT_FAMILY,
            "dirichlet(alpha=0.05, vocab=200)", "dirichlet(alpha=0.05, vocab=32000)",
            "uniform(k=3)", "geometric(r=0.5)", "zipf(s=1.1, vocab=50)",
            "peaked(a=4, b=0.5, s=1.1, vocab=32000)"]
BUDGETS = ([1, 7, 64, 100, 1024], [4096], [5, 65536])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="main", help="reference revision (default: main)")
    ref = Reference(ap.parse_args().before)
    bad = 0
    for text in FAMILIES:
        for budgets in BUDGETS:
            if "dirichlet" in text and budgets[-1] > 4096:
                continue
            new = engine.run_iterations(brwsim.parse_family(text).spec(),
                                        engine.validate_budgets(budgets), engine.seed_key(3), 0, 6)
            e = ref.engine
            old = e.run_iterations(ref.brwsim.parse_family(text).spec(),
                                   e.validate_budgets(budgets), e.seed_key(3), 0, 6)
            same = all(np.array_equal(x, y) for x, y in zip(new[:3], old[:3]))
            bad += not same
            print(f"{text[:40]:40s} {str(budgets):22s} {'identical' if same else 'DIFFERENT'} "
                  f"visited {new[3]} / {old[3]}", flush=True)
    print(f"{bad} differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
