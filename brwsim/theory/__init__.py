"""Theory: what a family's spine-step law says about E[X], without growing a tree.

Natural logarithms (nats) everywhere; the derivations are in ``docs/theory.md``.

* :mod:`~brwsim.theory.predict`: the paper's bound, the renewal prediction, the proven
  Lagrangian upper bound, E[max q] at P = 1, and the one-line check of degenerate families.
* :mod:`~brwsim.theory.contextual`: the proven bound of context-dependent environments
  (typed, depth-dependent and dominated spines).
* :mod:`~brwsim.theory.conditioned`: the proven bound conditioned on the first nodes of
  sampled trees, sharp at small budgets.
* :mod:`~brwsim.theory.renewal`: the renewal functions U and M on a grid and what they
  give for a budget.
* :mod:`~brwsim.theory.laws`, :mod:`~brwsim.theory.beta_laws`,
  :mod:`~brwsim.theory.zipf_laws`, :mod:`~brwsim.theory.sampled`: the spine-step laws the
  families carry, by kind (atoms and sums; Beta; Zipf; sampled in numba).
* :mod:`~brwsim.theory.convolution`: the FFT products the laws and renewal functions use.
* :mod:`~brwsim.theory.ceiling`: the optimal tokens per call at a mean entropy, and its
  inverse (it builds families, so it sits above them and is not imported here).
"""

from brwsim.theory.conditioned import small_budget_bound
from brwsim.theory.contextual import NoTheory
from brwsim.theory.laws import (
    MAX_EXACT_ATOMS,
    Moments,
    SpineLaw,
    SpineSteps,
    geometric_atom_count,
)
from brwsim.theory.predict import (
    BOUND_ALPHA,
    CURVES,
    Bound,
    Prediction,
    TheoryCurves,
    check_family,
    context_spine,
    exact_small_budget,
    is_iid,
    paper_bound,
    paper_bound_reason,
    prediction,
    prediction_with_se,
    theory_curves,
    upper_bound,
)
from brwsim.theory.renewal import renewal_functions, spine_steps

__all__ = [
    "SpineLaw",
    "SpineSteps",
    "Moments",
    "Prediction",
    "Bound",
    "BOUND_ALPHA",
    "TheoryCurves",
    "theory_curves",
    "paper_bound_reason",
    "context_spine",
    "is_iid",
    "NoTheory",
    "CURVES",
    "paper_bound",
    "prediction",
    "prediction_with_se",
    "upper_bound",
    "small_budget_bound",
    "exact_small_budget",
    "check_family",
    "renewal_functions",
    "spine_steps",
    "MAX_EXACT_ATOMS",
    "geometric_atom_count",
]
