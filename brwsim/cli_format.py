"""Text helpers shared by the CLI commands: budget lists and right-aligned tables."""

from __future__ import annotations

from brwsim.errors import UserError

__all__ = ["parse_budgets", "format_table"]


def parse_budgets(text: str) -> list[int]:
    """Budgets from ``"1,4,16"`` or ranges ``"1..4096"`` (powers of two) / ``"1-64"`` (all).

    Raises
    ------
    brwsim.errors.UserError
        On anything that is not a positive integer.
    """
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            if ".." in part:
                lo, hi = (int(x) for x in part.split(".."))
                if lo < 1:
                    raise UserError(f"budgets must be >= 1, got {part!r}")
                p = lo
                while p <= hi:
                    out.append(p)
                    p *= 2
            elif "-" in part[1:]:
                lo, hi = (int(x) for x in part.split("-", 1))
                out.extend(range(lo, hi + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise UserError(f"budgets: {part!r} is not an integer (use e.g. 1,4,16 or 1..4096)") from None
    if not out:
        raise UserError("budgets must not be empty")
    if min(out) < 1:
        raise UserError(f"budgets must be positive integers (P >= 1), got {min(out)}")
    return out


def format_table(rows: list[list[str]], header: list[str]) -> str:
    """Right-aligned text table: a header line, a rule, then one line per row."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])
