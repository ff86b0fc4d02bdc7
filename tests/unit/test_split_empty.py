"""Emptiness tables of Dirichlet splits (``brwsim.families.betaquantile.cdf_table``).

A split of a group whose mass is below twice the cut-off reads, before any draw, whether
its uniform puts both parts below the cut-off (``brwsim.kernels.dirichlet._split_empty``). It
must never say so when the quantile tables' draw would list a part (then a node's ranks
would depend on the cut-off), it should decide nearly every case it can, and nodes must
come out bit for bit as without the tables. The splines are checked against
``scipy.special.betainc`` at points of their own, with a control on a table of other
shapes.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np
import pytest
from scipy import special

from brwsim.families.betaquantile import CDF_HEADER, cdf_table, pair_block
from brwsim.families.dirichlet import aggregation_component
from brwsim.kernels import dirichlet as KD
from brwsim.kernels.betaquantile import beta_log_pair
from brwsim.kernels.rng import mix
from brwsim.kernels.spec import compile_spec
from tests.unit.test_dirichlet_streams import _kernel_ranks

SHAPES = [(5.0, 5.0), (2.5, 2.5), (1.25, 1.3), (25.6, 25.6), (1.185, 1.264)]


@nb.njit(cache=False)
def _decide(table, pairs, xs, us):
    """Per (x, u): (the table's verdict, the draw's two log parts)."""
    n = xs.shape[0]
    empty = np.empty(n, np.bool_)
    lb = np.empty((n, 2))
    for i in range(n):
        empty[i] = KD._split_empty(table, 0, xs[i], us[i])
        lb[i, 0], lb[i, 1] = beta_log_pair(pairs, 0, 0, us[i])
    return empty, lb


def _spline(table, x, second=False):
    n_int, x0, h = int(table[0]), table[1], table[3]
    i = np.clip(((x - x0) / h).astype(int), 0, n_int - 1)
    t = x - (x0 + i * h)
    c = table[CDF_HEADER + (4 * n_int if second else 0):].reshape(-1, 4)[i]
    return c[:, 0] + t * (c[:, 1] + t * (c[:, 2] + t * c[:, 3]))


@pytest.mark.parametrize("a,b", SHAPES)
def test_splines_are_within_their_margin(a, b):
    table = cdf_table(a, b)
    x = np.random.default_rng(1).uniform(math.log(0.5), 0.0, 5000)
    # the margin is twice the largest error at the table's own 16 points per interval:
    # elsewhere the error must stay well inside it
    assert np.max(np.abs(_spline(table, x) - special.betainc(a, b, np.exp(x)))) < 0.75 * table[4]
    if a != b:
        lo = _spline(table, x, second=True)
        assert np.max(np.abs(lo - special.betainc(a, b, -np.expm1(x)))) < 0.75 * table[4]


def test_a_table_of_other_shapes_misses_the_function():
    x = np.random.default_rng(1).uniform(math.log(0.5), 0.0, 5000)
    other = cdf_table(5.5, 5.0)
    assert np.max(np.abs(_spline(other, x) - special.betainc(5.0, 5.0, np.exp(x)))) > 1e-3


@pytest.mark.parametrize("a,b", SHAPES)
def test_an_empty_verdict_is_the_draws_and_most_are_found(a, b):
    table = cdf_table(a, b)
    pairs, _ = pair_block([(a, b)])
    rng = np.random.default_rng(2)
    x = rng.uniform(math.log(0.5) + 1e-9, 0.0, 200000)
    u = 1.0 - rng.random(200000)
    empty, lb = _decide(table, pairs, x, u)
    both_below = (lb[:, 0] < x) & (lb[:, 1] < x)
    assert np.all(both_below[empty])                 # never wrong
    assert empty.sum() >= 0.995 * both_below.sum()   # and nearly complete
    assert empty.sum() > 1000


def test_nodes_are_the_same_without_the_tables():
    """The Dirichlet(0.05, 200) and (0.01, 1024) ranks above cut-offs, with and without the
    emptiness tables (their index entries set to -1): bit for bit."""
    for alpha, vocab in ((0.05, 200), (0.01, 1024)):
        spec = compile_spec([aggregation_component(alpha, vocab)])
        plain = spec.data.copy()
        plain[vocab + 1:2 * (vocab + 1)] = -1.0
        assert np.any(spec.data[vocab + 1:2 * (vocab + 1)] >= 0)
        without = spec._replace(data=plain)
        used = 0
        for i in range(3000):
            key = np.uint64(mix(np.uint64(77 + i)))
            cut = math.log(np.random.default_rng(i).uniform(0.05, 1.0))
            ranks = _kernel_ranks(spec, key, cut)
            np.testing.assert_array_equal(ranks, _kernel_ranks(without, key, cut))
            used += ranks.size == 0
        assert used > 300                                  # many nodes were empty
