"""The proven upper bound against Monte Carlo on every family of the test table.

The bound holds for every realisation's optimal tree in expectation, so the Monte Carlo
mean of E[X | T_P] may exceed it only by sampling noise: at most 4 SE (combined with the
bound's own SE where the spine law is sampled), at P = 1 .. 2**16. It must also be below
the paper's bound wherever that is positive (P >= 2).
"""

from __future__ import annotations

import numpy as np
import pytest

from brwsim import simulate, summarize

QUICK = [1, 2, 8, 64, 512, 4096]
FULL = [1, 2, 4, 16, 64, 256, 1024, 4096, 16384, 65536]


def _check(family, budgets, trees):
    ds = simulate(family, budgets, trees, seed=31)
    s = summarize(ds)
    mc, se = s.expected_mean.values, s.expected_se.values
    ub, ub_se = ds.upper_bound.values, ds.upper_bound_se.values
    assert np.all(mc <= ub + 4 * np.hypot(se, ub_se) + 1e-9), (mc - ub) / np.hypot(se, ub_se)
    paper = ds.paper_bound.values
    assert np.all(ub[paper > 0] < paper[paper > 0])


def test_upper_bound_above_monte_carlo_quick(family):
    _check(family, QUICK, 200)


@pytest.mark.slow
def test_upper_bound_above_monte_carlo(family):
    _check(family, FULL, 400)
