"""The optimal-tree kernel against exact answers, brute force and the heapq reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from brwsim import Dirichlet, Fixed, Uniform, simulate
from brwsim.environment import node_logprobs, path_uniform
from brwsim.reference import best_first, env_provider

BUDGETS = [1, 3, 10, 50, 200]


@pytest.mark.parametrize("k,levels", [(2, 3), (2, 6), (3, 4), (5, 2)])
def test_uniform_full_levels_exact(k, levels):
    """k + k^2 + ... + k^d nodes: E[X | T] = d and X = d on every iteration."""
    p = sum(k ** i for i in range(1, levels + 1))
    ds = simulate(Uniform(k), [p], 40, seed=7)
    np.testing.assert_allclose(ds.expected_accepted.values, levels, rtol=0, atol=1e-12)
    assert np.all(ds.accepted.values == levels)
    assert np.all(ds.depth.values == levels)


def test_uniform_issue_example():
    ds = simulate(Uniform(2), [14], 100, seed=0)
    np.testing.assert_allclose(ds.expected_accepted.values, 3.0, rtol=0, atol=1e-12)


def test_uniform_partial_level():
    """A partial level adds (extra nodes) * k^-(d+1): ties broken without changing E[X | T]."""
    ds = simulate(Uniform(2), [14 + 5], 10, seed=1)
    assert np.allclose(ds.expected_accepted.values, 3 + 5 / 16, atol=1e-15)
    assert np.all(ds.depth.values == 4)


def test_matches_heapq_reference(family):
    """Same environment, same tree: E[X | T] to 1e-12, X and depth exactly."""
    _check_reference(family)


def test_matches_heapq_reference_on_aggregated_dirichlet():
    """Dirichlet's binary-aggregation sampler (small alpha, vocab 100-1024), whose nodes
    list only the ranks above the pass's cut-off."""
    _check_reference(Dirichlet(0.05, 200))


def _check_reference(family, budgets=BUDGETS, iterations=4, seed=3, k=256):
    """simulate() against the heapq reference on the same environment (also used by
    test_resume)."""
    ds = simulate(family, budgets, iterations, seed=seed)
    for it in range(iterations):
        e, a, d = best_first(env_provider(family, seed, it, k=k), budgets,
                             lambda p, it=it: path_uniform(seed, it, p))
        np.testing.assert_allclose(ds.expected_accepted.values[:, it], e, rtol=0, atol=1e-12)
        assert list(ds.accepted.values[:, it]) == a
        assert list(ds.depth.values[:, it]) == d


def _all_trees(size: int, width: int):
    """Every prefix-closed set of ``size`` non-root nodes of the ``width``-ary tree."""
    def extend(tree: frozenset):
        frontier = {(r,) for r in range(width)} | {v + (r,) for v in tree for r in range(width)}
        return {tree | {v} for v in frontier - tree}

    level = {frozenset()}
    for _ in range(size):
        level = set().union(*(extend(t) for t in level))
    return level


def _path_prob(lq_of, path):
    return math.exp(sum(lq_of(path[:i])[path[i]] for i in range(len(path))))


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5])
def test_brute_force_optimal_fixed(size):
    fam = Fixed([0.5, 0.3, 0.15])
    lq = np.log(fam.probs)
    best = max(sum(_path_prob(lambda _p: lq, v) for v in t) for t in _all_trees(size, 3))
    ds = simulate(fam, [size], 1, seed=0)
    assert ds.expected_accepted.values[0, 0] == pytest.approx(best, abs=1e-12)


@pytest.mark.parametrize("iteration", range(4))
def test_brute_force_optimal_random_environment(iteration):
    """On a random Dirichlet environment, no prefix-closed tree of size 5 beats the kernel."""
    fam = Dirichlet(0.5, 3)
    spec = fam.spec()
    cache = {}

    def lq_of(path):
        if path not in cache:
            cache[path] = node_logprobs(spec, 11, iteration, path, 3)
        return cache[path]

    best = max(sum(_path_prob(lq_of, v) for v in t) for t in _all_trees(5, 3))
    ds = simulate(fam, [5], iteration + 1, seed=11)
    assert ds.expected_accepted.values[0, iteration] == pytest.approx(best, abs=1e-12)


def test_negative_control_brute_force_detects_a_suboptimal_tree():
    """A chain is a valid tree but not optimal here: the check above can fail."""
    lq = np.log(Fixed([0.5, 0.3, 0.15]).probs)
    chain = sum(_path_prob(lambda _p: lq, (0,) * d) for d in range(1, 5))
    ds = simulate(Fixed([0.5, 0.3, 0.15]), [4], 1, seed=0)
    assert ds.expected_accepted.values[0, 0] > chain + 0.1


def test_nested_trees_monotone(family):
    ds = simulate(family, BUDGETS, 20, seed=5)
    assert np.all(np.diff(ds.expected_accepted.values, axis=0) > 0)
    assert np.all(np.diff(ds.accepted.values, axis=0) >= 0)
    assert np.all(ds.accepted.values <= ds.depth.values)
    assert np.all(ds.expected_accepted.values <= ds.budget.values[:, None])


@pytest.mark.parametrize("cap", [4, 6])
def test_depth_capped_optimal_matches_the_capped_heapq_reference(family, cap):
    """optimal(max_depth=D): the top P among nodes of depth <= D, on the same environment.

    P <= 30 keeps every table family feasible (2 + 4 + 8 + 16 nodes at least within depth 4).
    """
    _check_capped_reference(family, [1, 3, 10, 30], cap, seed=5, k=256)


def _check_capped_reference(family, budgets, cap, seed, k, iterations=3):
    """optimal(max_depth=cap) against the capped heapq reference on the same environment
    (also used by test_levels)."""
    from brwsim.policies import Optimal

    ds = simulate(family, budgets, iterations, seed=seed, policies=[Optimal(max_depth=cap)])
    for it in range(iterations):
        e, a, d = best_first(env_provider(family, seed, it, k=k), budgets,
                             lambda p, it=it: path_uniform(seed, it, p), max_depth=cap)
        np.testing.assert_allclose(ds.expected_accepted.values[0, :, it], e, rtol=0, atol=1e-12)
        assert list(ds.accepted.values[0, :, it]) == a
        assert list(ds.depth.values[0, :, it]) == d
        assert max(d) <= cap


def test_depth_cap_at_or_above_p_is_the_unconstrained_tree_and_a_cap_never_helps():
    from brwsim.policies import Optimal

    fam = Dirichlet(0.1, 30)
    ds = simulate(fam, [8, 64], 200, seed=2, policies=[Optimal(), Optimal(max_depth=64),
                                                       Optimal(max_depth=3)])
    for v in ("expected_accepted", "accepted", "depth"):
        np.testing.assert_array_equal(ds[v].values[0], ds[v].values[1])
    assert (ds.expected_accepted.values[2] <= ds.expected_accepted.values[0] + 1e-15).all()
    assert (ds.expected_accepted.values[2, 1] < ds.expected_accepted.values[0, 1]).any()
    assert str(ds.policy.values[2]) == "optimal(max_depth=3)"


def test_depth_cap_with_too_few_nodes_is_one_clear_error():
    from brwsim.errors import UserError
    from brwsim.policies import Optimal

    with pytest.raises(UserError, match="fewer than P nodes .* within depth 2"):
        simulate(Uniform(3), [13], 2, seed=0, policies=[Optimal(max_depth=2)])   # 3 + 9 = 12
    ds = simulate(Uniform(3), [12], 2, seed=0, policies=[Optimal(max_depth=2)])
    np.testing.assert_allclose(ds.expected_accepted.values, 2.0, atol=1e-15)  # 3/3 + 9/9
