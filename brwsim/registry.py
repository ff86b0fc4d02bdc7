"""Registries of named classes (families, policies): a class registers itself when defined.

A family or a policy declares its string-form ``name`` and how a sweep reads each of its
parameters (``param_kinds``, a kind of :data:`PARAM_KINDS` per parameter); defining the
subclass calls :func:`register`, so parsers, sweep configurations and the CLI find it by
name with no table to edit.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["PARAM_KINDS", "register"]

#: Parameter kinds a family or policy declares (``param_kinds``), and how a sweep reads them:
#: ``scalar`` (a number or string; a list makes a grid), ``list`` (a list of numbers or
#: strings is one value; a list of lists makes a grid), ``matrix`` (a list of lists is one
#: value; one more level makes a grid), ``family`` (a family string; a list makes a grid),
#: ``families`` (a list of family strings is one value; a list of lists makes a grid).
PARAM_KINDS = ("scalar", "list", "matrix", "family", "families")


def register(registry: dict[str, Any], cls: type, what: str) -> None:
    """Enter ``cls`` into ``registry`` under ``cls.name`` after checking its ``param_kinds``.

    Classes without a ``name`` of their own, or whose class name starts with ``_``, are
    abstract helpers and are skipped. Raises TypeError (a programming error, not a user's)
    for an unknown kind, a kind of a parameter the constructor does not take, or a name
    another class already holds.
    """
    name = cls.__dict__.get("name")
    if not name or cls.__name__.startswith("_"):
        return
    params = list(inspect.signature(cls.__init__).parameters)[1:]
    for key, kind in cls.param_kinds.items():
        if kind not in PARAM_KINDS or key not in params:
            raise TypeError(f"{cls.__name__}.param_kinds[{key!r}] = {kind!r}: not a kind "
                            f"of {PARAM_KINDS} or not a parameter of {params}")
    if name in registry and registry[name].__qualname__ != cls.__qualname__:
        raise TypeError(f"{what} name {name!r} is taken by {registry[name].__qualname__}")
    registry[name] = cls
