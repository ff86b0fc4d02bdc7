"""Next-token distribution families (environments) and their string forms.

One family is one class in one file of this package; defining it registers it
(:data:`brwsim.families.base.REGISTRY`), so it is reachable from
:func:`parse_family`, sweep configurations and the CLI by its lower-case name, e.g.
``dirichlet(alpha=0.05, vocab=200)`` or
``mixture(families=[peaked(a=8, b=1, s=1.1, vocab=32000), zipf(s=1.1, vocab=32000)], weights=[0.7, 0.3])``;
:func:`parse_family` parses such strings (never evaluates them).
"""

from __future__ import annotations

from brwsim.families.base import REGISTRY, Family, Moments
from brwsim.families.charlstm import CharLSTM
from brwsim.families.correlatedentropy import CorrelatedEntropy
from brwsim.families.depthdrift import DepthDrift
from brwsim.families.dirichlet import Dirichlet
from brwsim.families.empirical import Empirical
from brwsim.families.entropytarget import EntropyTarget
from brwsim.families.fixed import Fixed
from brwsim.families.geometric import Geometric
from brwsim.families.markovregime import MarkovRegime
from brwsim.families.mixture import Mixture
from brwsim.families.ngram import NGram
from brwsim.families.parse import DEFAULT_FAMILY, FAMILIES, parse_family
from brwsim.families.peaked import Peaked
from brwsim.families.softmaxnormal import SoftmaxNormal
from brwsim.families.tempered import Tempered
from brwsim.families.transformer import Transformer
from brwsim.families.uniform import Uniform
from brwsim.families.zipf import Zipf

__all__ = ["Family", "Moments", "REGISTRY", "Uniform", "Fixed", "Geometric", "Zipf", "Dirichlet",
           "SoftmaxNormal", "Peaked", "Mixture", "EntropyTarget", "Tempered", "Empirical",
           "MarkovRegime", "DepthDrift", "CorrelatedEntropy", "NGram", "CharLSTM", "Transformer", "FAMILIES", "DEFAULT_FAMILY",
           "parse_family"]
