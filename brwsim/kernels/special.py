"""Special functions for lazy distributions, compiled with numba.

* :func:`zipf_sum`: S_k(n, s) = sum_{i=1..n} i**-s * log(i)**k for k = 0, 1, 2 in O(1)
  (exact head plus Euler-Maclaurin), the normaliser and moment sums of Zipf laws.
* :func:`spline_eval`: a cubic spline stored as per-interval coefficients on a uniform
  grid, the quantile tables of order statistics (built with scipy in
  :mod:`brwsim.families.tables`); :func:`spline_val_der` also gives its derivative;
  :func:`spline_index` and :func:`spline_poly` are its two steps, for a caller that keeps
  the interval's start in a table instead of dividing (the Zipf normaliser).
* :func:`f64_bits`, :func:`bits_f64`: a float64's bits and back, for cell indices on a
  logarithmic grid.
* :func:`neg_log` and :func:`exp_neg`: -log u and exp x without a call to libm, inline (a
  call in a hot loop costs more than its own time: it spills the loop's registers);
  :func:`cell_split` cuts a float into the cells that such functions tabulate.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from brwsim.kernels import inline_kernel, kernel

_EXACT_HEAD = 10
# B_2j / (2j)! for j = 1..4
_EM_COEF = np.array([1.0 / 12.0, -1.0 / 720.0, 1.0 / 30240.0, -1.0 / 1209600.0])


@kernel
def _em_correction(x, s, k):
    """sum_j B_2j/(2j)! f^(2j-1)(x) for j = 1..4 and f(x) = x**-s * log(x)**k (k <= 2).

    f is tracked as x**-a * P(log x) with P a polynomial of degree <= 2; one derivative
    maps (a, P) to (a + 1, -a P + P').
    """
    g = math.log(x)
    c0 = 1.0 if k == 0 else 0.0
    c1 = 1.0 if k == 1 else 0.0
    c2 = 1.0 if k == 2 else 0.0
    a = s
    total = 0.0
    for order in range(1, 8):
        n0 = -a * c0 + c1
        n1 = -a * c1 + 2.0 * c2
        n2 = -a * c2
        c0, c1, c2 = n0, n1, n2
        a += 1.0
        if order % 2 == 1:
            total += _EM_COEF[order // 2] * x ** (-a) * (c0 + g * (c1 + g * c2))
    return total


@kernel
def _log_power_integral(g0, g1, s, k):
    """Integral over x in [e**g0, e**g1] of x**-s log(x)**k, stable near s = 1."""
    c = 1.0 - s
    if abs(c) * max(abs(g1), 1.0) < 2.0:
        total = 0.0
        cj = 1.0
        for j in range(60):
            p = k + j + 1
            total += cj * (g1 ** p - g0 ** p) / p
            cj *= c / (j + 1)
        return total
    e1 = math.exp(c * g1)
    e0 = math.exp(c * g0)
    if k == 0:
        return (e1 - e0) / c
    if k == 1:
        return e1 * (g1 / c - 1.0 / c ** 2) - e0 * (g0 / c - 1.0 / c ** 2)
    return (e1 * (g1 * g1 / c - 2.0 * g1 / c ** 2 + 2.0 / c ** 3)
            - e0 * (g0 * g0 / c - 2.0 * g0 / c ** 2 + 2.0 / c ** 3))


@kernel
def zipf_sum(n, s, k):
    """S_k(n, s) = sum_{i=1..n} i**-s * log(i)**k for k in {0, 1, 2}, s >= 0.

    Exact for n <= 20; otherwise the first 9 terms exactly and the rest by
    Euler-Maclaurin with Bernoulli terms up to B_8 (relative error below 1e-11,
    tested against direct summation).
    """
    if n <= 2 * _EXACT_HEAD:
        total = 0.0
        for i in range(1, n + 1):
            total += float(i) ** (-s) * math.log(i) ** k
        return total
    m = _EXACT_HEAD
    total = 0.0
    for i in range(1, m):
        total += float(i) ** (-s) * math.log(i) ** k
    fm = float(m) ** (-s) * math.log(m) ** k
    fn = float(n) ** (-s) * math.log(n) ** k
    total += _log_power_integral(math.log(m), math.log(n), s, k) + 0.5 * (fm + fn)
    total += _em_correction(float(n), s, k) - _em_correction(float(m), s, k)
    return total


@inline_kernel
def spline_index(n_int, x0, inv_h, x):
    """Index of x's interval on a uniform grid of ``n_int`` intervals from x0, clamped to it."""
    f = (x - x0) * inv_h
    i = int(f)
    if f < 0.0:
        i = 0
    elif i >= n_int:
        i = n_int - 1
    return i


@inline_kernel
def spline_poly(coef, j, d):
    """c0 + d*(c1 + d*(c2 + d*c3)) with the coefficients at coef[j:j + 4]."""
    return coef[j] + d * (coef[j + 1] + d * (coef[j + 2] + d * coef[j + 3]))


@kernel
def _spline_interval(off, n_int, x0, inv_h, x):
    """(index of the coefficients of x's interval, offset d of x in it), clamped to the grid."""
    i = spline_index(n_int, x0, inv_h, x)
    return off + 4 * i, x - (x0 + i / inv_h)


@kernel
def spline_eval(coef, off, n_int, x0, inv_h, x):
    """Evaluate a cubic spline on a uniform grid at ``x`` (clamped to the grid).

    ``coef[off:off + 4 * n_int]`` holds, per interval i starting at x0 + i*h, the
    coefficients c0..c3 of c0 + d*(c1 + d*(c2 + d*c3)) with d = x - (x0 + i*h). Flat
    indexing (no array views) keeps the kernels free of reference counting.
    """
    j, d = _spline_interval(off, n_int, x0, inv_h, x)
    return spline_poly(coef, j, d)


@kernel
def spline_val_der(coef, off, n_int, x0, inv_h, x):
    """:func:`spline_eval` and the spline's derivative at ``x``."""
    j, d = _spline_interval(off, n_int, x0, inv_h, x)
    val = spline_poly(coef, j, d)
    der = coef[j + 1] + d * (2.0 * coef[j + 2] + 3.0 * d * coef[j + 3])
    return val, der



@intrinsic
def f64_bits(typingctx, x):
    """The IEEE-754 bits of a float64 as an int64 (a bit cast, no conversion): for a
    positive double, ``f64_bits(x) >> (52 - k)`` is its biased exponent followed by its
    k leading mantissa bits, a monotone cell index on a grid of 2**k cells per octave."""
    if x != types.float64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


@intrinsic
def bits_f64(typingctx, b):
    """The float64 whose IEEE-754 bits are the int64 ``b`` (the inverse of :func:`f64_bits`)."""
    if b != types.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


# Functions of a float x in (0, 1] without libm (:func:`neg_log`; also
# ``brwsim.kernels.orderstat._pow_gain``): x =
# 2**e m with m in [1, 2) cut into 2**_CELL_BITS cells (1/128 of an octave), c the centre of
# m's cell and t = (m - c) / c, |t| <= 2**-8 (:func:`cell_split`); a function of c comes
# from a table, one of 1 + t from a short Taylor series.
_CELL_BITS = 7
CELL_C = 1.0 + (np.arange(1 << _CELL_BITS) + 0.5) / (1 << _CELL_BITS)
_CELL_INVC = 1.0 / CELL_C
_MANT_BITS = 0xFFFFFFFFFFFFF
_ONE_BITS = 0x3FF0000000000000


@inline_kernel
def cell_split(x):
    """(e, i, t) of a normal positive float x = 2**e m: the cell i of m and its offset t."""
    b = f64_bits(x)
    i = (b >> (52 - _CELL_BITS)) & ((1 << _CELL_BITS) - 1)
    t = (bits_f64((b & _MANT_BITS) | _ONE_BITS) - CELL_C[i]) * _CELL_INVC[i]
    return (b >> 52) - 1023, i, t


# neg_log(u) = -log(u) = -e log 2 - log c - log(1 + t), log(1 + t) by its Taylor series
# to t**5 (remainder below 6e-16; the rounding of the sum, at most about 1.3e-14 where
# -log u is near its largest value, 36.7, dominates); measured absolute error against
# libm's log at most 7.1e-15 (tests/unit/test_orderstat_fast.py). orderstat.orderstat_below widens
# each term by NEG_LOG_ERR, so its bounds of A_j hold against the exact test's (libm) sums.
_NLOG_LOGC = np.log(CELL_C)
_LN2 = math.log(2.0)
NEG_LOG_ERR = 1e-13


@inline_kernel
def neg_log(u):
    """-log(u) for u in (0, 1] (a normal float) from u's bits and two tables, within an
    absolute 1.5e-14 of libm's (the rounding of the sum; measured at most 7.1e-15)."""
    e, i, t = cell_split(u)
    p = t * (1.0 - t * (0.5 - t * (1.0 / 3.0 - t * (0.25 - t * 0.2))))
    return -(e * _LN2 + _NLOG_LOGC[i] + p)


# exp_neg(x) = exp(x) for x <= 700 without libm: x = (64 k + i) ln2 / 64 + r, |r| <= ln2 / 128,
# exp(x) = 2**k 2**(i/64) exp(r), 2**(i/64) from a table and exp(r) by its Taylor series to
# r**6 (remainder below 1e-19); measured relative error against libm's exp at most 4.4e-16
# (tests/unit/test_dirichlet_picks.py). Below _EXP_NEG_MIN it returns 0 (exp is subnormal there).
_EXP_I_BITS = 6
_EXP_TAB = 2.0 ** (np.arange(1 << _EXP_I_BITS) / (1 << _EXP_I_BITS))
_EXP_INV_STEP = (1 << _EXP_I_BITS) / math.log(2.0)
# ln2 / 64 as fdlibm's two parts of ln2 (the high one has 32 bits, so its products with n,
# |n| < 2**16 (|x| < 709), are exact), each divided by 64 (exact)
_EXP_STEP_HI = 6.93147180369123816490e-01 / (1 << _EXP_I_BITS)
_EXP_STEP_LO = 1.90821492927058770002e-10 / (1 << _EXP_I_BITS)
_EXP_NEG_MIN = -708.0


@inline_kernel
def exp_neg(x):
    """exp(x) for x <= 700, within 4.4e-16 (relative, measured on [-708, 700]) of libm's,
    inline (no call, no branch LLVM cannot turn into a select: loops of it vectorise)."""
    if x < _EXP_NEG_MIN:
        return 0.0
    n = np.int64(math.floor(x * _EXP_INV_STEP + 0.5))
    r = (x - n * _EXP_STEP_HI) - n * _EXP_STEP_LO
    i = n & ((1 << _EXP_I_BITS) - 1)
    k = n >> _EXP_I_BITS
    p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))))
    return bits_f64((k + 1023) << 52) * (_EXP_TAB[i] * p)
