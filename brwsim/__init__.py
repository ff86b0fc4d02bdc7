"""brwsim: Monte Carlo speed-of-light of speculative decoding on branching random walks."""

__version__ = "0.1.0"

from brwsim.errors import UserError
from brwsim.families import (
    CharLSTM, CorrelatedEntropy, DepthDrift, Dirichlet, Empirical, EntropyTarget, Family, Fixed, Geometric,
    MarkovRegime, Mixture, NGram, Peaked, SoftmaxNormal, Tempered, Uniform, Zipf, parse_family,
)
from brwsim.simulate import policy_gap, simulate, summarize
from brwsim import policies
from brwsim.generate import generate, path_moments
from brwsim.policies import Chain, Dynamic, Expansion, KAry, Noisy, Optimal, Sequoia, parse_policy
from brwsim.sweep import sweep

__all__ = ["__version__", "UserError", "simulate", "summarize", "policy_gap", "parse_family", "Family",
           "Uniform", "Fixed", "Geometric", "Zipf", "Dirichlet", "SoftmaxNormal", "Peaked",
           "Mixture", "EntropyTarget", "Tempered", "Empirical", "MarkovRegime", "DepthDrift",
           "CorrelatedEntropy", "NGram", "CharLSTM", "policies", "Optimal", "Chain", "KAry", "Expansion",
           "Sequoia", "Dynamic", "Noisy", "parse_policy", "generate", "path_moments", "sweep"]
