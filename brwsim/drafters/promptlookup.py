"""Prompt lookup: drafts copied from the context itself (vLLM's ``ngram`` method).

The drafter looks for the longest suffix of the context, between ``min_n`` and ``max_n``
tokens long, that also occurs earlier in the context, and proposes the tokens that
followed that earlier occurrence. This is the rule of vLLM's ``NgramProposer``
(``prompt_lookup_min`` / ``prompt_lookup_max``; ``vllm/v1/spec_decode/ngram_proposer.py``)
and of prompt lookup decoding in llama.cpp: among occurrences of the longest matching
suffix, the earliest in the context wins, and a continuation is cut at the context's end.

:func:`lookup_chain` is that rule (a chain of at most ``k`` tokens). :func:`lookup_tree`
spends a budget of ``P`` nodes on several continuations at once: every earlier occurrence
of every matching suffix length, longest suffix first and earliest occurrence first within
a length, merged into one prefix tree until the budget is spent. Its first branch is the
chain's, so the tree never covers less of the target's path than the chain.

Both work on token ids only: the drafter never sees the target's probabilities.
"""

from __future__ import annotations

import numpy as np

from brwsim.errors import UserError

__all__ = ["check_ngram_range", "lookup_chain", "lookup_tree", "suffix_matches"]


def check_ngram_range(min_n: int, max_n: int) -> tuple[int, int]:
    """Validate a prompt-lookup n-gram range: ``1 <= min_n <= max_n``."""
    for name, v in (("min", min_n), ("max", max_n)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise UserError(f"ngram lookup: {name} must be an integer, got {v!r}")
    if min_n < 1:
        raise UserError(f"ngram lookup: min must be at least 1, got {min_n}")
    if max_n < min_n:
        raise UserError(f"ngram lookup: min ({min_n}) exceeds max ({max_n})")
    return int(min_n), int(max_n)


def suffix_matches(context: np.ndarray, n: int) -> np.ndarray:
    """Start indices ``j`` (ascending) with ``context[j:j+n]`` equal to the last ``n``
    tokens of ``context``, the suffix itself excluded."""
    t = np.asarray(context)
    m = t.shape[0]
    if n < 1 or m <= n:
        return np.empty(0, dtype=np.int64)
    suffix = t[m - n:]
    # Windows of length n that start before the suffix does.
    win = np.lib.stride_tricks.sliding_window_view(t[:m - 1], n)
    return np.flatnonzero((win == suffix).all(axis=1)).astype(np.int64)


def lookup_chain(context: np.ndarray, k: int, min_n: int = 1, max_n: int = 4) -> np.ndarray:
    """vLLM's prompt-lookup proposal: at most ``k`` tokens after the earliest earlier
    occurrence of the longest context suffix of ``min_n..max_n`` tokens.

    Returns an empty array when no suffix of at least ``min_n`` tokens recurs.
    """
    min_n, max_n = check_ngram_range(min_n, max_n)
    t = np.asarray(context, dtype=np.int64)
    for n in range(min(max_n, t.shape[0] - 1), min_n - 1, -1):
        starts = suffix_matches(t, n)
        if starts.size:
            begin = int(starts[0]) + n
            return t[begin:begin + max(int(k), 0)].copy()
    return np.empty(0, dtype=np.int64)


def lookup_tree(context: np.ndarray, budget: int, min_n: int = 1, max_n: int = 4,
                depth: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A prefix tree of at most ``budget`` nodes from every recurring context suffix.

    Continuations are taken longest suffix first, and within one suffix length from the
    earliest occurrence on; each is cut at ``depth`` tokens (default: ``budget``) and at the
    context's end, and merged into the tree token by token until ``budget`` nodes exist.

    Returns
    -------
    parents, tokens : numpy.ndarray
        int64, in insertion order (a parent precedes its children; ``-1`` is the root).
        The first ``len(lookup_chain(context, budget, min_n, max_n))`` nodes form the
        chain's proposal.
    """
    min_n, max_n = check_ngram_range(min_n, max_n)
    t = np.asarray(context, dtype=np.int64)
    budget = int(budget)
    cut = budget if depth is None else int(depth)
    parents: list[int] = []
    tokens: list[int] = []
    children: dict[tuple[int, int], int] = {}
    for n in range(min(max_n, t.shape[0] - 1), min_n - 1, -1):
        for j in suffix_matches(t, n):
            node = -1
            for tok in t[j + n:j + n + cut]:
                key = (node, int(tok))
                nxt = children.get(key)
                if nxt is None:
                    if len(tokens) == budget:
                        return np.array(parents, np.int64), np.array(tokens, np.int64)
                    nxt = len(tokens)
                    children[key] = nxt
                    parents.append(node)
                    tokens.append(int(tok))
                node = nxt
    return np.array(parents, np.int64), np.array(tokens, np.int64)
