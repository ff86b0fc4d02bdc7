"""The sampled X and the Rao-Blackwellised E[X | T] estimate the same mean."""

from __future__ import annotations

import numpy as np

from brwsim import simulate
from tests.conftest import mean_se


def test_sampled_and_conditional_means_agree(family):
    """X - E[X | T] has mean exactly 0: within 4.5 standard errors for every family."""
    ds = simulate(family, [1, 16, 256], 3000, seed=21)
    for b in ds.budget.values:
        diff = (ds.accepted.sel(budget=b) - ds.expected_accepted.sel(budget=b)).values
        m, se = mean_se(diff)
        assert abs(m) <= 4.5 * se + 1e-12, (int(b), m, se)


def test_conditional_estimator_has_lower_variance():
    from tests.conftest import FAMILY_TABLE
    ds = simulate(FAMILY_TABLE["dirichlet"], [64], 2000, seed=1)
    assert ds.expected_accepted.values.var() < 0.5 * ds.accepted.values.var()


def test_first_budget_is_expected_top1_mass():
    """P = 1: E[X | T] is the top-1 probability of the root, whose mean is known for Fixed."""
    from brwsim import Fixed
    ds = simulate(Fixed([0.55, 0.3]), [1], 10, seed=0)
    assert np.allclose(ds.expected_accepted.values, 0.55)
