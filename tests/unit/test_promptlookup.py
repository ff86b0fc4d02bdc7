"""Prompt lookup (vLLM's ngram method) and scoring drafted trees against a target."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from brwsim.drafters.promptlookup import lookup_chain, lookup_tree, suffix_matches
from brwsim.drafters.score import greedy_accepted, score_tree, tempered
from brwsim.errors import UserError
from tests.unit.seqtarget import FunctionTarget


def _brute_chain(t, k, lo, hi):
    """The rule stated in vLLM's documentation, by brute force: the longest suffix
    (lo..hi tokens) occurring earlier, its earliest occurrence, the k tokens after it."""
    t = list(t)
    for n in range(hi, lo - 1, -1):
        if n >= len(t):
            continue
        suf = t[len(t) - n:]
        for j in range(len(t) - n):
            if t[j:j + n] == suf:
                return t[j + n:j + n + k]
    return []


def test_vllm_docstring_example():
    # vLLM's NgramProposer.propose docstring: [1,2,3,4,2,3], min 2, max 3, k 4 -> [4,2,3]
    assert lookup_chain(np.array([1, 2, 3, 4, 2, 3]), 4, 2, 3).tolist() == [4, 2, 3]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=0, max_size=30), st.integers(0, 6),
       st.integers(1, 3), st.integers(0, 3))
def test_chain_matches_brute_force(toks, k, lo, extra):
    hi = lo + extra
    assert lookup_chain(np.array(toks, np.int64), k, lo, hi).tolist() == _brute_chain(toks, k, lo, hi)


def test_suffix_matches_exclude_the_suffix_itself():
    t = np.array([5, 5, 5])
    assert suffix_matches(t, 2).tolist() == [0]       # overlapping, not the suffix at 1
    assert suffix_matches(t, 3).size == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=30), st.integers(1, 12))
def test_tree_is_prefix_closed_unique_and_starts_with_the_chain(toks, budget):
    t = np.array(toks, np.int64)
    parents, tokens = lookup_tree(t, budget, 1, 3)
    assert tokens.size <= budget
    assert np.all(parents < np.arange(parents.size))
    pairs = list(zip(parents.tolist(), tokens.tolist()))
    assert len(set(pairs)) == len(pairs)              # a trie: no duplicate child
    chain = lookup_chain(t, budget, 1, 3)
    assert tokens[:chain.size].tolist() == chain.tolist()
    assert parents[:chain.size].tolist() == list(range(-1, chain.size - 1))


@pytest.mark.parametrize("lo, hi", [(0, 2), (3, 2), (1.5, 2)])
def test_bad_ranges(lo, hi):
    with pytest.raises(UserError, match="ngram lookup"):
        lookup_chain(np.array([1, 2, 1]), 2, lo, hi)


def test_score_tree_equals_products_along_paths():
    target = FunctionTarget()
    ctx = np.array([1, 2, 3, 1, 2], np.int64)
    parents = np.array([-1, 0, 0, -1, 1, 4], np.int64)
    tokens = np.array([3, 1, 4, 2, 0, 6], np.int64)
    for temp in (1.0, 0.7):
        s = score_tree(target, ctx, parents, tokens, temp)
        assert target.calls <= 1                      # one batch for the internal nodes
        target.calls = 0
        for i in range(tokens.size):
            path, j = [], i
            while j >= 0:
                path.append(j)
                j = parents[j]
            seq, p = tuple(ctx), 1.0
            for j in reversed(path):
                p *= np.exp(tempered(target.full(seq), temp)[tokens[j]])
                seq += (int(tokens[j]),)
            assert s.path_prob[i] == pytest.approx(p, rel=1e-12)
        assert s.expected_accepted == pytest.approx(s.path_prob.sum(), rel=1e-15)
        assert s.depth.tolist() == [1, 2, 2, 1, 3, 4]


def test_greedy_scores_the_argmax_path():
    target = FunctionTarget()
    ctx = np.array([4, 4], np.int64)
    seq, chain = tuple(ctx), []
    for _ in range(3):                                # the target's own argmax chain
        tok = int(np.argmax(target.full(seq)))
        chain.append(tok)
        seq += (tok,)
    wrong = (chain[2] + 1) % target.vocab_size
    parents = np.array([-1, 0, 1, 1], np.int64)
    tokens = np.array([chain[0], chain[1], wrong, chain[2]], np.int64)
    s = score_tree(target, ctx, parents, tokens, temperature=0)
    assert s.path_prob.tolist() == [1.0, 1.0, 0.0, 1.0]
    assert greedy_accepted(s) == 3


def test_greedy_score_walks_only_the_argmax_path():
    """T = 0 on random drafted trees: a node scores 1 exactly when every token on its path
    is the target's argmax there, and only drafted nodes on that path are evaluated."""
    rng = np.random.default_rng(5)
    target = FunctionTarget()
    ctx = np.array([4, 1], np.int64)
    for _ in range(40):
        n = int(rng.integers(1, 30))
        parents = np.array([int(rng.integers(-1, i)) for i in range(n)], np.int64)
        tokens = rng.integers(0, target.vocab_size, n)
        want = np.zeros(n)
        seqs = []
        for i in range(n):
            seq = tuple(ctx) if parents[i] < 0 else seqs[parents[i]]
            top = int(np.argmax(target.full(seq)))
            ok = parents[i] < 0 or want[parents[i]] == 1.0
            first = not any(parents[j] == parents[i] and tokens[j] == tokens[i]
                            for j in range(i))
            want[i] = 1.0 if ok and first and tokens[i] == top else 0.0
            seqs.append(seq + (int(tokens[i]),))
        target.calls = 0
        s = score_tree(target, ctx, parents, tokens, temperature=0)
        assert s.path_prob.tolist() == want.tolist()
        has_child = np.isin(np.arange(n), parents)
        assert target.calls == int(np.count_nonzero(want.astype(bool) & has_child))


def test_score_tree_bad_trees():
    target = FunctionTarget()
    with pytest.raises(UserError, match="precede"):
        score_tree(target, np.array([1]), np.array([1, -1]), np.array([0, 0]))
    with pytest.raises(UserError, match="vocabulary"):
        score_tree(target, np.array([1]), np.array([-1]), np.array([9]))
