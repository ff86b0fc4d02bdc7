"""Exact ties follow the documented rule: lower depth, then lexicographically smaller rank path.

Lattice families tie constantly, and their positions sum(-log q) round differently along
different paths. The reference here is exact: every node with path probability above a cut
(computed in rationals), sorted by (p descending, depth, rank path), top P; then
P(X >= d) = sum of p over the tree's nodes of depth d. The kernels (optimal tree, the
exact noisy drafter, EAGLE) and the heapq reference must build that tree.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from brwsim import Fixed, Geometric, Uniform
from brwsim.environment import path_uniform
from brwsim.policies import Noisy, run_policy
from brwsim.reference import best_first, env_provider
from brwsim.simulate import run_iterations, seed_key, validate_budgets

N_TREES = 40000


def _exact_tree(probs, p_budget):
    """Top-P nodes by (p desc, depth, rank path), enumerated exactly (``probs`` sorted)."""
    cut = Fraction(1, 2)
    while True:
        nodes = []
        stack = [((), Fraction(1))]
        while stack:
            path, p = stack.pop()
            for r, q in enumerate(probs):
                child = p * q
                if child < cut:
                    break                       # sorted: later siblings are smaller too
                nodes.append((-child, len(path) + 1, path + (r,)))
                stack.append((path + (r,), child))
        if len(nodes) >= p_budget:              # all nodes with p >= cut, so every node
            return sorted(nodes)[:p_budget]     # before or tied with the P-th is listed
        cut /= 2


def _tail_law(tree):
    depth = max(d for _, d, _ in tree)
    return np.array([float(sum(-p for p, d, _ in tree if d == k)) for k in range(1, depth + 1)])


CASES = [  # family, its probabilities as exact rationals, budget
    (Fixed(probs=[0.5, 0.25, 0.125, 0.125]),
     [Fraction(1, 2), Fraction(1, 4), Fraction(1, 8), Fraction(1, 8)], 26),
    (Fixed(probs=[0.5, 0.25, 0.125, 0.125]),
     [Fraction(1, 2), Fraction(1, 4), Fraction(1, 8), Fraction(1, 8)], 75),
    (Uniform(3), [Fraction(1, 3)] * 3, 20),
    (Geometric(0.5), [Fraction(1, 2 ** (i + 1)) for i in range(40)], 60),
]
IDS = [f"{f!r}-P{p}" for f, _, p in CASES]


def test_documented_rule_on_the_issue_example():
    tree = _exact_tree(CASES[0][1], 26)
    paths = {path for _, _, path in tree}
    assert (0, 3, 0) in paths and (0, 0, 0, 1) not in paths
    assert _tail_law(tree)[3] == 0.0625                  # P(X >= 4), against 0.0945 before


def _check_histogram(x, law):
    """P(X >= d) of the sampled X against the exact law, 4.5 binomial SE per depth."""
    n = x.size
    for d in range(1, law.size + 2):
        p = law[d - 1] if d <= law.size else 0.0
        got = (x >= d).mean()
        se = max(np.sqrt(p * (1 - p) / n), 1.0 / n)
        assert abs(got - p) <= 4.5 * se, (d, got, p)


@pytest.mark.parametrize("fam,probs,p", CASES, ids=IDS)
def test_optimal_tree_follows_the_documented_tie_rule(fam, probs, p):
    tree = _exact_tree(probs, p)
    law = _tail_law(tree)
    acc, exp, dep, _, _ = run_iterations(fam.spec(), validate_budgets([p]), seed_key(0), 0,
                                         N_TREES)
    np.testing.assert_allclose(exp[0], float(law.sum()), rtol=0, atol=1e-12)
    assert np.all(dep[0] == law.size)
    _check_histogram(acc[0], law)


@pytest.mark.parametrize("fam,probs,p", CASES, ids=IDS)
def test_exact_noisy_drafter_follows_the_rule(fam, probs, p):
    """sigma = 0, T = 1: the drafter's threshold pass must give the optimal trees bit for bit."""
    budgets = validate_budgets([p])
    ref = run_iterations(fam.spec(), budgets, seed_key(1), 0, 2000)
    noisy = run_policy(Noisy(0.0), fam.spec(), budgets, seed_key(1), 0, 2000)
    for a, b in zip(ref[:3], noisy):
        np.testing.assert_array_equal(a, b)


def _sampled_x(tree, probs, seed, it):
    """X of the exact tree on iteration ``it``: the target's path (the kernels' rule) in it."""
    paths = {path for _, _, path in tree}
    cum = np.cumsum(np.exp(np.log([float(q) for q in probs])))
    path, x = (), 0
    while True:
        r = int(np.searchsorted(cum, path_uniform(seed, it, path), side="left"))
        path += (r,)
        if r >= len(probs) or path not in paths:
            return x
        x += 1


@pytest.mark.parametrize("fam,probs,p", CASES, ids=IDS)
def test_heapq_reference_and_kernel_build_the_exact_tree(fam, probs, p):
    """Per tree: X of the kernel, X of the heapq reference and X of the exact tree agree."""
    tree = _exact_tree(probs, p)
    law = _tail_law(tree)
    seed, n_it = 2, 300
    acc, exp, dep, _, _ = run_iterations(fam.spec(), validate_budgets([p]), seed_key(seed), 0,
                                         n_it)
    for it in range(n_it):
        x = _sampled_x(tree, probs, seed, it)
        assert acc[0, it] == x, it
        if it < 60:
            e, a, d = best_first(env_provider(fam, seed, it, k=64), [p],
                                 lambda q, it=it: path_uniform(seed, it, q))
            assert abs(e[0] - float(law.sum())) < 1e-12
            assert (a[0], d[0]) == (x, law.size), it


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_selection_takes_the_first_k_by_the_tie_order(seed):
    """_select_by (plain-float quickselect, full order near the cut) keeps, for every budget,
    the first k nodes of a sort by _before's rule: positions on a lattice, a few ulps apart
    within a tie, ties decided by depth, then index."""
    from functools import cmp_to_key

    from brwsim.kernels.select import TIE_REL, select_by as _select_by

    rng = np.random.default_rng(seed)
    n = 3000
    lattice = rng.integers(1, 40, n) * 0.37
    pos = lattice * (1.0 + rng.integers(-3, 4, n) * 2.0 ** -52)
    dep = rng.integers(1, 6, n).astype(np.int32)
    budgets = np.array([1, 17, 400, 401, 1500, 2999], np.int64)

    def cmp(i, j):
        a, b = pos[i], pos[j]
        if a != b and abs(a - b) > TIE_REL * max(abs(a), abs(b)):
            return -1 if a < b else 1
        return (dep[i], i) < (dep[j], j) and -1 or ((dep[i], i) > (dep[j], j) and 1 or 0)

    ranked = sorted(range(n), key=cmp_to_key(cmp))
    order = np.empty(n, np.int32)
    _select_by(n, pos, dep, order, budgets)
    for k in budgets[::-1]:
        assert set(order[:k].tolist()) == set(ranked[:k])
