"""Deprecated import path: the spine-step laws live in :mod:`brwsim.theory` (by kind).

``brwsim.spinelaw`` re-exports them for code written against brwsim 0.1 and warns once;
import from :mod:`brwsim.theory.laws`, :mod:`~brwsim.theory.beta_laws`,
:mod:`~brwsim.theory.zipf_laws` or :mod:`~brwsim.theory.sampled` instead.
"""

import warnings

from brwsim.theory.beta_laws import beta_logit_expect, beta_step_law, log_sigmoids, tempered_beta_law
from brwsim.theory.laws import (
    MAX_EXACT_ATOMS,
    MODES,
    X_CAP,
    BatchedAtoms,
    CdfLaw,
    ConvolvedLaw,
    Moments,
    SpineLaw,
    SpineSteps,
    SumLaw,
    geometric_atom_count,
    mixture_law,
)
from brwsim.theory.sampled import SampledLaw, sampled_law
from brwsim.theory.zipf_laws import ZipfLaw, zipf_spread_law

__all__ = ["MAX_EXACT_ATOMS", "MODES", "X_CAP", "BatchedAtoms", "CdfLaw", "ConvolvedLaw", "Moments",
           "SampledLaw", "SpineLaw", "SpineSteps", "SumLaw", "ZipfLaw", "beta_logit_expect",
           "log_sigmoids", "beta_step_law", "tempered_beta_law", "geometric_atom_count",
           "mixture_law", "sampled_law", "zipf_spread_law"]

warnings.warn("brwsim.spinelaw is deprecated: import the spine-step laws from brwsim.theory "
              "(brwsim.theory.laws, .beta_laws, .zipf_laws, .sampled)", DeprecationWarning,
              stacklevel=2)
