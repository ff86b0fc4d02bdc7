"""Batched evaluators of a real language model over one root's token tree.

A backend evaluates the target's next-token log-probabilities at many tree nodes in one
forward pass (a tree attention mask over the root's context, whose KV cache is computed
once per root). :mod:`brwsim.backends.base` states the interface every backend meets.
"""
