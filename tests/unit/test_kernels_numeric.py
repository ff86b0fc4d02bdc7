"""Numerical building blocks: RNG streams, Euler-Maclaurin sums, quantile splines."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special, stats

from brwsim import Zipf, simulate
from brwsim.families.tables import N_INTERVALS, X_MAX, X_MIN, orderstat_table, zipf_norm_table
from brwsim.kernels import dist as K
from brwsim.kernels.closed import ZIPF_FLOOR, ZIPF_INV_H, ZIPF_N_INT, ZIPF_S_HI, ZIPF_S_LO
from brwsim.kernels.rng import gamma, mix, unit
from brwsim.kernels.special import spline_eval, zipf_sum


def test_unit_is_uniform_on_open_closed_interval():
    key = np.uint64(mix(np.uint64(12345)))
    u = np.array([unit(key, j) for j in range(20000)])
    assert u.min() > 0 and u.max() <= 1
    assert stats.kstest(u, "uniform").pvalue > 1e-3


@pytest.mark.parametrize("shape", [0.05, 0.5, 1.0, 3.7])
def test_keyed_gamma_matches_scipy(shape):
    x = np.array([gamma(shape, np.uint64(mix(np.uint64(i)))) for i in range(6000)])
    assert stats.kstest(x, stats.gamma(shape).cdf).pvalue > 1e-3


def test_keyed_gamma_negative_control():
    x = np.array([gamma(0.5, np.uint64(mix(np.uint64(i)))) for i in range(6000)])
    assert stats.kstest(x, stats.gamma(0.6).cdf).pvalue < 1e-3


@pytest.mark.parametrize("n", [1, 2, 20, 21, 33, 1000, 128000])
@pytest.mark.parametrize("s", [0.0, 0.5, 0.99, 1.0, 1.01, 1.5, 3.5, 20.0])
@pytest.mark.parametrize("k", [0, 1, 2])
def test_zipf_sum_against_direct_sum(n, s, k):
    i = np.arange(1, n + 1, dtype=np.float64)
    ref = np.sum(i ** -s * np.log(i) ** k)
    assert zipf_sum(n, s, k) == pytest.approx(ref, rel=1e-11, abs=1e-300)


def test_zipf_norm_table():
    table = zipf_norm_table(0.8, 1.6, 32000)
    inv_h = table.shape[0] / 0.8
    for s in np.linspace(0.8, 1.6, 37):
        got = spline_eval(table.ravel(), 0, table.shape[0], 0.8, inv_h, s)
        assert got == pytest.approx(np.log(zipf_sum(32000, s, 0)), abs=1e-12)


@pytest.mark.parametrize("width", [2e-13, 1e-9, 9e-7])
def test_zipf_norm_table_over_a_narrow_range(width):
    """Ranges a spline's grid cannot resolve (its points would repeat floats) get one
    Taylor interval: finite, within 1e-12 of log Z; before, a spread of 1e-13 gave NaN
    normalisers and a run ended in "fewer than P nodes"."""
    lo = 1.5 - width / 2
    table = zipf_norm_table(lo, lo + width, 40)
    assert table.shape == (1, 4) and np.isfinite(table).all()
    for s in np.linspace(lo, lo + width, 7):
        got = spline_eval(table.ravel(), 0, 1, lo, 1.0 / width, s)
        assert got == pytest.approx(np.log(zipf_sum(40, s, 0)), abs=1e-12)
    ds = simulate(Zipf(1.5, 40, spread=width / 2), [1, 10], 2, seed=0)
    assert np.isfinite(ds.expected_accepted.values).all()


@pytest.mark.parametrize("s, spread", [(1.5, 0.4), (1.1, 0.3), (0.7, 0.0)])
def test_zipf_level_reads_the_spline_bits_and_floors_bound_it(s, spread):
    """A Zipf level's log-normaliser, read with the table of interval starts, is
    spline_eval's value bit for bit; each interval's floor is below the spline on it."""
    spec = Zipf(s, 128000, spread=spread).spec()
    lo, hi, inv_h = spec.fpar[0, ZIPF_S_LO], spec.fpar[0, ZIPF_S_HI], spec.fpar[0, ZIPF_INV_H]
    off, n_int = int(spec.ipar[0, K.DATA_OFF]), int(spec.ipar[0, ZIPF_N_INT])
    coef = spec.data[off:off + 4 * n_int]
    lf = np.zeros((2, K.LEVEL_F))
    li = np.zeros((2, K.LEVEL_I), np.int64)
    head = np.zeros((2, 1))
    for i in range(4000):
        K.dist_init(spec.law, np.uint64(mix(np.uint64(i))), 0, lf, li, head, -np.inf,
                    K.ROOT_DRAW, 0)
        assert lf[0, 1] == spline_eval(coef, 0, n_int, lo, inv_h, lf[0, 0])
    floors = spec.data[off + 5 * n_int:off + 6 * n_int]
    assert spec.fpar[0, ZIPF_FLOOR] == floors.min()
    if hi > lo:         # every interval, its ends and 9 points inside
        x = (lo + (np.arange(n_int)[:, None] + np.linspace(0.0, 1.0, 11)) / inv_h).clip(lo, hi)
        vals = np.array([[spline_eval(coef, 0, n_int, lo, inv_h, v) for v in row] for row in x])
        assert np.all(floors[:, None] < vals)
        assert np.all(vals - floors[:, None] < 4.0 * np.abs(coef[1::4]).max() / inv_h + 1e-8)
    else:
        assert floors[0] < coef[0] < floors[0] + 1e-8


@pytest.mark.parametrize("alpha", [0.01, 0.05, 0.5, 3.0])
def test_gamma_quantile_spline_against_scipy(alpha):
    table = orderstat_table("gamma", alpha, 1.0)
    inv_h = N_INTERVALS / (X_MAX - X_MIN)
    a = np.exp(np.random.default_rng(0).uniform(-30, 3.5, 400))       # A = -log CDF
    cdf = np.exp(-a)
    ref = np.where(cdf > 0.5, special.gammainccinv(alpha, -np.expm1(-a)), special.gammaincinv(alpha, cdf))
    got = np.array([spline_eval(table, 0, N_INTERVALS, X_MIN, inv_h, np.log(v)) for v in a])
    mask = ref > 1e-250
    np.testing.assert_allclose(np.exp(got[mask]), ref[mask], rtol=1e-7)


@pytest.mark.parametrize("sigma", [0.5, 2.0])
def test_lognormal_quantile_spline_against_scipy(sigma):
    table = orderstat_table("lognormal", sigma, 1.0)
    inv_h = N_INTERVALS / (X_MAX - X_MIN)
    a = np.exp(np.random.default_rng(1).uniform(-30, 3.5, 400))
    z = np.where(np.exp(-a) > 0.5, stats.norm.isf(-np.expm1(-a)), stats.norm.ppf(np.exp(-a)))
    got = np.array([spline_eval(table, 0, N_INTERVALS, X_MIN, inv_h, np.log(v)) for v in a])
    np.testing.assert_allclose(got, sigma * z, rtol=1e-8, atol=1e-8)
