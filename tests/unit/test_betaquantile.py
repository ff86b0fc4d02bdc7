"""Tabulated Beta quantiles (brwsim.families.betaquantile, brwsim.kernels.betaquantile).

The kernel's (log X, log(1 - X)) at a uniform u must be the Beta(a, b) quantile at u: it is
checked against ``scipy.special.betainc`` (the CDF at the returned x must be u, converted
to an error in log x through the density) and ``betaincinv``, on both sides of the median
split, for tiny, small, equal, unequal and large shapes; sampled X must pass a KS test
against ``scipy.stats.beta``, and a negative control must fail it.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np
import pytest
from scipy import special, stats

from brwsim.families.betaquantile import (
    MAX_INTERVALS,
    TOLERANCE,
    pair_block,
    side_table,
    tree_block,
)
from brwsim.kernels.betaquantile import SIDE_HEADER, _side_point, beta_log_heavy, beta_log_pair
from brwsim.kernels.special import spline_eval

PAIRS = [(0.05, 0.05), (0.05, 0.1), (1.25, 1.25), (5.0, 5.0), (4.0, 0.5), (0.5, 4.0),
         (40.0, 40.0), (1e-6, 2e-6)]


@nb.njit(cache=False)
def _draw(data, us):
    out = np.empty((us.size, 2))
    for i in range(us.size):
        out[i, 0], out[i, 1] = beta_log_pair(data, 0, 0, us[i])
    return out


@nb.njit(cache=False)
def _draw_heavy(data, us):
    first = np.empty(us.size, np.bool_)
    out = np.empty(us.size)
    for i in range(us.size):
        first[i], out[i] = beta_log_heavy(data, 0, 0, us[i])
    return first, out


def _table(a, b):
    block, _ = pair_block([(a, b)])
    assert block[1] >= 0 and block[2] >= 0, f"({a}, {b}) not tabulated"
    return block


@pytest.mark.parametrize("a,b", PAIRS)
def test_measured_error_within_tolerance(a, b):
    for p, q in ((a, b), (b, a)):
        _, err, n = side_table(p, q)
        assert err <= TOLERANCE and n <= MAX_INTERVALS


@pytest.mark.parametrize("a,b", [p for p in PAIRS if min(p) >= 0.05])
def test_quantile_against_scipy(a, b):
    """At 4000 levels on each side: betainc(x) = u to 1e-10 in log x (table + scipy's own error)."""
    data = _table(a, b)
    m0 = data[0]
    lo = np.exp(np.linspace(math.log(2.0 ** -50), math.log(m0), 4000))      # lower side: u
    hi = 1.0 - np.exp(np.linspace(math.log(2.0 ** -50), math.log1p(-m0), 4000))  # upper: 1 - u small
    u = np.concatenate([lo, hi])
    u = u[(u > 0) & (u <= 1)]
    res = _draw(data, u)
    lx, l1x = res[:, 0], res[:, 1]
    x = np.exp(lx)
    # the complement's log from the table agrees with log1p(-x) and with its own exp
    lower = u <= m0
    assert np.max(np.abs(l1x[lower] - np.log1p(-x[lower]))) < 1e-11
    assert np.max(np.abs(lx[~lower] - np.log1p(-np.exp(l1x[~lower])))) < 1e-11
    # lower side: I_x(a, b) = u; upper side: I_{1-x}(b, a) = 1 - u
    pdf_lo = stats.beta.pdf(x[lower], a, b)
    err_lo = np.abs(special.betainc(a, b, x[lower]) - u[lower]) / (x[lower] * pdf_lo)
    y = np.exp(l1x[~lower])
    err_hi = np.abs(special.betainc(b, a, y) - (1.0 - u[~lower])) / (y * stats.beta.pdf(y, b, a))
    err = max(err_lo.max(), err_hi.max())
    assert err < 1e-10, f"max error in log x {err:.2g}"
    # and betaincinv where it is well conditioned (x not tiny)
    ok = lower & (x > 1e-8)
    ref = np.log(special.betaincinv(a, b, u[ok]))
    assert np.max(np.abs(lx[ok] - ref)) < 1e-9


def test_tiny_shapes_in_logs():
    """Beta(1e-6, 2e-6): x underflows, log x does not; I_x = x**a F / (a B) in logs."""
    a, b = 1e-6, 2e-6
    data = _table(a, b)
    u = np.array([1e-16, 1e-3, 0.3, 0.6, data[0] * (1 - 1e-9)])
    lx = _draw(data, u)[:, 0]
    log_ab = special.gammaln(a + 1) + special.gammaln(b + 1) - special.gammaln(a + b + 1) \
        + math.log1p(a / b)
    # leading order: log x = (log u + log(a B)) / a, exact as x -> 0
    lead = (np.log(u) + log_ab) / a
    assert np.all(np.isfinite(lx))
    assert abs(lx[0] - lead[0]) < 1e-6 and lx[0] < -3e7


def _logodds_cdf(a, b):
    """CDF of log(X / (1 - X)) for X ~ Beta(a, b), accurate in both tails (scipy)."""
    def cdf(t):
        t = np.asarray(t, dtype=np.float64)
        w = special.expit(-np.abs(t))           # min(X, 1 - X), never rounded to 1
        return np.where(t <= 0, special.betainc(a, b, w), 1.0 - special.betainc(b, a, w))
    return cdf


@pytest.mark.parametrize("a,b", PAIRS[:6])
def test_samples_ks_against_scipy(a, b):
    """KS of the log-odds of 20000 draws (X itself rounds to 1.0 for small shapes)."""
    data = _table(a, b)
    u = 1.0 - np.random.default_rng(7).random(20000)   # (0, 1] like brwsim.kernels.rng.unit
    res = _draw(data, u)
    assert stats.kstest(res[:, 0] - res[:, 1], _logodds_cdf(a, b)).pvalue > 1e-3
    x = np.exp(res[:, 0])
    if a >= 1.0:                                        # no mass rounded to 1.0: X itself
        assert stats.kstest(x, stats.beta(a, b).cdf).pvalue > 1e-3


@pytest.mark.parametrize("wrong", [(0.05 * 1.1, 0.05), (1.25 * 1.1, 1.25)])
def test_negative_control_detects_a_shape_change(wrong):
    a, b = wrong[0] / 1.1, wrong[1]
    u = 1.0 - np.random.default_rng(7).random(20000)
    res = _draw(_table(a, b), u)
    assert stats.kstest(res[:, 0] - res[:, 1], _logodds_cdf(*wrong)).pvalue < 1e-3


@pytest.mark.parametrize("alpha,vocab", [(0.05, 200), (1e-6, 100), (0.079, 1024)])
def test_every_aggregation_pair_is_tabulated(alpha, vocab):
    data = tree_block(alpha, vocab)
    pairs = data[2:vocab + 1]
    pairs = pairs[pairs >= 0].astype(int)
    assert pairs.size > 0 and np.all(data[pairs + 1] >= 0) and np.all(data[pairs + 2] >= 0)


def test_untabulated_pair_falls_back():
    block, _ = pair_block([(0.5, 20.0)])
    assert block[1] == -1 and block[2] == -1


def test_a_side_no_uniform_reaches_is_not_tabulated_quietly():
    """Beta(60, 0.05): I_{1/2} is far below the smallest uniform, so its lower side is never
    read; building it must neither warn (no division by a zero-width grid) nor tabulate it."""
    import warnings

    from brwsim.families import betaquantile as bq
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        block, where = bq.pair_block([(60.0, 0.05)])
    head = where[(60.0, 0.05)]
    assert block[head] < 2.0 ** -53
    assert block[head + 1] == -1 and block[head + 2] == -1


@pytest.mark.parametrize("a,b", PAIRS)
def test_the_heavier_part_alone_is_the_same_number(a, b):
    """beta_log_heavy (a Dirichlet group whose lighter part cannot matter) gives bit for
    bit the larger of beta_log_pair's two logs and says which one it is; the other is at
    most log(1/2) up to the tables' error."""
    data = _table(a, b)
    us = np.concatenate([np.random.default_rng(5).random(20000), [1.0, 2.0**-53, 0.5]])
    pair = _draw(data, us)
    first, heavy = _draw_heavy(data, us)
    np.testing.assert_array_equal(heavy, np.where(first, pair[:, 0], pair[:, 1]))
    light = np.where(first, pair[:, 1], pair[:, 0])
    assert np.all(light <= math.log(0.5) + 1e-10)
    assert 0 < first.sum() < us.size


@nb.njit(cache=False)
def _draw_divided(data, us):
    """beta_log_pair as it was computed before the tables held their intervals' starts:
    spline_eval, which divides for each interval's start (the reference bits)."""
    out = np.empty((us.size, 2))
    for i in range(us.size):
        u = us[i]
        lower = u <= data[0]
        off = int(data[1] if lower else data[2])
        lz, z, v = _side_point(data, off, math.log(u) if lower else math.log(1.0 - u))
        n_int = int(data[off + 4])
        g = spline_eval(data, off + SIDE_HEADER, n_int, 0.0, data[off + 5], v)
        r = spline_eval(data, off + SIDE_HEADER + 4 * n_int, n_int, 0.0, data[off + 5], v)
        lx, l1x = lz + g, -z * r
        out[i, 0], out[i, 1] = (lx, l1x) if lower else (l1x, lx)
    return out


@pytest.mark.parametrize("a,b", PAIRS)
def test_tabulated_interval_starts_give_spline_evals_bits(a, b):
    """Reading each interval's start from the side's table (no division) gives the same
    numbers as spline_eval, bit for bit, on both sides of the split and at the ends."""
    data = _table(a, b)
    us = np.concatenate([np.random.default_rng(6).random(20000), [1.0, 2.0**-53, 0.5,
                                                                  data[0], np.nextafter(data[0], 1.0)]])
    np.testing.assert_array_equal(_draw(data, us), _draw_divided(data, us))
