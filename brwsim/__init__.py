"""brwsim: Monte Carlo speed-of-light of speculative decoding on branching random walks."""

from brwsim import interrupt as _interrupt

_interrupt.install_startup_handler()      # the command answers Ctrl-C during its imports too

from brwsim import bank, cost, policies
from brwsim.bankstats import bank_stats
from brwsim.errors import UserError
from brwsim.families import (
    CharLSTM,
    Transformer,
    CorrelatedEntropy,
    DepthDrift,
    Dirichlet,
    Empirical,
    EntropyTarget,
    Family,
    Fixed,
    Geometric,
    MarkovRegime,
    Mixture,
    NGram,
    Peaked,
    SoftmaxNormal,
    Tempered,
    Uniform,
    Zipf,
    parse_family,
)
from brwsim.generate import generate, path_moments
from brwsim.plan import plan
from brwsim.policies import (
    Chain,
    DraftModel,
    Dynamic,
    Expansion,
    KAry,
    Noisy,
    Optimal,
    Sequoia,
    parse_policy,
)
from brwsim.simulate import policy_gap, simulate, summarize
from brwsim.sweep import sweep
from brwsim.version import __version__

__all__ = ["__version__", "UserError", "simulate", "summarize", "policy_gap", "parse_family", "Family",
           "Uniform", "Fixed", "Geometric", "Zipf", "Dirichlet", "SoftmaxNormal", "Peaked",
           "Mixture", "EntropyTarget", "Tempered", "Empirical", "MarkovRegime", "DepthDrift",
           "CorrelatedEntropy", "NGram", "CharLSTM", "Transformer", "bank", "policies", "Optimal", "Chain", "KAry", "Expansion",
           "Sequoia", "Dynamic", "Noisy", "DraftModel", "parse_policy", "generate", "path_moments", "sweep",
           "bank_stats", "cost", "plan"]
