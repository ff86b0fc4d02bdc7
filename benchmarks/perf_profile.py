"""Where the optimal-tree kernel spends its time: ``perf`` samples, by numba function.

numba's compiled code has no symbols ``perf`` can read, so this script compiles the
kernels in-process (an empty ``NUMBA_CACHE_DIR`` of its own: code loaded from a cache
keeps no module to name), writes ``/tmp/perf-<pid>.map`` (the perf map file of JIT
code, one line per function: start, size, name) naming each of brwsim's compiled
functions as ``module.function``, then runs one family's kernel at one budget in a loop
while ``perf record`` samples this process, and prints ``perf report``'s top symbols.
Sizes are the gaps between consecutive functions, so a sample in padding counts for the
function before it (the map and the samples are removed after the report). Without
``perf`` on the PATH it writes the map, keeps it, and says how to profile by hand.

Usage::

    python benchmarks/perf_profile.py 'dirichlet(alpha=0.05, vocab=200)' 1024
    python benchmarks/perf_profile.py 'zipf(s=1.5, vocab=128000, spread=0.4)' 65536 --seconds 10

The first run compiles for about a minute (the cache is fresh on purpose). Used for
issue 23's profiles (benchmarks/README.md): e.g. Dirichlet-200 at P = 1024 spent 59% of
its samples in ``dirichlet.dirichlet_init`` and 21% in libm's ``log`` and ``exp``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

_SEGMENT = re.compile(r"(\d+)")


def readable(mangled: str) -> str:
    """``module.function`` of a numba symbol (``_ZN6brwsim7kernels4tree5_walkB4v11...``)."""
    if not mangled.startswith("_ZN"):
        return mangled
    parts, i = [], 3
    while i < len(mangled):
        m = _SEGMENT.match(mangled, i)
        if not m:
            break
        n = int(m.group(1))
        start = m.end()
        parts.append(mangled[start:start + n])
        i = start + n
    return ".".join(parts) if parts else mangled


def jit_symbols() -> list[tuple[int, str]]:
    """(address, readable name) of every function compiled so far by brwsim's kernels."""
    import importlib
    import pkgutil

    from numba.core.registry import CPUDispatcher

    import brwsim.kernels as kernels

    out: dict[int, str] = {}
    seen: set[int] = set()
    for info in pkgutil.iter_modules(kernels.__path__):
        mod = importlib.import_module(f"brwsim.kernels.{info.name}")
        for obj in vars(mod).values():
            if not isinstance(obj, CPUDispatcher):
                continue
            for cres in obj.overloads.values():
                lib = cres.library
                if id(lib) in seen or getattr(lib, "_final_module", None) is None:
                    continue
                seen.add(id(lib))
                for fn in lib._final_module.functions:
                    if fn.is_declaration:
                        continue
                    try:
                        addr = lib.get_pointer_to_function(fn.name)
                    except Exception:       # a function the JIT dropped
                        continue
                    if addr:
                        out.setdefault(addr, readable(fn.name))
    return sorted(out.items())


def write_map(symbols: list[tuple[int, str]], path: str) -> None:
    """The perf map file: each function up to the next one's start (at most 1 MiB)."""
    with open(path, "w") as f:
        for k, (addr, name) in enumerate(symbols):
            nxt = symbols[k + 1][0] if k + 1 < len(symbols) else addr + 4096
            size = nxt - addr if 0 < nxt - addr < (1 << 20) else 4096
            f.write(f"{addr:x} {size:x} {name}\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("family", help="family string, e.g. 'dirichlet(alpha=0.05, vocab=200)'")
    ap.add_argument("budget", type=int, help="the budget P (one tree of P nodes per iteration)")
    ap.add_argument("--seconds", type=float, default=8.0, help="sampling time (default 8)")
    ap.add_argument("--top", type=int, default=15, help="symbols printed (default 15)")
    args = ap.parse_args(argv)

    cache = tempfile.mkdtemp(prefix="brwsim-perf-cache-")
    os.environ["NUMBA_CACHE_DIR"] = cache       # before numba is imported: compile here
    from bench_core import calls_of     # (imports brwsim: after the cache is set)

    from brwsim import engine, parse_family

    spec = parse_family(args.family).spec()
    budgets = engine.validate_budgets([args.budget])
    key = engine.seed_key(0)
    t = engine.run_iterations(spec, budgets, key, 0, 1)[-1]
    map_path = f"/tmp/perf-{os.getpid()}.map"
    symbols = jit_symbols()
    write_map(symbols, map_path)
    print(f"{len(symbols)} compiled functions named in {map_path}")
    perf = shutil.which("perf")
    data = os.path.join(cache, "perf.data")
    rec = None
    if perf:
        rec = subprocess.Popen([perf, "record", "-F", "4000", "-p", str(os.getpid()), "-o", data,
                                "--", "sleep", str(args.seconds)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    else:
        print(f"perf is not on the PATH: run `perf record -p {os.getpid()}` by hand now")
    count = calls_of(args.budget)
    first, nodes, t0 = 1, 0, time.perf_counter()
    while time.perf_counter() - t0 < args.seconds + 1.0:
        t = engine.run_iterations(spec, budgets, key, first, count, t)[-1]
        first += count
        nodes += count * args.budget
    print(f"{args.family} at P = {args.budget}: {nodes / (time.perf_counter() - t0):.3g} tree "
          "nodes/s while sampled")
    try:
        if rec is None:
            return 0
        if rec.wait() != 0:
            print("perf record failed (perf_event_paranoid?)", file=sys.stderr)
            return 1
        rep = subprocess.run([perf, "report", "-i", data, "--no-children", "--sort", "symbol",
                              "--stdio"], capture_output=True, text=True)
        rows = [ln for ln in rep.stdout.splitlines() if "%" in ln and not ln.startswith("#")]
        for ln in rows[:args.top]:
            print(re.sub(r"\s+-\s+-\s*$", "", ln.replace("[.] ", ""))[:110])
        return 0
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        if rec is not None:
            os.unlink(map_path)


if __name__ == "__main__":
    raise SystemExit(main())
