"""Shared helpers of the context-dependent families: component ranges per context."""

from __future__ import annotations

from typing import Any

from brwsim.errors import UserError
from brwsim.families.base import Component, Family

__all__ = []


def _families(families: Any, what: str) -> list[Family]:
    if not isinstance(families, (list, tuple)) or not families:
        raise UserError(f"{what} needs a non-empty list of families")
    for i, f in enumerate(families):
        if not isinstance(f, Family):
            raise UserError(f"families[{i}] must be a family, got {f!r}")
        if not f.iid or len(f.context_program()) > 1:
            raise UserError(f"families[{i}]: context-dependent families do not nest")
    return list(families)


def _ranges(families: list[Family], beta: float) -> tuple[list[Component], list[float]]:
    """Concatenated components and the flat [lo_0, hi_0, lo_1, hi_1, ...] of each family."""
    comps: list[Component] = []
    bounds: list[float] = []
    for fam in families:
        own = fam.components(beta)
        bounds += [len(comps), len(comps) + len(own)]
        comps += own
    return comps, bounds
