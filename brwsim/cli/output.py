"""Machine-readable output of the commands (``--format table|json|csv``) and ``-`` for stdin.

A command that takes ``--format`` builds a *report*: a dict with ``command``, ``schema``
(:data:`SCHEMA`), its metadata, ``units`` (field name -> unit) and ``rows`` (a list of
dicts with the same keys, one per budget, batch size or shape). ``json`` prints the whole
report, NaN and infinities as ``null``; ``csv`` prints the rows (a header of field names,
then one line per row). The schema of every command is in docs/reference.md
("Machine-readable output"). With ``json`` or ``csv`` stdout holds only that document: the
``wrote FILE`` lines go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from brwsim.version import __version__

__all__ = ["FORMATS", "SCHEMA", "add_format", "report", "emit", "stdout_to_stderr",
           "stdin_file", "clean"]

FORMATS = ("table", "json", "csv")

#: Version of the JSON and CSV layouts: raised when a field is renamed or removed (a new
#: field does not raise it).
SCHEMA = 1


def add_format(parser: argparse.ArgumentParser) -> None:
    """The ``--format`` option (default ``table``)."""
    parser.add_argument("--format", choices=FORMATS, default="table",
                        help="table (default), json (every field, with units) or csv (the rows); "
                             "schema in docs/reference.md")


def clean(value: Any) -> Any:
    """``value`` as plain JSON: numpy scalars to Python numbers, NaN and inf to None."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return clean(value.tolist())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return value


def report(command: str, rows: list[dict[str, Any]], units: dict[str, str],
           **meta: Any) -> dict[str, Any]:
    """A report: ``command``, ``schema``, ``brwsim`` (the version), ``meta``, ``units``, ``rows``."""
    return {"command": command, "schema": SCHEMA, "brwsim": __version__, **meta,
            "units": units, "rows": rows}


def emit(fmt: str, doc: dict[str, Any], csv_rows: list[dict[str, Any]] | None = None) -> None:
    """Print ``doc`` as JSON, or its rows (``csv_rows`` when given) as CSV."""
    if fmt == "json":
        print(json.dumps(clean(doc), indent=1, allow_nan=False))
        return
    rows = clean(doc["rows"] if csv_rows is None else csv_rows)
    fields: list[str] = []
    for row in rows:
        fields.extend(k for k in row if k not in fields)
    writer = csv.DictWriter(sys.stdout, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})


@contextlib.contextmanager
def stdout_to_stderr(fmt: str) -> Iterator[None]:
    """With ``json`` or ``csv``, send what the block prints (``wrote FILE``) to stderr."""
    if fmt == "table":
        yield
        return
    with contextlib.redirect_stdout(sys.stderr):
        yield


@contextlib.contextmanager
def stdin_file(name: str, suffix: str) -> Iterator[str]:
    """``name``, or when it is ``-`` a temporary file ``stdin<suffix>`` holding standard input
    (removed afterwards), for readers that take a path and tell formats by suffix."""
    if name != "-":
        yield name
        return
    folder = Path(tempfile.mkdtemp(prefix="brwsim-stdin-"))
    try:
        path = folder / f"stdin{suffix}"
        with open(path, "wb") as fh:
            shutil.copyfileobj(sys.stdin.buffer, fh)
        yield str(path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
