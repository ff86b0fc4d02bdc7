"""Randomness is a function of (seed, iteration, node path): nothing else changes a number."""

from __future__ import annotations

import numpy as np
import pytest

from brwsim import Dirichlet, Zipf, simulate
from tests.conftest import FAMILY_TABLE

FAMS = [FAMILY_TABLE["dirichlet_lazy"], FAMILY_TABLE["mixture"], Zipf(1.5, 128000, 0.4)]


@pytest.mark.parametrize("fam", FAMS, ids=repr)
def test_budget_list_does_not_change_numbers(fam):
    a = simulate(fam, [4, 64, 256], 30, seed=9)
    b = simulate(fam, [256, 64], 30, seed=9)
    c = simulate(fam, [64], 30, seed=9)
    for var in ("accepted", "expected_accepted", "depth"):
        np.testing.assert_array_equal(a[var].sel(budget=64).values, b[var].sel(budget=64).values)
        np.testing.assert_array_equal(a[var].sel(budget=64).values, c[var].sel(budget=64).values)
        np.testing.assert_array_equal(a[var].sel(budget=256).values, b[var].sel(budget=256).values)


@pytest.mark.parametrize("fam", FAMS, ids=repr)
def test_iterations_are_independent_of_run_length(fam):
    short = simulate(fam, [16], 10, seed=2)
    long = simulate(fam, [16], 600, seed=2)        # crosses the internal chunk size
    np.testing.assert_array_equal(short.expected_accepted.values, long.expected_accepted.values[:, :10])


def test_seeds_differ_and_repeat():
    fam = Dirichlet(0.1, 100)
    a = simulate(fam, [16], 50, seed=1).expected_accepted.values
    b = simulate(fam, [16], 50, seed=1).expected_accepted.values
    c = simulate(fam, [16], 50, seed=2).expected_accepted.values
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_huge_seed_accepted():
    ds = simulate(Dirichlet(0.1, 100), [4], 3, seed=2 ** 100 + 7)
    assert ds.attrs["seed_entropy"] == str(2 ** 100 + 7)
