"""A new user's first ``brwsim run``: cold (empty numba cache) and warm, from a fresh HOME.

Runs ``brwsim run --quiet --no-out`` (the README's first command, the default family and
budgets 1 .. 4096, 2000 iterations) twice in fresh processes with ``HOME`` set to a new
empty directory: the first call compiles the kernels it needs into
``$HOME/.cache/brwsim-numba`` (cold), the second loads them (warm). ``NUMBA_CACHE_DIR`` is
removed from the environment so that the cache is the fresh HOME's. Prints both wall-clock
times and CPU times (user + system of the child: on a loaded machine the wall time grows
with the load, the CPU time much less), the machine's load average before and after (the
machine is shared), and what the cold run said on stderr (the compile notice).

The code timed is the ``brwsim`` package that ``python -c "import brwsim"`` finds in that
environment. With a non-editable install, ``PYTHONPATH=<a checkout>`` times another version
(e.g. a ``git archive`` of main) with the same installed dependencies; an editable install
(``pip install -e``) imports its own checkout whatever ``PYTHONPATH`` says (its import hook
comes first), so time another version from a second virtual environment. Do not edit the
sources while it runs (the cache is keyed by a hash of them, so the warm run would compile
again).

A cold run on a machine with two or more cores compiles the theory's kernels and the tree
kernel's callees in a second process beside it (:mod:`brwsim.beside`); ``--serial`` adds a
second cold run, from another fresh HOME, with ``BRWSIM_BESIDE=0`` (one process compiles
everything), right after the first, for the ratio.

Run: ``python benchmarks/bench_startup.py`` (one to two minutes on the shared 2-core
machine). ``--repeat N`` times the warm run N times (best and worst printed).
Targets (issue 39): cold at most 20 s, warm at most 3 s.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall seconds, CPU seconds of the child, the finished process)."""
    t0, c0 = time.perf_counter(), _cpu()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed, cpu = time.perf_counter() - t0, _cpu() - c0
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")
    return elapsed, cpu, done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="warm runs (default 1)")
    ap.add_argument("--serial", action="store_true",
                    help="also time a cold run with BRWSIM_BESIDE=0 (one process compiles)")
    ap.add_argument("--args", default="", help="extra arguments to brwsim run (shell-quoted), e.g. \"--family 'charlstm(carry=3)'\"")
    args = ap.parse_args(argv)
    exe = shutil.which("brwsim") or sys.exit("brwsim is not on PATH (pip install -e .)")
    cmd = [exe, "run", "--quiet", "--no-out", *shlex.split(args.args)]
    home = tempfile.mkdtemp(prefix="brwsim-home-")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["HOME"] = home
    try:
        load0 = os.getloadavg()
        cold, cold_cpu, done = _timed(cmd, env)
        warm_runs = [_timed(cmd, env) for _ in range(max(1, args.repeat))]
        warm = [w for w, _, _ in warm_runs]
        warm_cpu = [c for _, c, _ in warm_runs]
        serial = None
        if args.serial:
            home2 = tempfile.mkdtemp(prefix="brwsim-home-")
            try:
                serial = _timed(cmd, {**env, "HOME": home2, "BRWSIM_BESIDE": "0"})[:2]
            finally:
                shutil.rmtree(home2, ignore_errors=True)
        load1 = os.getloadavg()
    finally:
        shutil.rmtree(home, ignore_errors=True)
    where = subprocess.run([sys.executable, "-c", "import brwsim; print(brwsim.__file__)"], env=env,
                           capture_output=True, text=True).stdout.strip()
    notice = done.stderr.strip()
    print("cold stderr:" + ("\n  " + notice.replace("\n", "\n  ") if notice else " (nothing)"))
    print(f"command: HOME=<fresh> brwsim {' '.join(cmd[1:])}   (code: {where})")
    print(f"cores: {os.cpu_count()}   load average (1, 5, 15 min) before: "
          f"{load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}   after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    print(f"cold: {cold:.1f} s wall, {cold_cpu:.1f} s CPU (both processes)")
    if serial is not None:
        print(f"cold, BRWSIM_BESIDE=0: {serial[0]:.1f} s wall, {serial[1]:.1f} s CPU "
              f"(beside / serial wall: {cold / serial[0]:.2f})")
    if len(warm) == 1:
        print(f"warm: {warm[0]:.2f} s wall, {warm_cpu[0]:.2f} s CPU")
    else:
        print(f"warm: best {min(warm):.2f} s, worst {max(warm):.2f} s wall over {len(warm)} runs; "
              f"CPU {min(warm_cpu):.2f}-{max(warm_cpu):.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
