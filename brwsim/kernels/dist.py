"""Lazy sorted next-token distributions of one node, as numba kernels.

A family compiles to a flat *spec* of arrays (see :mod:`brwsim.families.base`):

* ``kinds[c]``, ``cw[c]`` (cumulative mixture weight), ``fpar[c, :]``, ``ipar[c, :]`` for
  each component c, and one float64 ``data`` array that components index with
  ``ipar[c, 0]`` (offset) and ``ipar[c, 1]`` (length).

A node's distribution lives in one *level* of the caller's state arrays
(``lf[d, :]`` floats, ``li[d, :]`` ints, ``head[d, :]`` a buffer of log-probabilities).
``dist_init`` sets the level up from the node's key; each ``dist_next`` returns the
log-probability of the next rank (0 = most likely), or ``-inf`` once the vocabulary is
exhausted. Ranks come out in non-increasing order, and no call costs O(vocab) unless the
family is exact-by-construction at small vocabularies.

Level layout: ``li[d, 0]`` effective kind, ``li[d, 1]`` next rank, ``li[d, 2]`` component,
``li[d, 3]`` kind-specific, ``li[d, CTX_I]`` the node's context (regime, depth);
``lf[d, 0..5]`` kind-specific, ``lf[d, CTX_F]`` the node's latent context value.

Context-dependent environments add a *context program* ``cprog`` (float64): how a node's
context follows from its parent's and how it selects the node's components. Every random
number still comes from the node's key (purpose REGIME), so the environment remains a
function of (seed, path):

* ``CTX_NONE``: ``[0]``; i.i.d. nodes.
* ``CTX_REGIME``: ``[1, K, T (K x K cumulative rows), pi (K cumulative), lo_0, hi_0, ...]``:
  a Markov regime; the root draws from pi, a child from its parent's row of T; the node's
  components are ``[lo_k, hi_k)``.
* ``CTX_DEPTH``: ``[2, D, lo_0, hi_0, ...]``: the node at depth d below the current root uses
  range ``min(d, D - 1)``.
* ``CTX_AR1``: ``[3, rho]``: a latent z, N(0, 1) at the root and rho z_parent +
  sqrt(1 - rho^2) N(0, 1) below; an ENTROPY component takes its value at quantile Phi(z).
* ``CTX_NGRAM``: ``[4, V, N - 1, n_pos, V**(N - 2) (0 if N = 1), code_0, ..., code_{n_pos-1}]``:
  the context is the node's last N - 1 tokens coded base V (most recent token most
  significant, see :mod:`brwsim.kernels.ngram`). A child appends the token of its rank,
  read from the parent's head (``head[pd, V + rank]``, written by an NGRAM component); a
  drawn root takes the context ``code_i`` of a uniform corpus position i.
* ``CTX_LSTM``: ``[5, V, W, n_roots, n_classes, class_0, ...]``: a recurrent state kept in
  the level's head row (see :mod:`brwsim.kernels.lstm`). A child's ``li[d, CTX_I]`` is the
  class of its rank, read from the parent's head (``head[pd, V + rank]``) and the LSTM
  component advances the parent's state by it; a drawn root takes the window
  ``class_i .. class_{i+W-1}`` of a uniform i < n_roots; a preset root keeps the state
  the caller wrote into its head row. The TRANSFORMER kind uses the same program (its
  classes are the token stream of the prompts, W the root window's length).
"""

from __future__ import annotations

import math

import numpy as np

from numba import types
from numba.extending import overload

from brwsim.kernels import inline_kernel, kernel
from brwsim.kernels.betaquantile import beta_log_heavy, beta_log_pair
from brwsim.kernels.netinit import net_init
from brwsim.kernels.ngram import ngram_init
from brwsim.kernels.rng import DIST, REGIME, gamma, gamma_parts, mix, normal, purpose_key, unit
from brwsim.kernels.special import (CELL_C, NEG_LOG_ERR, bits_f64, cell_split, exp_neg, f64_bits, neg_log,
                                    spline_eval, spline_index, spline_poly, zipf_sum)

UNIFORM = 0
TABLE = 1
GEOMETRIC = 2  # fpar[c] = (r, log r, log(1 - r))
ZIPF = 3       # fpar[c] = (s_lo, s_hi, inv_h, lowest floor); ipar[c, 2:4] = (vocab, n_int);
               # data: log-normaliser spline [coefficients | starts | floors] (_closed_init)
BANK = 4
ORDERSTAT = 5
PEAKED = 6
ENTROPY = 7  # geometric (ipar[c, 2] == 0) or Zipf over ipar[c, 2] tokens, parameter per node from data
NGRAM = 8    # Kneser-Ney n-gram: tables in data (brwsim.kernels.ngram), fpar[c, 0] = beta
LSTM = 9     # textgenrnn's char-LSTM: weights in data (brwsim.kernels.lstm), fpar[c] = beta, carry
TRANSFORMER = 10  # GPT-2 / Llama checkpoint (brwsim.kernels.transformer): fpar[c] = beta, carry,
                  # window; ipar[c, 2] = context slots (window + carry)
DIRICHLET = 11   # symmetric Dirichlet by binary aggregation: fpar[c, 0] = alpha,
                 # ipar[c, 2] = vocab, data: Beta quantile tables (see _dirichlet_init)

NF = 8          # float parameters per component
NI = 6          # int parameters per component
LEVEL_F = 8     # float state per level
LEVEL_I = 6     # int state per level
CTX_F = 6       # lf slot of the latent context value
CTX_I = 4       # li slot of the context (regime, depth)

CTX_NONE, CTX_REGIME, CTX_DEPTH, CTX_AR1, CTX_NGRAM, CTX_LSTM = 0, 1, 2, 3, 4, 5
ROOT_DRAW = -1      # ``pd`` of a root whose context is drawn from the stationary law
ROOT_PRESET = -2    # ``pd`` of a root whose context the caller has written into its level

EMPTY = -1      # a level proven to have no rank above the caller's cut-off

#: dtype of ``kinds`` of a family without NGRAM or LSTM components (see :func:`kinds_dtype`).
PLAIN_KINDS = np.int64
#: dtype of ``kinds`` of a family with an NGRAM or LSTM component.
CONTEXTUAL_KINDS = np.int32

# ORDERSTAT table layout inside data: three splines of n_int x 4 coefficients each.
OS_LOGW, OS_LOGM1, OS_LOGM2 = range(3)
NEG_INF = -np.inf
# Early exit is taken only with this relative margin, so it never decides a rank that the
# exact comparison in the caller would decide otherwise.
_EXIT_MARGIN = 1.0 + 1e-9
# Lazy tail: rank r absorbs g times its mean share of the tail-sum discrepancy, with
# g = _GAIN_FAR - (_GAIN_FAR - _TAIL_GAIN) * (mu / mu_0)**_GAIN_POW rising from 0.6 at the
# first tail rank (the spread of exact partial sums of Dirichlet(0.05, 2048) at ranks
# 64-128; the power 0.1 matches the per-tree SD of E[X | T_P] at vocab 2048-32000) to 2
# deep in the tail, where the discrepancy then dies out (with a gain g its
# size relative to mu scales as mu**(g - 1)).
_TAIL_GAIN = 0.6
_GAIN_FAR = 2.0
_GAIN_POW = 0.1


@kernel
def _os_eval(data, fpar, ipar, c, which, a):
    """Spline ``which`` (log-weight or log partial moment) at A = -log CDF = ``a``."""
    n_int = ipar[c, 3]
    return spline_eval(data, ipar[c, 0] + which * n_int * 4, n_int, fpar[c, 0], fpar[c, 1],
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
OS_BOUND_SLACK = 2
OS_BOUND_RATIO = 3
#: relative widening of the bounds from tabulated weights: covers, by orders of magnitude,
#: the rounding of the weights (1 ulp of numpy's exp), of the factor and of the kernel's
#: products and sum of at most 8 terms
OS_BOUND_WIDEN = 1e-12
_OS_CELL0 = (1023 + OS_EMIN) << OS_CELL_BITS
# _orderstat_below looks at this many ranks at most
_PROVE_RANKS = 8


# _orderstat_below's relative widening of its A_j, which may differ from the exact test's
# by a few ulps (products by reciprocals instead of quotients): far beyond 8 ranks' rounding
_PROVE_WIDEN = 1e-13

@inline_kernel
def _orderstat_below(data, fpar, ipar, c, dk, r_max):
    """True when the first ranks of the node prove that the exact test of
    :func:`_orderstat_init` exits (its partial normaliser exceeds ``r_max`` times rank 0,
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
    n = ipar[c, 2]
    tb = ipar[c, 0] + 12 * ipar[c, 3]            # the bound table, after three splines
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
    for j in range(1, min(_PROVE_RANKS, ipar[c, 4])):
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
def _orderstat_empty(data, fpar, ipar, c, dk, min_logq):
    """True when :func:`_orderstat_below` proves the node's rank 0 below ``min_logq`` (the
    level is then EMPTY); tried only where a proof is possible (the partial normaliser of
    k ranks is at most k) and the component has its bound table. False: undecided."""
    r_max = _orderstat_r_max(min_logq)
    return (r_max < _PROVE_RANKS and fpar[c, OS_BOUND_SLACK] > 0.0
            and _orderstat_below(data, fpar, ipar, c, dk, r_max))


@kernel
def orderstat_child_empty(data, fpar, ipar, key, min_logq):
    """:func:`_orderstat_empty` for the node with ``key`` of a family of one ORDERSTAT
    component (a call, so that a caller's loop does not carry its code inline)."""
    return _orderstat_empty(data, fpar, ipar, 0, purpose_key(key, DIST), min_logq)


@kernel
def _orderstat_init(data, fpar, ipar, c, dk, d, lf, li, head, min_logq):
    """Descending order statistics of ``vocab`` i.i.d. weights (Dirichlet, SoftmaxNormal).

    The j-th largest of n uniforms has -log CDF A_j = A_{j-1} + E_j / (n - j + 1) with
    E_j standard exponential (Renyi, exact); the weight is the tabulated quantile at A_j.
    Small vocabularies are generated in full (exact normaliser); large ones generate a
    head of ``ipar[c, 4]`` ranks and draw the sum R of the remaining weights from a
    moment-matched gamma law of the truncated tail, capped at (n - head) times the last
    head weight; the tail ranks then share exactly R (:func:`_orderstat_tail`, see
    ``brwsim.families.Dirichlet``). Generation stops early, leaving the level EMPTY,
    once the partial normaliser proves that even rank 0 has log-probability below
    ``min_logq`` (:func:`dist_init` tries a cheaper proof first, :func:`_orderstat_empty`).

    Lazy state: ``lf[d, 0]`` log normaliser, ``lf[d, 1]`` A of the last generated rank,
    ``lf[d, 2]`` probability not yet emitted, ``lf[d, 3]`` the last emitted probability,
    ``lf[d, 4]`` the conditional mean of the probability from the next rank on,
    ``lf[d, 5]`` that mean at the first tail rank; ``li[d, 3]`` and ``li[d, 5]`` the
    first and end rank of the tail block in the head row (:func:`_orderstat_tail`).
    """
    n = ipar[c, 2]
    n_head = ipar[c, 4]
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
                li[d, 0] = EMPTY
                return
    log_z = lw1 + math.log(acc)
    log_tail = NEG_INF
    mean_z = 0.0
    if ipar[c, 5] == 1:
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
    li[d, 3] = n_head                   # no tail block yet
    li[d, 5] = n_head
    li[d, 0] = ORDERSTAT


# _pow_gain(x) = x**_GAIN_POW for x in (0, 1] without libm (cells: cell_split):
# x**p = (2**p)**e c**p (1 + t)**p, (1 + t)**p by its Taylor series to t**4 (remainder
# below 1.5e-14 relative; measured relative error of the whole below 2e-14, against 1 ulp,
# 1.1e-16, for libm's pow, at a fraction of its cost).
_POW_CP = CELL_C ** _GAIN_POW
_POW_E = 2.0 ** (_GAIN_POW * np.arange(0, -1023, -1.0))     # (2**p)**e for e = 0, -1, ...
_POW_T1 = _GAIN_POW
_POW_T2 = _GAIN_POW * (_GAIN_POW - 1.0) / 2.0
_POW_T3 = _GAIN_POW * (_GAIN_POW - 1.0) * (_GAIN_POW - 2.0) / 6.0
_POW_T4 = _GAIN_POW * (_GAIN_POW - 1.0) * (_GAIN_POW - 2.0) * (_GAIN_POW - 3.0) / 24.0


@inline_kernel
def _pow_gain(x):
    """x**_GAIN_POW for x in (0, 1] to 2e-14 (relative), from x's bits and three tables; x
    below the normal range, or not in (0, 1], goes to libm's pow."""
    if not (2.2250738585072014e-308 <= x <= 1.0):
        return x ** _GAIN_POW if x > 0.0 else 0.0
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
def _orderstat_tail(data, fpar, ipar, c, key, d, r, lf, li, head):
    """Lazy tail ranks r, r + 1, ... (r >= the head) of level ``d``, consistent with the
    drawn tail sum, into the level's block (``li[d, 3]`` its first rank, ``li[d, 5]`` the
    end); ``lf`` holds the state after rank r - 1 and is left unchanged (:func:`dist_next`
    restores each rank's state as it reads the rank).

    State (probability units): M the mass not yet emitted (R / Z at the first tail rank),
    mu = E[sum of ranks >= r | previous order statistic] (mu_0 at the first tail rank)
    and the last emitted q. With w the exact r-th order statistic (Renyi's sum continues)
    and m = n - 1 - r ranks after it, rank r takes w (1 + g (M - mu) / mu), with
    g = 2 - 1.4 (mu / mu_0)**0.1 (see ``_TAIL_GAIN``), clipped to
    [M / (m + 1), min(M, previous)]; the last rank takes all of M. The tail thus sums to R
    exactly, ranks never increase, and M <= (m + 1) * previous holds at every step, so the
    clip is never empty and the last rank fits. Once M is exhausted every rank is -inf
    and the state stays. A block computes each rank's numbers with the operations of the
    rank-by-rank recursion, in phases: the parts that do not depend on M (the order
    statistics, splines, the gain and the final logarithm) run as loops of independent
    iterations, which the processor overlaps.
    """
    n = ipar[c, 2]
    n_head = ipar[c, 4]
    count = min(TAIL_BLOCK, max(4, r - n_head), n - r)
    dk = purpose_key(key, DIST)
    n_int = ipar[c, 3]
    log_z = lf[d, 0]
    off_w = ipar[c, 0] + OS_LOGW * n_int * 4
    off_m = ipar[c, 0] + OS_LOGM1 * n_int * 4
    x0, inv_h = fpar[c, 0], fpar[c, 1]
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
        # 4. the gains, from mu before each rank (frac**_GAIN_POW to 2e-14, _pow_gain)
        mu_k = mu
        for o in range(n_head, end, OS_SNAP):
            frac = mu_k / mu0 if mu0 > mu_k else 1.0
            head[d, o + 2] = _GAIN_FAR - (_GAIN_FAR - _TAIL_GAIN) * _pow_gain(frac)
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
    li[d, 3] = r
    li[d, 5] = r + count


# DIRICHLET head row: the listed log-probabilities [0, vocab), then the depth-first stack
# of groups, DIR_STACK entries of DIR_ENTRY; the stack never holds more than
# about log2(vocab) + 2 groups.
DIR_STACK = 64
DIR_ENTRY = 4      # a stack entry: log mass, size, group id, its split's uniform
_GROUP_KEY = np.uint64(0x9E3779B97F4A7C15)
_JOHNK_BELOW = 1.5
_LOG_HALF = math.log(0.5)
# a group whose log mass is below the cut-off less log 2 and this margin splits into a
# lighter part certainly below the cut-off: its computed log mass is at most log(1/2)
# plus the Beta tables' error (1e-11) and roundings, far below this
_HALF_MARGIN = 1e-9
_SORT_PLAIN = 32        # _sort_descending: insertion sort up to this many entries
_CDF_HEADER = 6         # brwsim.families.betaquantile.CDF_HEADER (_split_empty)
# size-biased picks (_dirichlet_picks): rounds of rejection per pick before the exact
# fall-back; below these bounds on log(1 - V) and above them on 1 - V, log V comes from
# expm1's Taylor series and from the atanh series (_pick_round)
_PICK_ROUNDS = 64
_PICK_EXPM1 = -1.0 / 32.0
_PICK_SERIES = 1.0 / 16.0
#: The largest total concentration (size times alpha) of a DIRICHLET group drawn by
#: size-biased picks instead of splits (the family's ``picked_size``). Measured on
#: Dirichlet(0.05, 200), set-ups of 1e5 nodes with cut-offs uniform on (0, 1), two runs:
#: 361-402 ns a node at 2.5 (groups of 50 tokens), 364-435 at 1.25, 414-447 at 5 and
#: 561-577 at 10 (picks only), against 519 ns with splits only (the previous kernel).
PICK_MASS = 2.5


def dirichlet_head_cap(vocab: int) -> int:
    """Head entries of a DIRICHLET level over ``vocab`` tokens."""
    return vocab + DIR_ENTRY * DIR_STACK


@kernel
def _sort_descending(row, k):
    """Sort row[:k] into non-increasing order in place (Shell sort, Knuth's gaps; a plain
    insertion sort up to ``_SORT_PLAIN`` entries, which the walks list nearly sorted:
    heavier halves first, picks mostly in decreasing order)."""
    h = 1
    if k > _SORT_PLAIN:
        while h < k // 3:
            h = 3 * h + 1
    while h >= 1:
        for i in range(h, k):
            x = row[i]
            j = i
            while j >= h and row[j - h] < x:
                row[j] = row[j - h]
                j -= h
            row[j] = x
        h //= 3


@kernel
def _log_beta_split(a, b, gk):
    """(log B, log(1 - B)) for B ~ Beta(a, b), from the stream ``gk`` (exact).

    Equal shapes a = b >= 1 (the halves of an even group) use Ulrich's polar method, one
    pair of uniforms and no rejection. Small shapes (a + b <= _JOHNK_BELOW) use Johnk's method: X = U**(1/a), Y = V**(1/b),
    accepted when X + Y <= 1, then B = X / (X + Y), all in logs (acceptance
    Gamma(a + 1) Gamma(b + 1) / Gamma(a + b + 1) >= 0.63 here; uniforms 2i, 2i + 1 of
    round i). Larger ones, or the unheard-of 64 rejections, take two Marsaglia-Tsang
    gammas G1 / (G1 + G2) from streams of their own.
    """
    if a == b and a >= 1.0:
        # Ulrich (1984): B = (1 + sin(2 pi V) sqrt(1 - U**(2 / (2a - 1)))) / 2, no rejection
        sr = math.sin(2.0 * math.pi * unit(gk, 1)) * math.sqrt(
            -math.expm1(2.0 * math.log(unit(gk, 0)) / (2.0 * a - 1.0)))
        return _LOG_HALF + math.log1p(sr), _LOG_HALF + math.log1p(-sr)
    if a + b <= _JOHNK_BELOW:
        for i in range(64):
            lx = math.log(unit(gk, 2 * i)) / a
            ly = math.log(unit(gk, 2 * i + 1)) / b
            if lx >= ly:
                lt = lx + math.log1p(math.exp(ly - lx))
            else:
                lt = ly + math.log1p(math.exp(lx - ly))
            if lt <= 0.0:
                return lx - lt, ly - lt
    x1, b1 = gamma_parts(a, mix(gk ^ np.uint64(1)))
    x2, b2 = gamma_parts(b, mix(gk ^ np.uint64(2)))
    if b1 == 0.0 and b2 == 0.0:         # both shapes >= 1: the gammas themselves
        inv = 1.0 / (x1 + x2)
        return math.log(x1 * inv), math.log(x2 * inv)
    lg1 = math.log(x1) + b1             # a shape below 1: in logs, G = x exp(b)
    lg2 = math.log(x2) + b2
    if lg1 >= lg2:
        lt = lg1 + math.log1p(math.exp(lg2 - lg1))
    else:
        lt = lg2 + math.log1p(math.exp(lg1 - lg2))
    return lg1 - lt, lg2 - lt


@inline_kernel
def _group_key(dk, g):
    """The stream of group ``g``'s split (``dk``: the node's distribution key)."""
    return mix(dk + np.uint64(g) * _GROUP_KEY)


@inline_kernel
def _group_unit(dk, g):
    """The uniform of group ``g``'s split: the first of its stream (:func:`_group_key`)."""
    return unit(_group_key(dk, g), 0)


@inline_kernel
def _push_group(row, sb, sp, lm, m, g, first, u):
    """Push onto the group stack at ``row[sb:]`` (``sp`` groups) the first half (``first``)
    or the second of group ``g`` of ``m`` tokens, with log mass ``lm`` and its split's
    uniform ``u``; the new size."""
    o = sb + DIR_ENTRY * sp
    row[o] = lm
    row[o + 1] = m // 2 if first else m - m // 2
    row[o + 2] = 2.0 * g if first else 2.0 * g + 1.0
    row[o + 3] = u
    return sp + 1


@inline_kernel
def _pick_round(alpha, b, u, w):
    """One round of :func:`_pick_fraction`'s rejection from the uniforms u and w:
    (log V, log(1 - V), accepted)."""
    l1v = -neg_log(u) / b
    if l1v > _PICK_EXPM1:
        # V < 1 - exp(-1/32): V = -expm1(l1v) by its Taylor series to l1v**9 (relative
        # error below 1e-19 here; 1 - exp would lose up to all of V's digits), inline
        x = l1v
        v = -x * (1.0 + x * (1.0 / 2.0 + x * (1.0 / 6.0 + x * (1.0 / 24.0 + x * (1.0 / 120.0 + x * (
            1.0 / 720.0 + x * (1.0 / 5040.0 + x * (1.0 / 40320.0 + x * (1.0 / 362880.0)))))))))
        nlv = neg_log(v) if v > 0.0 else np.inf
    else:
        e = exp_neg(l1v)                # 1 - V; V = 1 - e loses at most 5 bits
        if e > _PICK_SERIES:
            nlv = neg_log(1.0 - e)
        else:
            # -log(1 - e) = 2 atanh(s), s = e / (2 - e) <= 1/31: its series to s**13 keeps
            # the relative accuracy of a tiny log V (neg_log's is absolute)
            s = e / (2.0 - e)
            s2 = s * s
            nlv = 2.0 * s * (1.0 + s2 * (1.0 / 3.0 + s2 * (1.0 / 5.0 + s2 * (1.0 / 7.0 + s2 * (
                1.0 / 9.0 + s2 * (1.0 / 11.0 + s2 * (1.0 / 13.0)))))))
    return -nlv, l1v, neg_log(w) >= alpha * nlv


@kernel
def _pick_rejected(alpha, b, pk, j):
    """Pick ``j``'s fraction after its first two rounds were rejected: the next rounds,
    then the exact fall-back (a call, not inlined: the loop stays out of the picks' code)."""
    rk = mix(pk ^ (np.uint64(j + 1) * _GROUP_KEY))
    for i in range(2, _PICK_ROUNDS):
        lv, l1v, ok = _pick_round(alpha, b, unit(rk, 2 * i), unit(rk, 2 * i + 1))
        if ok:
            return lv, l1v
    return _log_beta_split(1.0 + alpha, b, mix(rk))


@inline_kernel
def _pick_fraction(alpha, b, pk, j):
    """(log V, log(1 - V)) for V ~ Beta(1 + alpha, b), the fraction of the size-biased
    pick ``j`` of the group whose stream is ``pk`` (exact).

    Rejection from Beta(1, b), whose inversion is closed: 1 - V = U**(1/b), accepted with
    probability V**alpha (the ratio of the two densities, at most 1), that is when
    log W <= alpha log V; log(1 - V) = log(U) / b. The acceptance rate b B(1 + alpha, b)
    is at least 0.88 for the alphas that use picks (below 0.08) at b <= ``PICK_MASS``
    (0.92 at alpha = 0.05; 0.5 at alpha = 1, where a forced component still works). Round 0
    reads uniforms 2j and 2j + 1 of the group's stream, round i >= 1 uniforms 2i and
    2i + 1 of a stream of the pick's own; after ``_PICK_ROUNDS`` rounds (never seen) the
    exact :func:`_log_beta_split` takes over. Rounds 0 and 1 are inline, later ones a call.

    log V keeps its accuracy at both ends: a V below 1 - exp(-1/32) comes from expm1's
    Taylor series (1 - exp would lose its digits); a V above 15/16 gives log V = -2 atanh(s),
    s = (1 - V) / (1 + V), by its series (relative accuracy, so a token of share
    1 - 1e-20 is not rounded to a log-probability of 0 or above). The logarithms and the
    exponential are :func:`~brwsim.kernels.special.neg_log`'s and
    :func:`~brwsim.kernels.special.exp_neg`'s (within 1.5e-14 absolute and 4.4e-16
    relative of libm's), inline: a libm call in the picks' loop costs more than its own
    time, and replacing them took a pick from 44 to 37 ns (2e6 independent picks); the
    last one, expm1's, +3% on Dirichlet(0.05, 200)'s pass.
    """
    lv, l1v, ok = _pick_round(alpha, b, unit(pk, 2 * j), unit(pk, 2 * j + 1))
    if ok:
        return lv, l1v
    rk = mix(pk ^ (np.uint64(j + 1) * _GROUP_KEY))
    lv, l1v, ok = _pick_round(alpha, b, unit(rk, 2), unit(rk, 3))
    if ok:
        return lv, l1v
    return _pick_rejected(alpha, b, pk, j)


@inline_kernel
def _dirichlet_picks(row, k, alpha, lm, m, pk, cut):
    """List the tokens above ``cut`` of a group of ``m`` tokens and log mass ``lm`` by
    size-biased picks; the new count of listed ranks in ``row``.

    Exact for a symmetric Dirichlet(alpha) over the group (its law given its mass, by the
    aggregation property): a token picked with probability equal to its share has share
    V_1 ~ Beta(1 + alpha, (m - 1) alpha), and the other m - 1 shares, divided by
    1 - V_1, are again a symmetric Dirichlet(alpha), independent of V_1; so pick j
    (j = 0, 1, ...) takes the fraction V ~ Beta(1 + alpha, (m - 1 - j) alpha) of what
    remains, and the last token the rest. Token identities do not matter (the node lists
    its ranks sorted). Once the remaining mass is below the cut-off no token left can
    reach it, and the picks stop. Each pick's draw depends on ``j`` only, not on earlier
    outcomes, so consecutive picks overlap in the processor; only the running log mass
    is carried.
    """
    lr = lm
    for j in range(m - 1):
        lv, l1v = _pick_fraction(alpha, (m - 1 - j) * alpha, pk, j)
        if lr + lv >= cut:
            row[k] = lr + lv
            k += 1
        lr += l1v
        if lr < cut:
            return k
    row[k] = lr
    return k + 1


@inline_kernel
def _split_empty(data, off, x, u):
    """True when a split at uniform ``u`` leaves both parts below e^x of the group's mass,
    x in [log(1/2), 0], by the emptiness table at ``data[off]``
    (:func:`brwsim.families.betaquantile.cdf_table`): F(1 - e^x) < u < F(e^x), each side
    inside by the table's margin. Within that margin the quantile tables' own parts are
    below e^x too, so the test decides as the draw would, without its logarithms."""
    n_int = int(data[off])
    i = spline_index(n_int, data[off + 1], data[off + 2], x)
    t = x - (data[off + 1] + i * data[off + 3])
    j = off + _CDF_HEADER + 4 * i
    f_hi = spline_poly(data, j, t)
    f_lo = 1.0 - f_hi if data[off + 5] == 1.0 else spline_poly(data, j + 4 * n_int, t)
    margin = data[off + 4]
    return f_lo + margin < u < f_hi - margin


@inline_kernel
def _dirichlet_init(data, fpar, ipar, c, dk, d, li, head, min_logq):
    """A DIRICHLET level: the node's ranks above ``min_logq``, sorted, in its head row.

    A symmetric Dirichlet(alpha) over n tokens is a binary aggregation tree (exact): a
    group of m tokens with mass M splits into its first m1 = m // 2 tokens and the other
    m2 with masses M B and M (1 - B), B ~ Beta(m1 alpha, m2 alpha) independent of M and
    of every other split, and, given its mass, a group is again a symmetric
    Dirichlet(alpha) over its m tokens. Group g (the root is 1, the halves of g are 2g and
    2g + 1) draws from its own stream, a hash of (node key, g).

    * A group of more than ``ipar[c, 3]`` tokens (``picked_size`` of the family: m alpha
      above ``PICK_MASS``) splits: its B inverts the first uniform of its stream through
      the tabulated Beta quantile of its shape pair
      (:func:`brwsim.kernels.betaquantile.beta_log_pair`, tables built with the family by
      :func:`brwsim.families.betaquantile.tree_block`; in ``data``, entry m of the first
      ``vocab + 1`` is the offset of the pair of a group of m tokens), exact up to the
      tables' error of at most 1e-11 in log B and log(1 - B), plus the rounding of log u
      amplified by 1 / (m1 alpha) (about 1e-16 / shape). A pair whose table would need
      more than 2048 intervals is drawn exactly by :func:`_log_beta_split` from the same
      stream.
    * A smaller group is drawn by size-biased picks (:func:`_dirichlet_picks`): each pick
      takes a Beta(1 + alpha, .) share of what remains, so the heavy tokens come first
      and the picks stop once the rest is below the cut-off. Picks are independent draws
      (only the running rest is carried), where the splits down the heavier halves are a
      chain, and at alpha = 0.05 a group of 50 tokens (concentration 2.5) needs about as
      many picks as a split walk needs splits per listed rank, without its chain:
      Dirichlet(0.05, 200) at P = 1024 ran 1.35-1.47x faster than with splits alone
      (``benchmarks/README.md``, issue 23's eighth round).

    So a token's log-probability is the same number whichever groups are visited: the
    node is a function of its key, and the ranks above any cut-off are the same numbers
    for every cut-off.

    A group's mass bounds each of its tokens, so a depth-first walk that never splits a
    group below the cut-off (less a relative margin of 1e-9, so no rank the caller would
    use is missed) finds exactly the tokens above it. A group of mass M below 2q
    (q = exp(min_logq), less a margin, ``_HALF_MARGIN``) needs only its heavier part: the
    lighter one is below the cut-off whatever its value. Its split's emptiness table
    (:func:`_split_empty`, entry m of the second index in ``data``) first decides from
    the uniform alone whether both parts fall below q / M, without the draw's logarithm,
    exponential and square root (most nodes of a pass have a cut-off above 1/2 and end
    there: +9% on Dirichlet(0.05, 200) at P = 1024, the same trees); otherwise it reads
    the heavier part's log mass (:func:`brwsim.kernels.betaquantile.beta_log_heavy`, the
    same number as the pair's). A group's halves' uniforms are hashed before its split's
    outcome is known (the stack holds them): the walk down the heavier halves is a chain
    of dependent draws, and the hashes then overlap it.

    Inline in :func:`dist_init` (a call per node cost 7% of Dirichlet(0.05, 200)'s pass).
    ``li[d, 3]`` is the number of listed ranks.
    """
    alpha = fpar[c, 0]
    n = ipar[c, 2]
    n_picked = ipar[c, 3]
    base = ipar[c, 0]
    cut = min_logq - 1e-9 * (1.0 + abs(min_logq)) if min_logq > -np.inf else NEG_INF
    row = head[d]
    k = 0
    sb = n                              # stack base
    row[sb] = 0.0                       # the root group: all n tokens, mass 1
    row[sb + 1] = n
    row[sb + 2] = 1.0
    row[sb + 3] = _group_unit(dk, 1.0)
    sp = 1
    while sp > 0:
        sp -= 1
        o = sb + DIR_ENTRY * sp
        lm = row[o]
        m = np.int64(row[o + 1])
        if m == 1:                      # a token above the cut-off
            row[k] = lm
            k += 1
            continue
        g = row[o + 2]
        if m <= n_picked:
            k = _dirichlet_picks(row, k, alpha, lm, m, _group_key(dk, g), cut)
            continue
        u = row[o + 3]
        m1 = m // 2
        pair = int(data[base + m])
        tabulated = pair >= 0 and data[base + pair + 1] >= 0.0
        heavy = tabulated and lm + _LOG_HALF + _HALF_MARGIN < cut
        if heavy:
            e_off = int(data[base + n + 1 + m])
            if e_off >= 0 and _split_empty(data, base + e_off, cut - lm, u):
                continue
        # the halves' uniforms now, independent of this split's outcome: their hashes then
        # overlap this split's draw instead of following it
        u1 = _group_unit(dk, 2.0 * g) if m1 > max(n_picked, 1) else 0.0
        u2 = _group_unit(dk, 2.0 * g + 1.0) if m - m1 > max(n_picked, 1) else 0.0
        if heavy:
            # the lighter part (at most half the mass) is below the cut: the heavier only
            first, lb = beta_log_heavy(data, base, pair, u)
            if lm + lb >= cut:
                sp = _push_group(row, sb, sp, lm + lb, m, g, first, u1 if first else u2)
            continue
        if tabulated:
            lb1, lb2 = beta_log_pair(data, base, pair, u)
        else:
            lb1, lb2 = _log_beta_split(m1 * alpha, (m - m1) * alpha, _group_key(dk, g))
        l1 = lm + lb1
        l2 = lm + lb2
        # push the lighter half first, so that the heavier one is walked first
        for h in range(2):
            first = (l1 < l2) == (h == 0)
            lh = l1 if first else l2
            if lh >= cut:
                sp = _push_group(row, sb, sp, lh, m, g, first, u1 if first else u2)
    if k > 1:
        _sort_descending(row, k)
    li[d, 3] = k


@kernel
def _peaked_params(data, base, n_data, a, b, s_beta, beta, log_h1, log_hb, dk):
    """(log q of the top-1 token, log coefficient of the Zipf part) of a Peaked node.

    Weights m**beta and ((1 - m) i**-s / H(n-1, s))**beta for i = 1..n-1, m ~ Beta(a, b).
    With a table of (a, b) in ``data[base:base + n_data]`` (the pair at offset 0), m is
    the inverse CDF at the uniform ``unit(dk, 1)``, log m and log(1 - m) both accurate
    (:func:`brwsim.kernels.betaquantile.beta_log_pair`); without one (``n_data == 0`` or
    an untabulated pair), two gammas G1 / (G1 + G2) from the streams ``mix(dk ^ 1)`` and
    ``mix(dk ^ 2)``.
    """
    if n_data > 0 and data[base + 1] >= 0.0:
        log_m, log_rest = beta_log_pair(data, base, 0, unit(dk, 1))
    else:
        g1 = gamma(a, mix(dk ^ np.uint64(1)))
        g2 = gamma(b, mix(dk ^ np.uint64(2)))
        log_tot = math.log(g1 + g2)
        log_m = math.log(g1) - log_tot if g1 > 0.0 else NEG_INF
        log_rest = math.log(g2) - log_tot if g2 > 0.0 else NEG_INF
    log_coef = beta * (log_rest - log_h1)
    top = beta * log_m
    hi = max(top, log_coef + log_hb)
    if hi == NEG_INF:
        return NEG_INF, NEG_INF
    log_z = hi + math.log(math.exp(top - hi) + math.exp(log_coef + log_hb - hi))
    return top - log_z, log_coef - log_z


@kernel
def _geometric_entropy(r):
    if r <= 0.0:
        return 0.0, np.inf
    h = (-(1.0 - r) * math.log1p(-r) - r * math.log(r)) / (1.0 - r)
    return h, -math.log(r) / (1.0 - r) ** 2


@kernel
def _zipf_entropy(s, vocab):
    s0 = zipf_sum(vocab, s, 0)
    s1 = zipf_sum(vocab, s, 1) / s0
    s2 = zipf_sum(vocab, s, 2) / s0
    return s * s1 + math.log(s0), -s * (s2 - s1 * s1)


@kernel
def entropy_shape_param(shape, h, vocab, lo, hi):
    """Parameter of a geometric (shape 0: r) or Zipf (shape 1: s) law with entropy ``h``.

    Safeguarded Newton on the bracket [lo, hi] (from the family's inversion table),
    to a relative tolerance of 1e-12.
    """
    x = 0.5 * (lo + hi)
    for _ in range(100):
        if shape == 0:
            f, df = _geometric_entropy(x)
            f -= h
            if f > 0.0:
                hi = x
            else:
                lo = x
        else:
            f, df = _zipf_entropy(x, vocab)
            f -= h
            if f > 0.0:
                lo = x
            else:
                hi = x
        step = f / df if df != 0.0 else 0.0
        nx = x - step
        if not (lo < nx < hi):
            nx = 0.5 * (lo + hi)
        if abs(nx - x) <= 1e-13 * max(1.0, abs(x)):
            return nx
        x = nx
    return x


@kernel
def _pick(cw, lo, hi, u):
    """Component in [lo, hi) with probability proportional to its weight (cw cumulative)."""
    base = cw[lo - 1] if lo > 0 else 0.0
    target = base + u * (cw[hi - 1] - base)
    c = lo
    while c < hi - 1 and target > cw[c]:
        c += 1
    return c


@kernel
def _context(cprog, key, d, lf, li, head, pd, rank):
    """Write the node's context into level ``d``; return its component range and quantile.

    Returns (lo, hi, u_ctx): the node picks its component in [lo, hi) (hi = -1: all) and an
    ENTROPY component uses quantile u_ctx (-1: its own uniform).
    """
    kind = int(cprog[0])
    if kind == CTX_NONE:
        li[d, CTX_I] = 0                # i.i.d.: no context, but never leave it undefined
        lf[d, CTX_F] = 0.0
        return 0, -1, -1.0
    rk = purpose_key(key, REGIME)
    if kind == CTX_NGRAM:
        v = int(cprog[1])
        if pd >= 0:
            vpow = np.int64(cprog[4])
            if vpow > 0:
                tok = np.int64(head[pd, v + min(rank, v - 1)])
                li[d, CTX_I] = tok * vpow + li[pd, CTX_I] // v
            else:
                li[d, CTX_I] = 0
        elif pd == ROOT_DRAW:
            n_pos = int(cprog[3])
            li[d, CTX_I] = np.int64(cprog[5 + min(int(unit(rk, 0) * n_pos), n_pos - 1)])
        lf[d, CTX_F] = 0.0              # no latent value (keeps generation records clean)
        return 0, -1, -1.0
    if kind == CTX_LSTM:
        v = int(cprog[1])
        if pd >= 0:
            li[d, CTX_I] = np.int64(head[pd, v + max(min(rank, li[pd, 3] - 1), 0)])
        elif pd == ROOT_DRAW:
            n_roots = int(cprog[3])
            li[d, CTX_I] = min(int(unit(rk, 0) * n_roots), n_roots - 1)
        lf[d, CTX_F] = 0.0
        return 0, -1, -1.0
    if kind == CTX_AR1:
        if pd >= 0:
            rho = cprog[1]
            z = rho * lf[pd, CTX_F] + math.sqrt(1.0 - rho * rho) * normal(rk, 0)
        elif pd == ROOT_DRAW:
            z = normal(rk, 0)
        else:
            z = lf[d, CTX_F]
        lf[d, CTX_F] = z
        li[d, CTX_I] = 0
        return 0, -1, 0.5 * math.erfc(-z / math.sqrt(2.0))
    n = int(cprog[1])
    lf[d, CTX_F] = 0.0
    if kind == CTX_DEPTH:
        if pd >= 0:
            li[d, CTX_I] = li[pd, CTX_I] + 1
        elif pd == ROOT_DRAW:
            li[d, CTX_I] = 0
        k = min(li[d, CTX_I], n - 1)
        return int(cprog[2 + 2 * k]), int(cprog[3 + 2 * k]), -1.0
    # CTX_REGIME: transition rows at 2.., stationary at 2 + n*n.., ranges after
    if pd >= 0 or pd == ROOT_DRAW:
        row = 2 + n * n if pd == ROOT_DRAW else 2 + n * li[pd, CTX_I]
        u = unit(rk, 0) * cprog[row + n - 1]
        k = 0
        while k < n - 1 and u > cprog[row + k]:
            k += 1
        li[d, CTX_I] = k
    k = li[d, CTX_I]
    base = 2 + n * n + n
    return int(cprog[base + 2 * k]), int(cprog[base + 2 * k + 1]), -1.0


CLOSED_KINDS = (UNIFORM, TABLE, GEOMETRIC, ZIPF, BANK, PEAKED)
# log(i) for i < _N_LOG, by the same libm log the kernels call (bit-identical to math.log in
# a kernel): Zipf and Peaked ranks read it instead of computing a logarithm per child.
_N_LOG = 2048
_LOG = np.array([math.log(float(i)) if i > 0 else NEG_INF for i in range(_N_LOG)])


@inline_kernel
def log_int(i):
    """log(i) for an integer i >= 1 (a table below _N_LOG)."""
    return _LOG[i] if i < _N_LOG else math.log(float(i))


@kernel
def closed_form(kinds, cprog):
    """True when nodes are i.i.d. (no context program) and every component is closed-form
    (one of CLOSED_KINDS): the tree pass then calls :func:`closed_init` and
    :func:`closed_next` inline instead of :func:`dist_init` and :func:`dist_next`."""
    if int(cprog[0]) != CTX_NONE:
        return False
    for c in range(kinds.shape[0]):
        k = kinds[c]
        if not (k <= PEAKED and k != ORDERSTAT):
            return False
    return True


@inline_kernel
def closed_init(kinds, cw, fpar, ipar, data, key, d, lf, li, sc, t):
    """:func:`dist_init` of an i.i.d. node of a :func:`closed_form` family (the same state),
    at position ``sc`` in a pass at cut-off ``t``: see :func:`_closed_init` (returns a
    lower bound g of its rank 0's -log q; with sc + g > t the level is not set up)."""
    dk = purpose_key(key, DIST)
    c = 0
    if kinds.shape[0] > 1:
        c = _pick(cw, 0, kinds.shape[0], unit(dk, 0))
    kind = kinds[c]
    li[d, 0] = kind
    li[d, 1] = 0
    li[d, 2] = c
    return _closed_init(fpar, ipar, data, kind, c, dk, d, lf, li, sc, t)


@inline_kernel
def _closed_init(fpar, ipar, data, kind, c, dk, d, lf, li, sc, t):
    """Level ``d``'s state for a closed-form component ``c`` of kind ``kind``.

    Returns a lower bound g of -log q of the level's rank 0 (-inf: none known). A Zipf
    level reads its log-normaliser off the spline of ``data`` [coefficients | interval
    starts | floors] (:func:`brwsim.families.tables.spline_starts_floors`): the same bits
    as :func:`spline_eval`, without its division. When its node, at position ``sc``, has
    sc + g > ``t`` with g its interval's floor, it has no child at or below t, and the
    level is left half set up (the caller does not descend; t = +inf sets it up fully).
    """
    if kind == ZIPF:
        s_lo = fpar[c, 0]
        s = s_lo + unit(dk, 1) * (fpar[c, 1] - s_lo)
        off = ipar[c, 0]
        n_int = ipar[c, 3]
        i = spline_index(n_int, s_lo, fpar[c, 2], s)
        floor = data[off + 5 * n_int + i]
        if sc + floor > t:
            return floor
        lf[d, 0] = s
        # the log-normaliser: spline_eval's bits, the interval's start read, not divided
        lf[d, 1] = spline_poly(data, off + 4 * i, s - data[off + 4 * n_int + i])
        li[d, 3] = ipar[c, 2]
    elif kind == GEOMETRIC:
        lf[d, 0] = fpar[c, 1]
        lf[d, 1] = fpar[c, 2]
    elif kind == BANK:
        nrows = ipar[c, 2]
        li[d, 3] = min(int(unit(dk, 1) * nrows), nrows - 1)
    elif kind == PEAKED:
        top, coef = _peaked_params(data, ipar[c, 0], ipar[c, 1], fpar[c, 0], fpar[c, 1],
                                   fpar[c, 2], fpar[c, 3], fpar[c, 4], fpar[c, 5], dk)
        lf[d, 0] = top
        lf[d, 1] = coef
        lf[d, 2] = fpar[c, 2]
        li[d, 3] = 0                      # 1 once the top-1 token has been emitted
    return NEG_INF


@inline_kernel
def closed_next(fpar, ipar, data, d, lf, li):
    """:func:`dist_next` of a level set up by :func:`closed_init`."""
    kind = li[d, 0]
    c = li[d, 2]
    r = li[d, 1]
    li[d, 1] = r + 1
    return _closed_next(fpar, ipar, data, kind, c, r, d, lf, li)


@inline_kernel
def _closed_next(fpar, ipar, data, kind, c, r, d, lf, li):
    """Log-probability of rank ``r`` of a closed-form level (``-inf`` past the vocabulary)."""
    out = NEG_INF
    if kind == ZIPF:
        if r < li[d, 3]:
            out = -lf[d, 0] * log_int(r + 1) - lf[d, 1]
    elif kind == GEOMETRIC:
        out = lf[d, 1] if r == 0 else lf[d, 1] + r * lf[d, 0]
    elif kind == UNIFORM:
        if r < ipar[c, 2]:
            out = fpar[c, 0]
    elif kind == TABLE:
        if r < ipar[c, 1]:
            out = data[ipar[c, 0] + r]
    elif kind == BANK:
        k = ipar[c, 3]
        if r < k:
            out = data[ipar[c, 0] + li[d, 3] * k + r]
    elif kind == PEAKED:
        i = r + 1 - li[d, 3]              # next Zipf index, 1-based
        if i <= ipar[c, 2] - 1:
            out = lf[d, 1] - lf[d, 2] * log_int(i)
        if li[d, 3] == 0 and lf[d, 0] >= out:
            li[d, 3] = 1
            out = lf[d, 0]
    return out


@kernel
def dist_init(kinds, cw, fpar, ipar, data, cprog, key, d, lf, li, head, min_logq, pd, rank):
    """Set up level ``d`` with the distribution of the node whose key is ``key``.

    ``pd`` is the parent's level (its context is the input of this node's), or ROOT_DRAW /
    ROOT_PRESET for a root; ``rank`` is the node's rank among its parent's children.
    ``min_logq`` is the caller's cut-off: ranks with a smaller log-probability will not
    be used, so a family may mark the level EMPTY once it proves none reaches it.
    """
    dk = purpose_key(key, DIST)
    if cprog[0] == CTX_NONE:            # i.i.d. nodes: _context's first case, without a call
        li[d, CTX_I] = 0
        lf[d, CTX_F] = 0.0
        lo, hi, u_ctx = 0, -1, -1.0
    else:
        lo, hi, u_ctx = _context(cprog, key, d, lf, li, head, pd, rank)
    if hi < 0:
        hi = kinds.shape[0]
    c = lo
    if hi - lo > 1:
        c = _pick(cw, lo, hi, unit(dk, 0))
    kind = kinds[c]
    li[d, 0] = kind
    li[d, 1] = 0
    li[d, 2] = c
    if kind <= PEAKED and kind != ORDERSTAT:
        _closed_init(fpar, ipar, data, kind, c, dk, d, lf, li, 0.0, np.inf)
    elif kind == ORDERSTAT:
        if _orderstat_empty(data, fpar, ipar, c, dk, min_logq):
            li[d, 0] = EMPTY
        else:
            _orderstat_init(data, fpar, ipar, c, dk, d, lf, li, head, min_logq)
    elif kind == DIRICHLET:
        _dirichlet_init(data, fpar, ipar, c, dk, d, li, head, min_logq)
    elif kind == ENTROPY:
        # data holds (shape parameter, log normaliser) per entropy value, tempered
        off, n_vals = ipar[c, 0], ipar[c, 1] // 2
        u = u_ctx if u_ctx >= 0.0 else unit(dk, 1)
        i = off + 2 * min(int(u * n_vals), n_vals - 1)
        if ipar[c, 2] == 0:
            r = data[i]
            lf[d, 0] = math.log(r) if r > 0.0 else NEG_INF
            lf[d, 1] = math.log1p(-r)
            li[d, 0] = GEOMETRIC
        else:
            lf[d, 0] = data[i]
            lf[d, 1] = data[i + 1]
            li[d, 3] = ipar[c, 2]
            li[d, 0] = ZIPF
    elif kind == NGRAM or kind == LSTM or kind == TRANSFORMER:
        _contextual_init(kinds, kind, c, fpar, ipar, data, cprog, d, li, head, min_logq, pd, rank)


def kinds_dtype(kinds) -> type:
    """The dtype of a family's ``kinds`` array: :data:`CONTEXTUAL_KINDS` when a component is
    an NGRAM, LSTM or TRANSFORMER, else :data:`PLAIN_KINDS`.

    The dtype selects, at compile time, whether :func:`dist_init` contains the n-gram code
    and the call of the LSTM and transformer set-up (:func:`_contextual_init`,
    :mod:`brwsim.kernels.netinit`): a family without them never compiles them.
    """
    return CONTEXTUAL_KINDS if any(int(k) in (NGRAM, LSTM, TRANSFORMER) for k in kinds) else PLAIN_KINDS


def _contextual_init(kinds, kind, c, fpar, ipar, data, cprog, d, li, head, min_logq, pd, rank):
    """Set up an NGRAM, LSTM or TRANSFORMER level (a plain-kinds family has none: never called)."""
    raise NotImplementedError("only called from numba kernels")


@overload(_contextual_init, jit_options={"_nrt": False})
def _contextual_init_impl(kinds, kind, c, fpar, ipar, data, cprog, d, li, head, min_logq, pd, rank):
    if not (isinstance(kinds, types.Array) and kinds.dtype == types.int32):
        def plain(kinds, kind, c, fpar, ipar, data, cprog, d, li, head, min_logq, pd, rank):
            li[d, 3] = 0                  # unreachable: a plain family has no such component
        return plain

    def contextual(kinds, kind, c, fpar, ipar, data, cprog, d, li, head, min_logq, pd, rank):
        if kind == NGRAM:
            # ranks sorted into head[d, :V], their tokens into head[d, V:]; li[d, 3] listed ranks
            li[d, 3] = ngram_init(data, ipar[c, 0], fpar[c, 0], li[d, CTX_I], min_logq, head, d)
        else:
            # LSTM: ranks into head[d, :V], their classes into head[d, V:], the state after
            # them; TRANSFORMER: their tokens, the cache after them (netinit: out of line)
            n_list = li[pd, 3] if pd >= 0 else 0
            lstm = kind == LSTM
            li[d, 3] = net_init(lstm, data, ipar[c, 0], fpar[c, 0], fpar[c, 1],
                                0.0 if lstm else fpar[c, 2], 0 if lstm else ipar[c, 2], cprog,
                                d, pd, pd == ROOT_DRAW, rank, n_list, min_logq, head,
                                li[d, CTX_I])
    return contextual


@inline_kernel
def listed_next(fpar, ipar, data, key, d, lf, li, head):
    """:func:`dist_next`, with a DIRICHLET level's listed ranks read inline (the same
    number): a tree pass reads a rank per child and one more per node, and the call
    costs more than the read (3% of Dirichlet(0.05, 200)'s pass at P = 1024)."""
    if li[d, 0] == DIRICHLET:
        r = li[d, 1]
        li[d, 1] = r + 1
        return head[d, r] if r < li[d, 3] else NEG_INF
    return dist_next(fpar, ipar, data, key, d, lf, li, head)


@kernel
def dist_next(fpar, ipar, data, key, d, lf, li, head):
    """Log-probability of the next rank of level ``d`` (``-inf`` when exhausted).

    One exit point: numba's reference-count pruning then removes every incref/decref
    of the array arguments. It stays a call in the tree pass (a function of its own in
    ``perf`` profiles), which reads DIRICHLET levels through :func:`listed_next`.
    """
    kind = li[d, 0]
    c = li[d, 2]
    r = li[d, 1]
    li[d, 1] = r + 1
    out = NEG_INF
    if kind <= PEAKED and kind != ORDERSTAT:
        out = _closed_next(fpar, ipar, data, kind, c, r, d, lf, li)
    elif kind == ORDERSTAT:
        n = ipar[c, 2]
        if r < ipar[c, 4]:
            out = head[d, r]
        elif r < n:
            if not (li[d, 3] <= r < li[d, 5]):
                _orderstat_tail(data, fpar, ipar, c, key, d, r, lf, li, head)
            o = ipar[c, 4] + OS_SNAP * (r - li[d, 3])
            out = head[d, o]
            lf[d, 1] = head[d, o + 1]
            lf[d, 2] = head[d, o + 2]
            lf[d, 3] = head[d, o + 3]
            lf[d, 4] = head[d, o + 4]
    elif kind == DIRICHLET and r < li[d, 3]:
        out = head[d, r]
    elif (kind == NGRAM or kind == LSTM or kind == TRANSFORMER) and r < li[d, 3]:
        out = head[d, r]
    return out
