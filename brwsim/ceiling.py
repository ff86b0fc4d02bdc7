"""Deprecated import path: the entropy-indexed ceiling lives in :mod:`brwsim.theory.ceiling`.

Re-exported for code written against brwsim 0.1, with a one-time DeprecationWarning.
"""

import warnings

from brwsim.theory.ceiling import SHAPES, ceiling, entropy_family, implied_entropy

__all__ = ["SHAPES", "entropy_family", "ceiling", "implied_entropy"]

warnings.warn("brwsim.ceiling is deprecated: import from brwsim.theory.ceiling", DeprecationWarning,
              stacklevel=2)
