"""brwsim: Monte Carlo speed-of-light of speculative decoding on branching random walks."""

__version__ = "0.1.0"
