"""Drafters of real speculative-decoding systems, scored against a real target model.

A drafter proposes a tree of token ids for one root's context; :mod:`~brwsim.drafters.score`
evaluates that tree with the target's :class:`~brwsim.backends.base.TreeEvaluator` and
reports the path probability of every drafted node (their sum is E[X | T]) or, at
temperature 0, how far the target's greedy path runs inside the tree.
"""
