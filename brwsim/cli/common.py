"""What every ``brwsim`` command shares: the one-line-error parser, the family epilog.

Every subcommand module has ``register(sub)``, adding its parsers to the subparsers of
:func:`brwsim.cli.main.build_parser` (created with :class:`Parser`, so a usage error is one
line and status 2, as every other bad input).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import warnings
from collections.abc import Iterator
from typing import Any

from brwsim.cli.parser import DEFAULT_FAMILY_MARK, Parser
from brwsim.errors import UserError

__all__ = ["Parser", "family_epilog", "DEFAULT_BUDGETS", "parse_batch_sizes", "value_se",
           "bound_check", "reason_lines", "small_budget_column", "SMALL_BUDGET_MAX",
           "warning_lines", "meaningful_asymptotic", "quiet_compiles"]

DEFAULT_BUDGETS = ",".join(str(2 ** i) for i in range(13))    # 1, 2, 4, ..., 4096


def family_epilog(policies: bool = False) -> str:
    """The family names and parameters (from ``brwsim.families.FAMILIES``) for ``--help``;
    with ``policies``, the drafting policies' too (``brwsim.policies.POLICIES``)."""
    import inspect

    from brwsim.families import FAMILIES
    from brwsim.policies import POLICIES

    def signature(cls: type) -> str:
        params = []
        for p in list(inspect.signature(cls.__init__).parameters.values())[1:]:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):      # no parameters of its own
                continue
            params.append(p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}")
        return ", ".join(params)

    lines = ["families (name(parameters), defaults after '='; see the docstrings of brwsim.<Name>):"]
    lines += [f"  {name}({signature(cls)})" for name, cls in sorted(FAMILIES.items())]
    if policies:
        lines.append("policies for --policy (see the docstrings of brwsim.policies.<Name>):")
        lines += [f"  {name}({signature(cls)})" for name, cls in sorted(POLICIES.items())]
    return "\n".join(lines)


def parse_batch_sizes(text: str) -> list[int]:
    """Batch sizes from ``"1,8,64"`` or ranges as for budgets (``"1..64"``: powers of two)."""
    from brwsim.textform import parse_budgets

    try:
        return parse_budgets(text)
    except UserError as exc:
        raise UserError(str(exc).replace("budgets", "batch sizes").replace("P >= 1", "B >= 1")) from None


def value_se(v: float, se: float = 0.0) -> str:
    """``value``, ``value ± se`` (a sampled spine law's standard error) or ``n/a`` (NaN)."""
    if math.isnan(v):
        return "n/a"
    return f"{v:.4f}" if not se > 0 else f"{v:.4f} ± {se:.4f}"


#: Units in the last place by which a mean may exceed a bound and still be "below" it: the
#: bound is summed along other roundings than the mean (on uniform laws of 2 to 59 tokens at
#: P = 1 the two differ by up to 55 ulps where they are equal), a relative 5.7e-14.
BOUND_ULPS = 256


def bound_check(mean: float, se: float, bound: float, bound_se: float = 0.0) -> str:
    """How a Monte Carlo mean sits against a proven upper bound, for a table cell.

    ``below`` (mean <= bound, or above it by at most :data:`BOUND_ULPS` units in the last
    place: the two are computed along different roundings, so an exact tie may come out a
    few dozen ulps either way), ``within SE`` (above by at most 4 combined standard errors:
    sampling error) or ``ABOVE (bug)`` (above by more: the bound or the simulation is
    wrong); ``n/a`` without a bound.
    """
    if math.isnan(bound) or math.isnan(mean):
        return "n/a"
    if mean <= bound + BOUND_ULPS * math.ulp(max(abs(mean), abs(bound))):
        return "below"             # equal up to rounding (a law whose tree is exact: a tie)
    sigma = math.hypot(se if se > 0 else 0.0, bound_se if bound_se > 0 else 0.0)
    return "within SE" if mean - bound <= 4 * sigma else "ABOVE (bug)"


def reason_lines(ds, names) -> list[str]:
    """One line per variable of ``ds`` stored as NaN with a ``reason`` attribute."""
    out = []
    for name in names:
        if name in ds and "reason" in ds[name].attrs:
            out.append(f"{name}: n/a: {ds[name].attrs['reason']}")
    return out


@contextlib.contextmanager
def warning_lines(category: type[Warning]) -> Iterator[None]:
    """Print every warning raised inside as one ``brwsim: warning: <message>`` line on
    stderr, once the block is done; those of ``category`` each time they are raised.

    Parameters
    ----------
    category : type of Warning
        The command's own warning (e.g. :class:`brwsim.bank.BadInputWarning`), never
        filtered out as a repeat.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", category)
        yield
    for w in caught:
        print(f"brwsim: warning: {w.message}", file=sys.stderr)


def add_command(sub: Any, name: str, func: Any, help: str, description: str | None = None,
                family: bool = False) -> argparse.ArgumentParser:
    """Add the subcommand ``name`` (running ``func(args)``) to ``sub``, the parser's subparsers.

    With ``family`` the subcommand lists the families in its epilog (built only for
    ``--help``) and takes ``--family`` (default: the LLM-like mixture, filled in by
    :func:`brwsim.cli.main.main` after parsing, so that parsing imports no family).
    Returns the subcommand's parser for its own options.
    """
    parser = sub.add_parser(name, help=help, description=description,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    if family:
        parser.epilog_source = family_epilog       # built (importing the families) for --help only
        parser.add_argument("--family", default=DEFAULT_FAMILY_MARK,
                            help="family string, e.g. 'dirichlet(alpha=0.05, vocab=200)' "
                                 "(default: an LLM-like mixture)")
    parser.set_defaults(func=func)
    return parser


def write_output(ds: Any, out: str) -> None:
    """Write ``ds`` to ``out`` atomically and say so (nothing when ``out`` is empty)."""
    from brwsim.io import write_netcdf_atomic

    if out:
        write_netcdf_atomic(ds, out)
        print(f"wrote {out}")


def meaningful_asymptotic(values: Any, mu: float, budgets: Any) -> np.ndarray:
    """The key-renewal asymptotic where it means something: NaN where mu P < 1 (its
    log(mu P) term has the wrong sign there) or where it is negative (E[X] >= 0)."""
    import numpy as np

    values = np.array(values, dtype=np.float64, copy=True)
    budgets = np.asarray(budgets, dtype=np.float64)
    values[(mu * budgets < 1.0) | (values < 0)] = np.nan
    return values


@contextlib.contextmanager
def quiet_compiles(quiet: bool) -> Iterator[None]:
    """With ``quiet``, no compile notice on stderr from this process or from workers it
    starts (``BRWSIM_COMPILE_NOTICE=0`` for them); both restored afterwards."""
    if not quiet:
        yield
        return
    import os

    from brwsim.kernels import COMPILE_NOTICE

    old_stream, old_env = COMPILE_NOTICE.stream, os.environ.get("BRWSIM_COMPILE_NOTICE")
    os.environ["BRWSIM_COMPILE_NOTICE"] = "0"
    with open(os.devnull, "w") as sink:
        COMPILE_NOTICE.stream = sink
        try:
            yield
        finally:
            COMPILE_NOTICE.stream = old_stream
            if old_env is None:
                os.environ.pop("BRWSIM_COMPILE_NOTICE", None)
            else:
                os.environ["BRWSIM_COMPILE_NOTICE"] = old_env


#: The conditioned bound's cost grows with P (its frontier holds about P nodes per tree):
#: beyond this budget the unconditioned bound is as sharp and the column shows n/a.
SMALL_BUDGET_MAX = 256


def small_budget_column(family: Any, budgets: np.ndarray) -> tuple[Prediction, str]:
    """The proven small-budget bound (:func:`brwsim.theory.small_budget_bound`) for
    P <= :data:`SMALL_BUDGET_MAX` (NaN elsewhere), and a note on where it is n/a (the
    reason, for a family it does not apply to), as ``theory`` and ``run`` print it."""
    import numpy as np
    from brwsim.theory import Prediction, small_budget_bound

    nan = np.full(budgets.shape, np.nan)
    small = budgets <= SMALL_BUDGET_MAX
    if not small.any():
        return Prediction(nan, nan), f" (n/a: computed for P <= {SMALL_BUDGET_MAX})"
    try:
        res = small_budget_bound(family, budgets[small])
    except UserError as exc:
        return Prediction(nan, nan), f" (n/a: {exc})"
    value, se = nan.copy(), nan.copy()
    value[small], se[small] = res.value, res.se
    note = "" if small.all() else f" (computed for P <= {SMALL_BUDGET_MAX})"
    return Prediction(value, se), note
