"""``brwsim --help`` against ``python -c "import numpy"``, interleaved in one run.

Times N rounds; each round runs, in fresh processes and alternating order, ``python -m
brwsim.cli --help`` and ``python -c "import numpy"`` (the interpreter start included in
both), so that the machine's load falls on both alike. Prints the median and the best of
each and their ratio (issue 39's target: ``--help`` at most 1.5x ``import numpy``).

Run: ``python benchmarks/bench_help.py [--rounds 20]`` with the checkout on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "brwsim --help": [sys.executable, "-m", "brwsim.cli", "--help"],
    "brwsim -V": [sys.executable, "-m", "brwsim.cli", "-V"],
    "import numpy": [sys.executable, "-c", "import numpy"],
}


def _once(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20, help="rounds (default 20)")
    args = ap.parse_args(argv)
    times: dict[str, list[float]] = {k: [] for k in COMMANDS}
    names = list(COMMANDS)
    for name in names:                                   # warm the file cache once
        _once(COMMANDS[name])
    load0 = os.getloadavg()
    for r in range(args.rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            times[name].append(_once(COMMANDS[name]))
    load1 = os.getloadavg()
    base = statistics.median(times["import numpy"])
    print(f"{args.rounds} interleaved rounds; load average before {load0[0]:.2f}, after {load1[0]:.2f}")
    for name in names:
        med, best = statistics.median(times[name]), min(times[name])
        print(f"{name:>14}: median {med * 1e3:6.0f} ms, best {best * 1e3:6.0f} ms, "
              f"median / import numpy = {med / base:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
