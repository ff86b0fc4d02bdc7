"""Order statistics: the sorted weights of ``vocab`` i.i.d. draws (ORDERSTAT; Dirichlet,
SoftmaxNormal), by Renyi's representation, tabulated quantiles and a lazy tail.

A node generates a head of ranks exactly at set-up (:func:`orderstat_init`); a large
vocabulary draws the sum of the remaining weights and lists the tail ranks lazily, in
blocks, consistent with that sum (:func:`orderstat_tail`, read by :func:`orderstat_next`).
A cheaper proof that a node's rank 0 is below the caller's cut-off is tried first
(:func:`orderstat_empty`). The family (:class:`brwsim.families.orderstat.OrderStatistics`)
writes the parameter slots named below.
"""

from __future__ import annotations

import math

import numpy as np

from brwsim.kernels import inline_kernel, kernel
from brwsim.kernels.kinds import DATA_OFF, EMPTY, KIND_SLOT, LISTED, NEG_INF, ORDERSTAT
from brwsim.kernels.rng import DIST, gamma, mix, purpose_key, unit
from brwsim.kernels.special import CELL_C, NEG_LOG_ERR, cell_split, f64_bits, neg_log, spline_eval

# Parameter slots (the family writes them by these names)
OS_X0 = 0               # fpar: the splines' first log A
OS_INV_H = 1            # fpar: intervals per unit of log A
OS_BOUND_SLACK = 2      # fpar: the bound table's slack (0: no table; see below)
OS_BOUND_RATIO = 3      # fpar: exp(2 slack) (1 + OS_BOUND_WIDEN)
OS_VOCAB = 2            # ipar: vocabulary n
OS_N_INT = 3            # ipar: intervals of each spline
OS_N_HEAD = 4           # ipar: ranks generated exactly at set-up
OS_LAZY = 5             # ipar: 1 when the tail is drawn lazily
#: the slots the kind owns (tests/unit/test_kind_table.py checks the family writes these)
LAYOUT = {ORDERSTAT: ((OS_X0, OS_INV_H, OS_BOUND_SLACK, OS_BOUND_RATIO),
                      (OS_VOCAB, OS_N_INT, OS_N_HEAD, OS_LAZY))}

# Level state: the tail block's first and end rank in the head row
OS_BLOCK_LO = LISTED
OS_BLOCK_END = 5

# ORDERSTAT table layout inside data: three splines of n_int x 4 coefficients each.
OS_LOGW, OS_LOGM1, OS_LOGM2 = range(3)
# Early exit is taken only with this relative margin, so it never decides a rank that the
# exact comparison in the caller would decide otherwise.
_EXIT_MARGIN = 1.0 + 1e-9
# Lazy tail: rank r absorbs g times its mean share of the tail-sum discrepancy, with
# g = GAIN_FAR - (GAIN_FAR - TAIL_GAIN) * (mu / mu_0)**GAIN_POW rising from 0.6 at the
# first tail rank (the spread of exact partial sums of Dirichlet(0.05, 2048) at ranks
# 64-128; the power 0.1 matches the per-tree SD of E[X | T_P] at vocab 2048-32000) to 2
# deep in the tail, where the discrepancy then dies out (with a gain g its
# size relative to mu scales as mu**(g - 1)).
TAIL_GAIN = 0.6
GAIN_FAR = 2.0
GAIN_POW = 0.1


@kernel
def _os_eval(data, fpar, ipar, c, which, a):
    """Spline ``which`` (log-weight or log partial moment) at A = -log CDF = ``a``."""
    n_int = ipar[c, OS_N_INT]
    return spline_eval(data, ipar[c, DATA_OFF] + which * n_int * 4, n_int, fpar[c, OS_X0],
                       fpar[c, OS_INV_H],
                       math.log(a) if a > 0.0 else -1e300)


# ORDERSTAT bounds: after the three splines, data may hold OS_BOUND_CELLS + 1 weights
# exp(lw - lw_ref) of the log-weight spline lw at the cells' ends A = 2**e (1 + k / 2**OS_CELL_BITS)
# for e in [OS_EMIN, OS_EMAX), k < 2**OS_CELL_BITS (lw_ref: the value at the first end; 0
# where the weight would be below exp(-700)): a cell is read off the bits of A (its
# exponent and leading mantissa bits, no logarithm). fpar[c, OS_BOUND_SLACK] > 0 marks the
# table present (the spline is non-increasing over the grid, so within a cell it lies
# between the cell's end values, up to that slack; see brwsim.families.orderstat), and
# fpar[c, OS_BOUND_RATIO] is exp(2 slack) (1 + OS_BOUND_WIDEN): a weight inside a cell is
# at most exp(slack) times the cell's first end weight and at least exp(-slack) times its
# last, so a ratio of two weights is bounded by end weights and that factor.
OS_CELL_BITS = 7
OS_EMIN = -48
OS_EMAX = 2
OS_BOUND_CELLS = (OS_EMAX - OS_EMIN) << OS_CELL_BITS
#: relative widening of the bounds from tabulated weights: covers, by orders of magnitude,
#: the rounding of the weights (1 ulp of numpy's exp), of the factor and of the kernel's
#: products and sum of at most 8 terms
OS_BOUND_WIDEN = 1e-12
_OS_CELL0 = (1023 + OS_EMIN) << OS_CELL_BITS
# orderstat_below looks at this many ranks at most
_PROVE_RANKS = 8


# orderstat_below's relative widening of its A_j, which may differ from the exact test's
# by a few ulps (products by reciprocals instead of quotients): far beyond 8 ranks' rounding
_PROVE_WIDEN = 1e-13

@inline_kernel
def orderstat_below(data, fpar, ipar, c, dk, r_max):
    """True when the first ranks of the node prove that the exact test of
    :func:`orderstat_init` exits (its partial normaliser exceeds ``r_max`` times rank 0,
    so rank 0 is below the caller's cut-off), without the ranks' exact log-weights.

    A_j is the exact test's sum of -log(u_j) / (n - j), here with products by
    reciprocals and :func:`neg_log`, widened by ``_PROVE_WIDEN`` (relative) and by
    ``NEG_LOG_ERR / (n - j)`` per rank (absolute) to cover the difference; the
    weight W_j = exp(lw_j - lw_ref) is bounded by the tabulated weights at the ends of
    A_j's cell (``OS_CELL_BITS`` mantissa bits), read off the bits of A_j: W_0 from above
    by its cell's first end, W_j from below by its cell's last end, their ratios
    within the factor exp(2 slack) (``fpar[c, OS_BOUND_RATIO]``; the slack covers the
    rounding of log A_j and of the spline's evaluation, the factor is widened by
    ``OS_BOUND_WIDEN`` for the rounding of the weights and of the sums here). The exact
    test exits once sum_{j>=1} W_j > (r_max - 1) W_0; the lower bound of that sum is
    compared with the upper bound of the right side after each rank. True only when
    it exceeds it, so the exact sum does too. False (undecided) after ``_PROVE_RANKS``
    ranks or when A_j lies outside the table (or W_0's bound underflows to 0): the
    caller then runs the exact test. Per rank: -log of the uniform from its bits and a
    polynomial (:func:`neg_log`, within ``NEG_LOG_ERR`` of libm's, which the bounds of
    A_j also absorb), one product, one table read and one addition (no libm call),
    against two logarithms, a quotient, a spline and an exponential for the exact test.
    """
    n = ipar[c, OS_VOCAB]
    tb = ipar[c, DATA_OFF] + 12 * ipar[c, OS_N_INT]     # the bound table, after three splines
    inv = 1.0 / n
    a = neg_log(unit(dk, 1)) * inv
    err = NEG_LOG_ERR * inv                      # bound of |a - the exact test's A_j|, less _PROVE_WIDEN
    i = (f64_bits(a * (1.0 - _PROVE_WIDEN) - err) >> (52 - OS_CELL_BITS)) - _OS_CELL0
    if i < 0 or i >= OS_BOUND_CELLS:
        return False
    # the table entries of the later ranks must sum to more than lim, an upper bound of
    # (r_max - 1) W_0 in table units (r_max - 1 rounds by at most 2**-52 relative for
    # r_max < 8; r_max <= 1, a cut-off >= 0, gives lim <= 0 and no proof)
    lim = (r_max - 1.0) * data[tb + i] * fpar[c, OS_BOUND_RATIO]
    if not lim > 0.0:
        return False
    acc = 0.0
    for j in range(1, min(_PROVE_RANKS, ipar[c, OS_N_HEAD])):
        inv = 1.0 / (n - j)
        a += neg_log(unit(dk, j + 1)) * inv
        err += NEG_LOG_ERR * inv
        i = (f64_bits(a * (1.0 + _PROVE_WIDEN) + err) >> (52 - OS_CELL_BITS)) - _OS_CELL0
        if i < 0 or i >= OS_BOUND_CELLS:
            return False
        acc += data[tb + i + 1]
        if acc > lim:
            return True
    return False


@inline_kernel
def _orderstat_r_max(min_logq):
    """The largest partial normaliser, relative to rank 0, that lets rank 0 reach ``min_logq``."""
    return math.exp(-min_logq) * _EXIT_MARGIN if min_logq > -700.0 else np.inf


@inline_kernel
def orderstat_empty(data, fpar, ipar, c, dk, min_logq):
    """True when :func:`orderstat_below` proves the node's rank 0 below ``min_logq`` (the
    level is then EMPTY); tried only where a proof is possible (the partial normaliser of
    k ranks is at most k) and the component has its bound table. False: undecided."""
    r_max = _orderstat_r_max(min_logq)
    return (r_max < _PROVE_RANKS and fpar[c, OS_BOUND_SLACK] > 0.0
            and orderstat_below(data, fpar, ipar, c, dk, r_max))


@kernel
def orderstat_child_empty(data, fpar, ipar, key, min_logq):
    """:func:`orderstat_empty` for the node with ``key`` of a family of one ORDERSTAT
    component (a call, so that a caller's loop does not carry its code inline)."""
    return orderstat_empty(data, fpar, ipar, 0, purpose_key(key, DIST), min_logq)


@kernel
def orderstat_init(data, fpar, ipar, c, dk, d, lf, li, head, min_logq):
    """Descending order statistics of ``vocab`` i.i.d. weights (Dirichlet, SoftmaxNormal).

    The j-th largest of n uniforms has -log CDF A_j = A_{j-1} + E_j / (n - j + 1) with
    E_j standard exponential (Renyi, exact); the weight is the tabulated quantile at A_j.
    Small vocabularies are generated in full (exact normaliser); large ones generate a
    head of ``ipar[c, OS_N_HEAD]`` ranks and draw the sum R of the remaining weights from a
    moment-matched gamma law of the truncated tail, capped at (n - head) times the last
    head weight; the tail ranks then share exactly R (:func:`orderstat_tail`, see
    ``brwsim.families.Dirichlet``). Generation stops early, leaving the level EMPTY,
    once the partial normaliser proves that even rank 0 has log-probability below
    ``min_logq`` (:func:`dist_init` tries a cheaper proof first, :func:`orderstat_empty`).

    Lazy state: ``lf[d, 0]`` log normaliser, ``lf[d, 1]`` A of the last generated rank,
    ``lf[d, 2]`` probability not yet emitted, ``lf[d, 3]`` the last emitted probability,
    ``lf[d, 4]`` the conditional mean of the probability from the next rank on,
    ``lf[d, 5]`` that mean at the first tail rank; ``li[d, OS_BLOCK_LO]`` and ``li[d, OS_BLOCK_END]`` the
    first and end rank of the tail block in the head row (:func:`orderstat_tail`).
    """
    n = ipar[c, OS_VOCAB]
    n_head = ipar[c, OS_N_HEAD]
    r_max = _orderstat_r_max(min_logq)
    a = 0.0
    lw1 = 0.0
    acc = 0.0
    for j in range(n_head):
        a -= math.log(unit(dk, j + 1)) / (n - j)
        lw = _os_eval(data, fpar, ipar, c, OS_LOGW, a)
        head[d, j] = lw
        if j == 0:
            lw1 = lw
            acc = 1.0
        else:
            acc += math.exp(lw - lw1)
            if acc > r_max:
                li[d, KIND_SLOT] = EMPTY
                return
    log_z = lw1 + math.log(acc)
    log_tail = NEG_INF
    mean_z = 0.0
    if ipar[c, OS_LAZY] == 1:
        rest = n - n_head
        cdf = math.exp(-a)
        m1 = math.exp(_os_eval(data, fpar, ipar, c, OS_LOGM1, a)) / cdf
        m2 = math.exp(_os_eval(data, fpar, ipar, c, OS_LOGM2, a)) / cdf
        mean = rest * m1
        var = rest * (m2 - m1 * m1)
        tail = mean
        if var > 0.0 and mean > 0.0:
            tail = gamma(mean * mean / var, mix(dk ^ np.uint64(0x7A11))) * (var / mean)
        if tail > 0.0:
            # the rest are below the last head weight: R <= rest * w_last always
            log_tail = min(math.log(tail), math.log(rest) + head[d, n_head - 1])
            log_z = np.logaddexp(log_z, log_tail)
        if mean > 0.0:
            mean_z = math.exp(math.log(mean) - log_z)
    for j in range(n_head):
        head[d, j] -= log_z
    lf[d, 0] = log_z
    lf[d, 1] = a
    lf[d, 2] = math.exp(log_tail - log_z)
    lf[d, 3] = math.exp(head[d, n_head - 1])
    lf[d, 4] = mean_z
    lf[d, 5] = mean_z
    li[d, OS_BLOCK_LO] = n_head                   # no tail block yet
    li[d, OS_BLOCK_END] = n_head
    li[d, KIND_SLOT] = ORDERSTAT


# _pow_gain(x) = x**GAIN_POW for x in (0, 1] without libm (cells: cell_split):
# x**p = (2**p)**e c**p (1 + t)**p, (1 + t)**p by its Taylor series to t**4 (remainder
# below 1.5e-14 relative; measured relative error of the whole below 2e-14, against 1 ulp,
# 1.1e-16, for libm's pow, at a fraction of its cost).
_POW_CP = CELL_C ** GAIN_POW
_POW_E = 2.0 ** (GAIN_POW * np.arange(0, -1023, -1.0))     # (2**p)**e for e = 0, -1, ...
_POW_T1 = GAIN_POW
_POW_T2 = GAIN_POW * (GAIN_POW - 1.0) / 2.0
_POW_T3 = GAIN_POW * (GAIN_POW - 1.0) * (GAIN_POW - 2.0) / 6.0
_POW_T4 = GAIN_POW * (GAIN_POW - 1.0) * (GAIN_POW - 2.0) * (GAIN_POW - 3.0) / 24.0


@inline_kernel
def _pow_gain(x):
    """x**GAIN_POW for x in (0, 1] to 2e-14 (relative), from x's bits and three tables; x
    below the normal range, or not in (0, 1], goes to libm's pow."""
    if not (2.2250738585072014e-308 <= x <= 1.0):
        return x ** GAIN_POW if x > 0.0 else 0.0
    e, i, t = cell_split(x)                # e <= 0
    return _POW_E[-e] * _POW_CP[i] * (1.0 + t * (_POW_T1 + t * (_POW_T2 + t * (_POW_T3 + t * _POW_T4))))


# Lazy tail ranks are generated in blocks of up to TAIL_BLOCK ranks (fewer at first: as
# many as the tail ranks listed so far, at least 4), each kept in the level's head row after
# the head as OS_SNAP numbers: its log-probability and the lazy state after it (A, M, q, mu).
TAIL_BLOCK = 16
OS_SNAP = 5


def orderstat_head_cap(n_head: int, lazy: bool) -> int:
    """Head entries of an ORDERSTAT level: the head's ranks, and a lazy tail's block."""
    return n_head + (OS_SNAP * TAIL_BLOCK if lazy else 0)


@kernel
def orderstat_tail(data, fpar, ipar, c, key, d, r, lf, li, head):
    """Lazy tail ranks r, r + 1, ... (r >= the head) of level ``d``, consistent with the
    drawn tail sum, into the level's block (``li[d, OS_BLOCK_LO]`` its first rank, ``li[d, OS_BLOCK_END]`` the
    end); ``lf`` holds the state after rank r - 1 and is left unchanged (:func:`dist_next`
    restores each rank's state as it reads the rank).

    State (probability units): M the mass not yet emitted (R / Z at the first tail rank),
    mu = E[sum of ranks >= r | previous order statistic] (mu_0 at the first tail rank)
    and the last emitted q. With w the exact r-th order statistic (Renyi's sum continues)
    and m = n - 1 - r ranks after it, rank r takes w (1 + g (M - mu) / mu), with
    g = 2 - 1.4 (mu / mu_0)**0.1 (see ``TAIL_GAIN``), clipped to
    [M / (m + 1), min(M, previous)]; the last rank takes all of M. The tail thus sums to R
    exactly, ranks never increase, and M <= (m + 1) * previous holds at every step, so the
    clip is never empty and the last rank fits. Once M is exhausted every rank is -inf
    and the state stays. A block computes each rank's numbers with the operations of the
    rank-by-rank recursion, in phases: the parts that do not depend on M (the order
    statistics, splines, the gain and the final logarithm) run as loops of independent
    iterations, which the processor overlaps.
    """
    n = ipar[c, OS_VOCAB]
    n_head = ipar[c, OS_N_HEAD]
    count = min(TAIL_BLOCK, max(4, r - n_head), n - r)
    dk = purpose_key(key, DIST)
    n_int = ipar[c, OS_N_INT]
    log_z = lf[d, 0]
    off_w = ipar[c, DATA_OFF] + OS_LOGW * n_int * 4
    off_m = ipar[c, DATA_OFF] + OS_LOGM1 * n_int * 4
    x0, inv_h = fpar[c, OS_X0], fpar[c, OS_INV_H]
    a = lf[d, 1]
    left = lf[d, 2]
    prev = lf[d, 3]
    mu = lf[d, 4]
    mu0 = lf[d, 5]
    end = n_head + OS_SNAP * count
    # The rank-by-rank recursion in phases over the block, each a loop whose iterations
    # are independent (or one cheap operation apart), so that they overlap; each rank's
    # operations are those of the recursion. Slots per rank: 0 w, then its log-probability;
    # 1 the increment of A, then A; 2 the gain, then M; 3 q; 4 mu after the rank.
    if left > 0.0:
        # 1. increments of A, and 2. A itself (a running difference, in rank order)
        for o in range(n_head, end, OS_SNAP):
            rk = r + (o - n_head) // OS_SNAP
            head[d, o + 1] = math.log(unit(dk, rk + 1)) / (n - rk)
        for o in range(n_head, end, OS_SNAP):
            a = a - head[d, o + 1]
            head[d, o + 1] = a
        # 3. the order statistics' probabilities w and the conditional means mu
        for o in range(n_head, end, OS_SNAP):
            rk = r + (o - n_head) // OS_SNAP
            ak = head[d, o + 1]
            x = math.log(ak)
            w = math.exp(spline_eval(data, off_w, n_int, x0, inv_h, x) - log_z)
            head[d, o] = w
            m = n - 1 - rk
            if m > 0:
                c1 = math.exp(ak - log_z + spline_eval(data, off_m, n_int, x0, inv_h, x))
                head[d, o + 4] = m * min(c1, w)
        # 4. the gains, from mu before each rank (frac**GAIN_POW to 2e-14, _pow_gain)
        mu_k = mu
        for o in range(n_head, end, OS_SNAP):
            frac = mu_k / mu0 if mu0 > mu_k else 1.0
            head[d, o + 2] = GAIN_FAR - (GAIN_FAR - TAIL_GAIN) * _pow_gain(frac)
            mu_k = head[d, o + 4]
    # 5. the clip, rank by rank (M and q carry over); an exhausted M ends the live ranks
    live = n_head
    a_k = lf[d, 1]
    for o in range(n_head, end, OS_SNAP):
        if not left > 0.0:
            break
        rk = r + (o - n_head) // OS_SNAP
        w = head[d, o]
        m = n - 1 - rk
        if m > 0:
            gain = head[d, o + 2]
            out = w + gain * w * (left - mu) / mu if mu > 0.0 else left
            out = min(max(out, left / (m + 1)), min(left, prev))
            mu = head[d, o + 4]
        else:
            out = min(left, prev)
            head[d, o + 4] = mu
        left = left - out
        prev = out
        a_k = head[d, o + 1]
        head[d, o + 2] = left
        head[d, o + 3] = prev
        live = o + OS_SNAP
    # 6. log-probabilities of the live ranks; the rest are -inf and keep the state
    for o in range(n_head, live, OS_SNAP):
        q = head[d, o + 3]
        head[d, o] = math.log(q) if q > 0.0 else NEG_INF
    for o in range(live, end, OS_SNAP):
        head[d, o] = NEG_INF
        head[d, o + 1] = a_k
        head[d, o + 2] = left
        head[d, o + 3] = prev
        head[d, o + 4] = mu
    li[d, OS_BLOCK_LO] = r
    li[d, OS_BLOCK_END] = r + count


@inline_kernel
def orderstat_level_init(data, fpar, ipar, c, dk, d, lf, li, head, min_logq):
    """An ORDERSTAT level of component ``c``: EMPTY when :func:`orderstat_empty` proves its
    rank 0 below ``min_logq``, else :func:`orderstat_init`."""
    if orderstat_empty(data, fpar, ipar, c, dk, min_logq):
        li[d, KIND_SLOT] = EMPTY
    else:
        orderstat_init(data, fpar, ipar, c, dk, d, lf, li, head, min_logq)


@inline_kernel
def orderstat_next(data, fpar, ipar, c, key, d, r, lf, li, head):
    """Log-probability of rank ``r`` of an ORDERSTAT level (``-inf`` past the vocabulary):
    a head rank, or a tail rank from its block (listed by :func:`orderstat_tail` when
    ``r`` is outside the block), whose lazy state becomes the level's."""
    out = NEG_INF
    if r < ipar[c, OS_N_HEAD]:
        out = head[d, r]
    elif r < ipar[c, OS_VOCAB]:
        if not (li[d, OS_BLOCK_LO] <= r < li[d, OS_BLOCK_END]):
            orderstat_tail(data, fpar, ipar, c, key, d, r, lf, li, head)
        o = ipar[c, OS_N_HEAD] + OS_SNAP * (r - li[d, OS_BLOCK_LO])
        out = head[d, o]
        lf[d, 1] = head[d, o + 1]
        lf[d, 2] = head[d, o + 2]
        lf[d, 3] = head[d, o + 3]
        lf[d, 4] = head[d, o + 4]
    return out
