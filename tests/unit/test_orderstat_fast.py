"""The ORDERSTAT fast paths: the cheap proof that a node is EMPTY, the tail blocks, the gain.

Each is checked against the computation it replaces: the exact test of ``orderstat.orderstat_init``
(a proof is only ever given where the exact test exits too), the rank-by-rank recursion of
the lazy tail (written out here in plain Python, with libm's pow), and ``x ** 0.1``.
"""

from __future__ import annotations

import math

import numba as nb
import numpy as np
import pytest

from brwsim import parse_family
from brwsim.families.tables import (N_INTERVALS, X_MAX, X_MIN, bound_weights, orderstat_bounds,
                                    orderstat_table)
from brwsim.kernels import dist as K
from brwsim.kernels import orderstat as OS
from brwsim.kernels.rng import DIST, mix, purpose_key, unit
from brwsim.kernels import special
from brwsim.kernels.special import bits_f64, f64_bits, spline_eval
from brwsim.kernels.tree import new_workspace

FAMILIES = ["dirichlet(alpha=0.05, vocab=32000)", "dirichlet(alpha=0.3, vocab=2048)",
            "softmaxnormal(sigma=2.0, vocab=32000)", "dirichlet(alpha=0.5, vocab=300)"]


@nb.njit
def _to_bits(x):
    return f64_bits(x)


@nb.njit
def _from_bits(b):
    return bits_f64(b)


def _levels(spec):
    levels = new_workspace(16, spec.head_cap).levels
    return levels.lf, levels.li, levels.head


def test_bit_casts_round_trip_and_order():
    x = np.concatenate([np.exp(np.random.default_rng(0).uniform(-700, 700, 2000)), [1.0, 2.0, 0.5]])
    for v in x:
        b = _to_bits(float(v))
        assert b == np.float64(v).view(np.int64)
        assert _from_bits(b) == v
    s = np.sort(x)
    assert all(_to_bits(float(a)) < _to_bits(float(b)) for a, b in zip(s, s[1:]) if a < b)


def test_pow_gain_matches_pow():
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.random(20000), np.exp(-rng.uniform(0, 700, 20000)),
                        2.0 ** -np.arange(0, 1022.0), np.nextafter(2.0 ** -np.arange(1, 1022.0), 1.0),
                        [1.0, 1e-310, 5e-324]])
    got = np.array([OS._pow_gain(float(v)) for v in x])
    ref = x ** OS.GAIN_POW
    assert np.max(np.abs(got - ref) / ref) < 2.5e-14
    assert OS._pow_gain(0.0) == 0.0


@pytest.mark.parametrize("law, param", [("gamma", 0.05), ("gamma", 2.0), ("lognormal", 1.5)])
def test_bound_table_brackets_the_spline(law, param):
    table = orderstat_table(law, param, 1.0)
    values, slack = orderstat_bounds(table, OS.OS_EMIN, OS.OS_EMAX, OS.OS_CELL_BITS)
    assert values.size == OS.OS_BOUND_CELLS + 1 and 0.0 < slack < 1e-6
    inv_h = N_INTERVALS / (X_MAX - X_MIN)
    rng = np.random.default_rng(4)
    a = np.exp(rng.uniform(OS.OS_EMIN * math.log(2.0), OS.OS_EMAX * math.log(2.0), 3000))
    for v in a:
        i = (_to_bits(float(v)) >> (52 - OS.OS_CELL_BITS)) - OS._OS_CELL0
        lw = spline_eval(table, 0, N_INTERVALS, X_MIN, inv_h, math.log(v))
        assert values[i + 1] - slack <= lw <= values[i] + slack


@pytest.mark.parametrize("law, param", [("gamma", 0.05), ("gamma", 2.0), ("lognormal", 1.5)])
def test_bound_weights_bound_weight_ratios(law, param):
    """The kernel's bound: a weight ratio exp(lw(b) - lw(a)) is at least the table weight
    at the end of b's cell over the weight at the start of a's cell, times the family's
    factor exp(2 slack) (1 + OS_BOUND_WIDEN); weights are non-increasing, in [0, 1]."""
    table = orderstat_table(law, param, 1.0)
    values, slack = orderstat_bounds(table, OS.OS_EMIN, OS.OS_EMAX, OS.OS_CELL_BITS)
    w = bound_weights(values)
    assert w[0] == 1.0 and np.all(np.diff(w) <= 0.0) and np.all(w >= 0.0)
    assert np.all((w == 0.0) | (w > 1e-300))
    ratio = math.exp(2.0 * slack) * (1.0 + OS.OS_BOUND_WIDEN)
    inv_h = N_INTERVALS / (X_MAX - X_MIN)
    rng = np.random.default_rng(6)
    a = np.exp(rng.uniform(OS.OS_EMIN * math.log(2.0), OS.OS_EMAX * math.log(2.0), (3000, 2)))
    for u, v in a:
        iu = (_to_bits(float(u)) >> (52 - OS.OS_CELL_BITS)) - OS._OS_CELL0
        iv = (_to_bits(float(v)) >> (52 - OS.OS_CELL_BITS)) - OS._OS_CELL0
        lu = spline_eval(table, 0, N_INTERVALS, X_MIN, inv_h, math.log(u))
        lv = spline_eval(table, 0, N_INTERVALS, X_MIN, inv_h, math.log(v))
        if w[iu] > 0.0:
            assert w[iv + 1] <= math.exp(lv - lu) * w[iu] * ratio


def _exit_rank(spec, dk, min_logq):
    """The rank at which the exact test of ``orderstat.orderstat_init`` exits (None: it does not
    within the head), recomputed in Python."""
    n, n_int = int(spec.ipar[0, OS.OS_VOCAB]), int(spec.ipar[0, OS.OS_N_INT])
    x0, inv_h = spec.fpar[0, OS.OS_X0], spec.fpar[0, OS.OS_INV_H]
    r_max = math.exp(-min_logq) * OS._EXIT_MARGIN
    a = acc = lw0 = 0.0
    for j in range(int(spec.ipar[0, OS.OS_N_HEAD])):
        a -= math.log(unit(dk, j + 1)) / (n - j)
        lw = spline_eval(spec.data, int(spec.ipar[0, K.DATA_OFF]), n_int, x0, inv_h, math.log(a))
        if j == 0:
            lw0, acc = lw, 1.0
        else:
            acc += math.exp(lw - lw0)
            if acc > r_max:
                return j
    return None


@pytest.mark.parametrize("text", FAMILIES)
def test_proof_of_empty_agrees_with_the_exact_test(text):
    """Every EMPTY the cheap proof gives, the exact test gives too; and it decides almost
    every node that the exact test decides within the ranks the proof looks at."""
    spec = parse_family(text).spec()
    if spec.kinds[0] != K.ORDERSTAT:
        pytest.skip("not an order-statistic family")
    lf, li, head = _levels(spec)
    assert spec.fpar[0, OS.OS_BOUND_SLACK] > 0.0
    rng = np.random.default_rng(5)
    proved = early = 0
    for i in range(3000):
        dk = np.uint64(purpose_key(np.uint64(mix(np.uint64(i))), DIST))
        min_logq = -float(rng.uniform(0.0, 2.2))
        fast = OS.orderstat_empty(spec.data, spec.fpar, spec.ipar, 0, dk, min_logq)
        OS.orderstat_init(spec.data, spec.fpar, spec.ipar, 0, dk, 1, lf, li, head, min_logq)
        assert li[1, 0] == K.EMPTY or not fast
        k = _exit_rank(spec, dk, min_logq)
        assert (k is not None) == (li[1, 0] == K.EMPTY)
        if k is not None and k < OS._PROVE_RANKS and math.exp(-min_logq) * OS._EXIT_MARGIN < OS._PROVE_RANKS:
            early += 1
            proved += fast
    assert early > 1000 and proved >= 0.98 * early


def _tail_reference(spec, key, lf0, n_ranks):
    """The lazy tail rank by rank, as ``orderstat.orderstat_tail`` computed it one rank per call
    (with libm's pow for the gain): [(log q, A, M, q, mu)] for ranks 64, 65, ..."""
    c, n, n_head = 0, int(spec.ipar[0, OS.OS_VOCAB]), int(spec.ipar[0, OS.OS_N_HEAD])
    n_int, base = int(spec.ipar[0, OS.OS_N_INT]), int(spec.ipar[0, K.DATA_OFF])
    x0, inv_h = spec.fpar[0, OS.OS_X0], spec.fpar[0, OS.OS_INV_H]
    log_z, a, left, prev, mu, mu0 = lf0[:6]
    dk = np.uint64(purpose_key(key, DIST))
    out_rows = []
    for r in range(n_head, n_head + n_ranks):
        lq = -math.inf
        if r < n and left > 0.0:
            a = a - math.log(unit(dk, r + 1)) / (n - r)
            x = math.log(a)
            w = math.exp(spline_eval(spec.data, base + OS.OS_LOGW * n_int * 4, n_int, x0, inv_h, x) - log_z)
            m = n - 1 - r
            if m > 0:
                c1 = math.exp(a - log_z + spline_eval(spec.data, base + OS.OS_LOGM1 * n_int * 4, n_int,
                                                      x0, inv_h, x))
                frac = mu / mu0 if mu0 > mu else 1.0
                gain = OS.GAIN_FAR - (OS.GAIN_FAR - OS.TAIL_GAIN) * frac ** OS.GAIN_POW
                out = w + gain * w * (left - mu) / mu if mu > 0.0 else left
                out = min(max(out, left / (m + 1)), min(left, prev))
                mu = m * min(c1, w)
            else:
                out = min(left, prev)
            left -= out
            prev = out
            lq = math.log(out) if out > 0.0 else -math.inf
        out_rows.append((lq, a, left, prev, mu))
    return out_rows


@pytest.mark.parametrize("text, n_ranks", [("dirichlet(alpha=0.05, vocab=32000)", 700),
                                           ("softmaxnormal(sigma=2.0, vocab=1100)", 1100 - 64 + 5),
                                           ("dirichlet(alpha=0.3, vocab=1030)", 1030 - 64 + 5)])
def test_tail_blocks_follow_the_rank_by_rank_recursion(text, n_ranks):
    """dist_next's tail ranks and the level's state after each are the recursion's, up to
    the gain's tabulated power (2e-14); the whole vocabulary sums to 1."""
    spec = parse_family(text).spec()
    lf, li, head = _levels(spec)
    n_head = int(spec.ipar[0, OS.OS_N_HEAD])
    for seed in range(3):
        key = np.uint64(mix(np.uint64(1000 + seed)))
        K.dist_init(spec.law, key, 0, lf, li,
                    head, -np.inf, K.ROOT_DRAW, 0)
        head_lq = [K.dist_next(spec.fpar, spec.ipar, spec.data, key, 0, lf, li, head)
                   for _ in range(n_head)]
        ref = _tail_reference(spec, key, lf[0].copy(), n_ranks)
        total = math.fsum(math.exp(v) for v in head_lq)
        for row in ref:
            lq = K.dist_next(spec.fpar, spec.ipar, spec.data, key, 0, lf, li, head)
            state = (lq, lf[0, 1], lf[0, 2], lf[0, 3], lf[0, 4])
            np.testing.assert_allclose(state, row, rtol=1e-12, atol=1e-300)
            total += math.exp(lq) if lq > -math.inf else 0.0
        if n_ranks + n_head > spec.ipar[0, OS.OS_VOCAB]:
            assert total == pytest.approx(1.0, abs=1e-12)


@nb.njit
def _neg_log_errors(us):
    out = np.empty_like(us)
    for k in range(us.size):
        out[k] = special.neg_log(us[k]) + math.log(us[k])
    return out


def test_neg_log_is_within_its_stated_error_of_libm():
    """orderstat_below's -log(u) of the stream's uniforms ((k + 1) 2**-53, k < 2**53):
    within a tenth of _NEG_LOG_ERR of libm's everywhere, ends of the range included."""
    rng = np.random.default_rng(8)
    k = rng.integers(0, 2 ** 53, 1_000_000, dtype=np.uint64).astype(np.float64)
    ends = np.arange(0, 100000, dtype=np.float64)
    us = np.concatenate([(k + 1.0) * 2.0 ** -53, (ends + 1.0) * 2.0 ** -53, 1.0 - ends * 2.0 ** -53])
    assert np.max(np.abs(_neg_log_errors(us))) < 0.1 * special.NEG_LOG_ERR
