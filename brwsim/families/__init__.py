"""Next-token distribution families (environments) and their string forms.

Every family is reachable from the CLI by its lower-case name, e.g.
``dirichlet(alpha=0.05, vocab=200)`` or
``mixture(families=[peaked(a=8, b=1, s=1.1, vocab=32000), zipf(s=1.1, vocab=32000)], weights=[0.7, 0.3])``;
:func:`parse_family` parses such strings (never evaluates them).
"""

from __future__ import annotations

from brwsim.families.base import Family, Moments
from brwsim.families.charlstm import CharLSTM
from brwsim.families.combinators import Mixture, Tempered
from brwsim.families.contextual import CorrelatedEntropy, DepthDrift, MarkovRegime
from brwsim.families.empirical import Empirical, EntropyTarget
from brwsim.families.ngram import NGram
from brwsim.families.parametric import Dirichlet, Fixed, Geometric, Peaked, SoftmaxNormal, Uniform, Zipf
from brwsim.families.parse import FAMILIES, DEFAULT_FAMILY, parse_family

__all__ = ["Family", "Moments", "Uniform", "Fixed", "Geometric", "Zipf", "Dirichlet",
           "SoftmaxNormal", "Peaked", "Mixture", "EntropyTarget", "Tempered", "Empirical",
           "MarkovRegime", "DepthDrift", "CorrelatedEntropy", "NGram", "CharLSTM", "FAMILIES", "DEFAULT_FAMILY",
           "parse_family"]
