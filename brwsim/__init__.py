"""brwsim: Monte Carlo speed-of-light of speculative decoding on branching random walks."""

__version__ = "0.1.0"

from brwsim.errors import UserError
from brwsim.families import (
    CorrelatedEntropy, DepthDrift, Dirichlet, Empirical, EntropyTarget, Family, Fixed, Geometric,
    MarkovRegime, Mixture, Peaked, SoftmaxNormal, Tempered, Uniform, Zipf, parse_family,
)
from brwsim.simulate import simulate, summarize

__all__ = ["__version__", "UserError", "simulate", "summarize", "parse_family", "Family",
           "Uniform", "Fixed", "Geometric", "Zipf", "Dirichlet", "SoftmaxNormal", "Peaked",
           "Mixture", "EntropyTarget", "Tempered", "Empirical", "MarkovRegime", "DepthDrift",
           "CorrelatedEntropy"]
