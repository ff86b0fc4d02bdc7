"""The ``brwsim`` command: one module per command group, each with ``register(sub)``.

``run`` (:mod:`~brwsim.cli.run`), ``theory`` and ``ceiling`` (:mod:`~brwsim.cli.theory`),
``plan`` and ``export-acceptance`` (:mod:`~brwsim.cli.plan`), ``import-logprobs`` and
``bank-stats`` (:mod:`~brwsim.cli.bank`), ``sweep`` (:mod:`~brwsim.cli.sweep`), ``inspect``
and ``plot`` (:mod:`~brwsim.cli.inspect`); :mod:`~brwsim.cli.main` builds the parser and
turns every failure a user can cause into one line and exit status 2;
:mod:`~brwsim.cli.parser` holds the command table (light: ``--help`` imports no numpy).
"""

from __future__ import annotations

from typing import Any

from brwsim.cli.main import build_parser, main

__all__ = ["main", "build_parser", "parse_budgets", "parse_batch_sizes", "format_table"]


def __getattr__(name: str) -> Any:
    """``parse_budgets``, ``parse_batch_sizes``, ``format_table``, imported on first use."""
    if name == "parse_batch_sizes":
        from brwsim.cli.common import parse_batch_sizes
        return parse_batch_sizes
    if name in ("parse_budgets", "format_table"):
        from brwsim import textform
        return getattr(textform, name)
    raise AttributeError(f"module 'brwsim.cli' has no attribute {name!r}")
