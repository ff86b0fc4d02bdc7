"""Text forms shared by the commands and the sweep configurations: budget lists, right-aligned tables."""

from __future__ import annotations

import re

from brwsim.errors import UserError
from brwsim.validate import MAX_BUDGET, MAX_BUDGETS, echo

__all__ = ["parse_budgets", "format_table"]


def parse_budgets(text: str) -> list[int]:
    """Budgets from ``"1,4,16"`` or ranges ``"1..4096"`` (powers of two) / ``"1-64"`` (all).

    Every budget must be in ``[1, MAX_BUDGET]`` (2**26); ranges are checked before they are
    expanded, so ``"1-1000000000"`` is refused at once.

    Raises
    ------
    brwsim.errors.UserError
        On anything that is not a positive integer, or a budget above the maximum.
    """
    if not isinstance(text, str):
        raise UserError(f"budgets must be a string like '1,4,16' or '1..4096', got {echo(text)}")
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if ".." in part:
            lo, hi = (_budget_int(x, part) for x in _two(part.split(".."), part))
            step = "power-of-two range"
        elif "-" in part[1:]:
            lo, hi = (_budget_int(x, part) for x in _two(part.split("-", 1), part))
            step = "range"
        else:
            lo = hi = _budget_int(part, part)
            step = ""
        for v in (lo, hi):
            if v < 1:
                raise UserError(f"budgets must be positive integers (P >= 1), got {v} in {echo(part)}")
            if v > MAX_BUDGET:
                raise UserError(f"budget {v} in {echo(part)} exceeds the supported maximum 2**26")
        if step and hi < lo:
            raise UserError(f"budgets: empty {step} {echo(part)} (the end is below the start)")
        if step == "power-of-two range":
            p = lo
            while p <= hi:
                out.append(p)
                p *= 2
        else:
            if len(out) + hi - lo + 1 > MAX_BUDGETS:
                raise UserError(f"budgets: {echo(part)} gives more than {MAX_BUDGETS} budgets")
            out.extend(range(lo, hi + 1))
    if not out:
        raise UserError("budgets must not be empty")
    return out


def _two(pieces: list[str], part: str) -> list[str]:
    if len(pieces) != 2:
        raise UserError(f"budgets: {echo(part)} is not a range (use e.g. 1..4096 or 1-64)")
    return pieces


def _budget_int(text: str, part: str) -> int:
    text = text.strip()
    if not re.fullmatch(r"[-+]?\d{1,20}", text):
        raise UserError(f"budgets: {echo(part)} is not an integer or a range "
                        "(use e.g. 1,4,16 or 1..4096)")
    return int(text)


def format_table(rows: list[list[str]], header: list[str]) -> str:
    """Right-aligned text table: a header line, a rule, then one line per row."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])
