"""``brwsim sweep``: a resumable parameter sweep from a TOML file (:mod:`brwsim.sweep`)."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from brwsim.cli.common import add_command, warning_lines

__all__ = ["register", "BACKENDS"]

#: The joblib backends of ``--backend``: :data:`brwsim.sweep.BACKENDS`, named here so that
#: parsing the arguments imports no sweep machinery (a test keeps the two equal).
BACKENDS = ("loky", "dask")


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``sweep`` (its parser is returned)."""
    parser = add_command(
        subparsers, "sweep", run_cli,
        "run a parameter sweep from a TOML file into DIR/results.nc (resumable)",
        description="Run every (point, chunk) task of a TOML sweep configuration, one netCDF "
                    "shard per task in DIR/shards, and merge them into DIR/results.nc. Running "
                    "the same command again finishes only missing tasks.")
    parser.add_argument("config", metavar="CONFIG", help="TOML sweep configuration ('-': standard input)")
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder")
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="parallel tasks (default 1; with dask: every worker; -1: all cores)")
    parser.add_argument("--backend", choices=BACKENDS, default=None,
                        help="joblib backend (default loky)")
    parser.add_argument("--scheduler", default=None, metavar="ADDRESS",
                        help="dask scheduler address, e.g. tcp://host:8786 (default: a LocalCluster)")
    parser.add_argument("--summary-only", action="store_true",
                        help="keep per-point statistics and histograms, not per-iteration arrays")
    parser.add_argument("--quiet", action="store_true",
                     help="no progress bar or compile notice: stderr holds errors and warnings only")
    return parser


def run_cli(args: argparse.Namespace) -> int:
    """Body of ``brwsim sweep``: run, then print one line per outcome."""
    from brwsim.sweep import MixedCodeWarning, sweep

    argv = getattr(args, "argv", None)
    command = "brwsim " + " ".join(shlex.quote(a) for a in argv) if argv else ""
    config = args.config
    if config == "-":                       # the TOML text itself, read as a file would be
        import sys
        import tomllib

        from brwsim.errors import UserError

        try:
            config = tomllib.loads(sys.stdin.read())
        except tomllib.TOMLDecodeError as exc:
            raise UserError(f"standard input: invalid TOML: {exc}") from None
    with warning_lines(MixedCodeWarning):
        rep = sweep(config, args.out, jobs=args.jobs, backend=args.backend,
                    scheduler=args.scheduler, summary_only=args.summary_only, quiet=args.quiet,
                    command=command)
    rate = f", {rep.tree_nodes / rep.seconds:.3g} tree nodes/s" if rep.tree_nodes else ""
    redone = f", {rep.discarded} unusable shards redone" if rep.discarded else ""
    print(f"{rep.tasks} tasks: {rep.run} run, {rep.reused} reused{redone} "
          f"({rep.seconds:.1f} s{rate})")
    print(f"wrote {rep.path}")
    return 0
