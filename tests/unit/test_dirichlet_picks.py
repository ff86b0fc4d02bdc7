"""Size-biased picks of a lazy Dirichlet group (``brwsim.kernels.dirichlet._pick_fraction``).

A group of at most ``picked_size`` tokens is drawn by picks: pick j takes the fraction
V ~ Beta(1 + alpha, b) of what remains, by rejection from Beta(1, b). The fraction's law
is checked against scipy's Beta (two-sided KS on 1 - V, which carries the tails the
rejection shapes), with a control that a 10% change of b is seen, and at alpha = 1, where
half the rounds are rejected (the rounds after the inline two, and their stream, are then
used). log V must stay accurate where V is near 1 (a tiny log V to relative accuracy:
otherwise a token of share 1 - 1e-20 reads as a log-probability of 0 or above) and where
V is tiny. The whole node's law is tested in ``tests/statistical/test_lazy_dirichlet.py``
and the streams in ``tests/unit/test_dirichlet_streams.py``.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np
import pytest
from scipy import stats

from brwsim import Dirichlet
from brwsim.families.betaquantile import tree_block
from brwsim.families.dirichlet import aggregation_component, picked_size
from brwsim.kernels import dirichlet as KD
from brwsim.kernels.dirichlet import DIR_PICKED, DIR_VOCAB
from brwsim.kernels.rng import mix
from brwsim.kernels.special import exp_neg

N = 20000


@nb.njit(cache=False)
def _fractions(n, alpha, b, seed):
    lv = np.empty(n)
    l1v = np.empty(n)
    for i in range(n):
        lv[i], l1v[i] = KD._pick_fraction(alpha, b, mix(np.uint64(seed) + np.uint64(i)), i % 7)
    return lv, l1v


@pytest.mark.parametrize("alpha,b", [(0.05, 0.05), (0.05, 1.0), (0.05, 2.45), (0.079, 2.449),
                                     (1e-4, 0.2), (1.0, 1.0)])
def test_fractions_have_the_beta_law(alpha, b):
    lv, l1v = _fractions(N, alpha, b, 11)
    rest = stats.beta(b, 1.0 + alpha)               # 1 - V
    assert stats.kstest(np.exp(l1v), rest.cdf).pvalue > 1e-3
    # the mean of log(1 - V), exact: psi(b) - psi(1 + alpha + b)
    from scipy.special import digamma
    se = l1v.std(ddof=1) / math.sqrt(N)
    assert abs(l1v.mean() - (digamma(b) - digamma(1.0 + alpha + b))) < 4.5 * se


def test_a_wrong_shape_is_seen():
    lv, l1v = _fractions(N, 0.05, 1.1, 11)
    assert stats.kstest(np.exp(l1v), stats.beta(1.0, 1.05).cdf).pvalue < 1e-3


@pytest.mark.parametrize("alpha,b", [(0.05, 0.05), (0.05, 2.45), (1e-4, 1e-4), (1.0, 1.0)])
def test_log_v_is_accurate_at_both_ends(alpha, b):
    lv, l1v = _fractions(N, alpha, b, 12)
    assert np.all(lv <= 0.0) and np.all(l1v <= 0.0)
    # log V from log(1 - V) in numpy: log1p(-exp(.)) where exp(.) <= 1/2, log(-expm1(.))
    # elsewhere (both accurate to rounding)
    ref = np.where(l1v < -math.log(2.0), np.log1p(-np.exp(np.minimum(l1v, -math.log(2.0)))),
                   np.log(-np.expm1(np.maximum(l1v, -math.log(2.0)))))
    near = ref > -1e-3                              # V near 1: tiny log V, relative error
    assert np.all(np.abs(lv[near] - ref[near]) <= 1e-13 * np.abs(ref[near]) + 1e-300)
    assert np.all(np.abs(lv[~near] - ref[~near]) <= 1e-13 * (1.0 + np.abs(ref[~near])))


def test_exp_neg_is_within_its_stated_error_of_libm():
    @nb.njit(cache=False)
    def ev(x):
        out = np.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = exp_neg(x[i])
        return out

    rng = np.random.default_rng(0)
    for lo, hi in ((-1e-3, 0.0), (-1.0, 0.0), (-40.0, 0.0), (-708.0, -40.0)):
        x = rng.uniform(lo, hi, 200000)
        assert np.max(np.abs(ev(x) / np.exp(x) - 1.0)) <= 4.5e-16
    x = np.array([0.0, -0.0, -709.0, -1e300, -np.inf])
    np.testing.assert_array_equal(ev(x), [1.0, 1.0, 0.0, 0.0, 0.0])


def test_groups_up_to_the_concentration_limit_are_picked():
    assert picked_size(0.05, 200) == 50              # 50 * 0.05 = PICK_MASS, to rounding
    assert picked_size(0.01, 1024) == 250
    assert picked_size(1e-6, 1024) == 1024           # the whole vocabulary
    assert picked_size(0.079, 100) == 31
    # tables for split groups only: 200 and 100 tokens, not 50 or less
    block = tree_block(0.05, 200, 50)
    assert [m for m in range(201) if block[m] >= 0] == [100, 200]
    spec = Dirichlet(0.05, 200).spec()
    assert spec.ipar[0, DIR_PICKED] == 50
    assert aggregation_component(0.05, 200).ipar == {DIR_VOCAB: 200, DIR_PICKED: 50}
