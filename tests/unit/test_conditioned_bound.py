"""The conditioned small-budget bound (brwsim.theory.small_budget_bound).

Exact at P = 1 (E[max q], against the closed forms of exact_small_budget), the optimal
tree itself tree by tree when every top-P node is expanded (against simulate's trees on
the same roots), nondecreasing in P and below the unconditioned bound, never below Monte
Carlo by more than 4 combined SE, and refused for context-dependent families.
"""

from __future__ import annotations

import numpy as np
import pytest

from brwsim import parse_family, simulate, summarize
from brwsim.errors import UserError
from brwsim.kernels.conditioned import conditioned_values
from brwsim.kernels.dist import LEVEL_F, LEVEL_I
from brwsim.keys import seed_key
from brwsim.theory import exact_small_budget, small_budget_bound, upper_bound
from brwsim.theory.renewal import renewal_grid, spine_steps

QUICK = [1, 2, 3, 4, 8, 16, 32, 64]
CLOSED_FORM = [
    "fixed(probs=[0.5, 0.3, 0.15])",
    "geometric(r=0.6)",
    "uniform(k=3)",
    "zipf(s=1.2, vocab=1000, spread=0.3)",
    "peaked(a=2.0, b=1.0, s=1.1, vocab=100)",
    "entropytarget(entropies=[0.5, 1.5], shape='zipf', vocab=100)",
    "mixture(families=[peaked(a=4.0, b=0.5, s=1.1, vocab=32000), "
    "zipf(s=1.1, vocab=32000, spread=0.3)], weights=[0.75, 0.25])",
]


@pytest.mark.parametrize("text", CLOSED_FORM)
def test_exact_at_budget_one(text):
    fam = parse_family(text)
    res = small_budget_bound(fam, [1], samples=2000, seed=3)
    exact = exact_small_budget(fam)
    # E[bound] - E[max q] >= 0 is only the control variate's floor-grid slack (O(h) relative)
    assert abs(res.value[0] - exact) <= 4 * res.se[0] + 2e-3 * exact, (res.value, res.se, exact)


@pytest.mark.parametrize("text", ["dirichlet(alpha=0.3, vocab=50)",
                                  "peaked(a=2.0, b=1.0, s=1.1, vocab=100)",
                                  "softmaxnormal(sigma=1.5, vocab=3000)",
                                  "zipf(s=1.2, vocab=1000, spread=0.3)"])
def test_tree_by_tree_optimal_when_the_top_p_is_expanded(text):
    """With expand >= P, min over lam of a tree's conditioned sum is that tree's optimum:
    on simulate's roots (same keys) it reproduces E[X | T_P] tree by tree."""
    fam = parse_family(text)
    budgets = np.array([1.0, 2.0, 5.0, 16.0])
    trees = 40
    ds = simulate(fam, budgets.astype(int), trees, seed=11)
    want = ds.expected_accepted.values                     # (budget, iteration)
    s, u, counts = renewal_grid(spine_steps(fam), 4 * budgets[-1], None, "floor")
    h = s[1] - s[0]
    spec = fam.spec()
    out = np.empty((3, trees, budgets.size))
    conditioned_values(spec.law, (np.empty((1, LEVEL_F)), np.empty((1, LEVEL_I), np.int64),
                                  np.empty((1, max(spec.head_cap, 1)))), seed_key(11), trees, 17,
                       float(s[-1]), (np.cumsum(u), counts, h), budgets,
                       np.full(budgets.size, s[-1] / 2), out, (np.zeros((1, 4, 1)), False),
                       np.zeros(1, np.int64))
    np.testing.assert_allclose(out[0].T, want, rtol=1e-6, atol=1e-12)


def test_nondecreasing_in_budget_and_below_the_unconditioned_bound():
    fam = parse_family("mixture(families=[peaked(a=60, b=0.05, s=1.1, vocab=32000), "
                       "dirichlet(alpha=0.05, vocab=5000)], weights=[0.97, 0.03])")
    budgets = np.arange(1, 65)
    res = small_budget_bound(fam, budgets, samples=400)
    assert np.all(np.diff(res.value) >= 0)
    assert np.all(res.value <= upper_bound(fam, budgets).value + 1e-12)
    assert np.all(res.se >= 0) and np.isfinite(res.value).all()


def test_never_below_monte_carlo(family):
    ds = simulate(family, QUICK, 300, seed=41)
    sm = summarize(ds)
    mc, se = sm.expected_mean.values, sm.expected_se.values
    res = small_budget_bound(family, QUICK, samples=400, seed=5)
    assert np.all(res.value >= mc - 4 * np.hypot(se, res.se) - 1e-12), (
        (res.value - mc) / np.hypot(se, res.se))


def test_two_sided_where_every_top_node_is_expanded():
    """For P <= expand the bound's mean is E[X | T_P] itself (up to the control variate's
    O(h) slack): within 4 combined SE of Monte Carlo on both sides."""
    fam = parse_family("entropytarget(entropies=[0.1, 0.5, 3.0], shape=zipf, vocab=50000)")
    budgets = [1, 2, 4, 8]
    ds = simulate(fam, budgets, 3000, seed=8)
    sm = summarize(ds)
    mc, se = sm.expected_mean.values, sm.expected_se.values
    res = small_budget_bound(fam, budgets, expand=8, samples=3000, seed=9)
    assert np.all(np.abs(res.value - mc) <= 4 * np.hypot(se, res.se) + 2e-3 * mc)


def test_deterministic_family_is_exact_and_has_no_error():
    fam = parse_family("fixed(probs=[0.6, 0.4])")
    res = small_budget_bound(fam, [1, 2, 3, 6], samples=10)
    # the tree is not random: top-P sums of the Fixed([0.6, 0.4]) tree
    np.testing.assert_allclose(res.value, [0.6, 1.0, 1.36, 2.056], rtol=1e-9)
    assert np.all(res.se < 1e-12)          # float round-off only


@pytest.mark.parametrize("text", [
    "markovregime(families=[geometric(r=0.02), dirichlet(alpha=0.3, vocab=50)], "
    "weights=[0.6, 0.4], persistence=0.95)",
    "depthdrift(families=[dirichlet(alpha=0.3, vocab=50), geometric(r=0.02)])",
    "correlatedentropy(entropies=[0.1, 3.0], rho=0.95)",
])
def test_refuses_context_dependent_families(text):
    with pytest.raises(UserError, match="context-dependent"):
        small_budget_bound(parse_family(text), [1, 4])


@pytest.mark.parametrize("kwargs, needle", [
    ({"budgets": [0]}, "budgets"), ({"budgets": [float("nan")]}, "budgets"),
    ({"budgets": [4], "expand": 0}, "expand"), ({"budgets": [4], "samples": 1}, "samples"),
    ({"budgets": [4], "expand": 2.5}, "expand"),
])
def test_bad_input_is_one_clear_error(kwargs, needle):
    with pytest.raises(UserError, match=needle):
        small_budget_bound(parse_family("uniform(k=3)"), **kwargs)
