"""brwsim: Monte Carlo speed-of-light of speculative decoding on branching random walks.

The public names below are imported on first use (PEP 562), so that ``import brwsim``
and the ``brwsim`` command's ``--help`` and ``--version`` load no numpy, numba or
xarray; ``from brwsim import simulate`` imports what ``simulate`` needs then.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from brwsim import interrupt as _interrupt

_interrupt.install_startup_handler()      # the command answers Ctrl-C during its imports too

from brwsim.errors import UserError
from brwsim.version import __version__

#: public name -> (module, attribute; None for the module itself)
_PUBLIC: dict[str, tuple[str, str | None]] = {
    "bank": ("brwsim.bank", None),
    "cost": ("brwsim.cost", None),
    "policies": ("brwsim.policies", None),
    "bank_stats": ("brwsim.bankstats", "bank_stats"),
    "generate": ("brwsim.generate", "generate"),
    "path_moments": ("brwsim.generate", "path_moments"),
    "plan": ("brwsim.plan", "plan"),
    "simulate": ("brwsim.simulate", "simulate"),
    "summarize": ("brwsim.simulate", "summarize"),
    "policy_gap": ("brwsim.simulate", "policy_gap"),
    "sweep": ("brwsim.sweep", "sweep"),
}
_PUBLIC.update({name: ("brwsim.families", name) for name in (
    "CharLSTM", "Transformer", "CorrelatedEntropy", "DepthDrift", "Dirichlet", "Empirical",
    "EntropyTarget", "Family", "Fixed", "Geometric", "MarkovRegime", "Mixture", "NGram",
    "Peaked", "SoftmaxNormal", "Tempered", "Uniform", "Zipf", "parse_family")})
_PUBLIC.update({name: ("brwsim.policies", name) for name in (
    "Chain", "DraftModel", "Dynamic", "Expansion", "KAry", "Noisy", "Optimal", "Sequoia",
    "parse_policy")})

__all__ = ["__version__", "UserError", "simulate", "summarize", "policy_gap", "parse_family", "Family",
           "Uniform", "Fixed", "Geometric", "Zipf", "Dirichlet", "SoftmaxNormal", "Peaked",
           "Mixture", "EntropyTarget", "Tempered", "Empirical", "MarkovRegime", "DepthDrift",
           "CorrelatedEntropy", "NGram", "CharLSTM", "Transformer", "bank", "policies", "Optimal", "Chain", "KAry", "Expansion",
           "Sequoia", "Dynamic", "Noisy", "DraftModel", "parse_policy", "generate", "path_moments", "sweep",
           "bank_stats", "cost", "plan"]


def __getattr__(name: str) -> Any:
    try:
        module, attr = _PUBLIC[name]
    except KeyError:
        raise AttributeError(f"module 'brwsim' has no attribute {name!r}") from None
    value = importlib.import_module(module)
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))


class _Package(types.ModuleType):
    """The package's module type. A public function named as its submodule (``sweep``,
    ``plan``, ``simulate``, ``generate``) stays the function: the import system's
    ``brwsim.sweep = <module>``, done when the submodule is first imported, binds the
    function of that name instead."""

    def __setattr__(self, name: str, value: Any) -> None:
        module, attr = _PUBLIC.get(name, ("", None))
        if attr is not None and isinstance(value, types.ModuleType) and value.__name__ == module:
            value = getattr(value, attr)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
