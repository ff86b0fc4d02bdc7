"""Modules imported on first use: what a command that never touches them need not pay for.

``xarray`` (with pandas) takes about 0.4 s to import, more than the theory of most families
takes to compute, and only commands that build, read or write Datasets use it. Modules that
name it at function level take it from here::

    from brwsim.lazy import xarray as xr

and the import happens at the first attribute access (``xr.Dataset``), through the
standard library's :class:`importlib.util.LazyLoader`.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

__all__ = ["lazy_module", "xarray"]


def lazy_module(name: str) -> ModuleType:
    """The module ``name``, executed at its first attribute access (at once if imported).

    Parameters
    ----------
    name : str
        A top-level module name, e.g. ``"xarray"``.

    Returns
    -------
    types.ModuleType
        The module (registered in :data:`sys.modules`, so a later ``import name`` gets
        the same object).
    """
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


xarray = lazy_module("xarray")
