"""The ``brwsim`` command: one module per command group, each with ``register(sub)``.

``run`` (:mod:`~brwsim.cli.run`), ``theory`` and ``ceiling`` (:mod:`~brwsim.cli.theory`),
``plan`` and ``export-acceptance`` (:mod:`~brwsim.cli.plan`), ``import-logprobs`` and
``bank-stats`` (:mod:`~brwsim.cli.bank`), ``sweep`` (:mod:`~brwsim.cli.sweep`), ``inspect``
and ``plot`` (:mod:`~brwsim.cli.inspect`); :mod:`~brwsim.cli.main` builds the parser and
turns every failure a user can cause into one line and exit status 2.
"""

from brwsim.cli.common import parse_batch_sizes
from brwsim.cli.main import build_parser, main
from brwsim.textform import format_table, parse_budgets

__all__ = ["main", "build_parser", "parse_budgets", "parse_batch_sizes", "format_table"]
