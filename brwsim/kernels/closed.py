"""Closed-form node distributions: a few parameters per node, read rank by rank.

UNIFORM, TABLE, GEOMETRIC, ZIPF, BANK and PEAKED are closed forms (``closed`` in
:data:`brwsim.kernels.kinds.KIND_TABLE`): a level holds a few numbers and no head row, and
rank r's log-probability is a formula of r. ENTROPY (a geometric or Zipf law whose
parameter each node draws from a table of entropy values, possibly at its context's
quantile) sets a level of the geometric or Zipf kind up, which is then read as theirs.

Each kind owns its ``fpar``/``ipar`` slots, named below; its family writes them by these
names (``Component(fpar={...}, ipar={...})``, :mod:`brwsim.kernels.spec`).
"""

from __future__ import annotations

import math

import numpy as np

from brwsim.kernels import inline_kernel, kernel
from brwsim.kernels.betaquantile import beta_log_pair
from brwsim.kernels.context import pick_component
from brwsim.kernels.kinds import (BANK, COMP, DATA_LEN, DATA_OFF, ENTROPY, GEOMETRIC, KIND_SLOT, LISTED,
                                  NEG_INF, PEAKED, RANK, TABLE, UNIFORM, ZIPF)
from brwsim.kernels.rng import DIST, gamma, mix, purpose_key, unit
from brwsim.kernels.special import spline_index, spline_poly, zipf_sum

# UNIFORM: k tokens of equal probability
UNIFORM_LOGQ = 0        # fpar: -log k
UNIFORM_K = 2           # ipar: k
# TABLE: one listed distribution, its log-probabilities in data (DATA_LEN of them)
# GEOMETRIC: q_i = (1 - r) r**i
GEOM_R = 0              # fpar: r
GEOM_LOG_R = 1          # fpar: log r
GEOM_LOG_1MR = 2        # fpar: log(1 - r)
# ZIPF: q_i proportional to i**-s, s uniform on [s_lo, s_hi] per node; data: the
# log-normaliser's spline [coefficients | interval starts | floors] (closed_level_init)
ZIPF_S_LO = 0           # fpar: lowest exponent
ZIPF_S_HI = 1           # fpar: highest exponent
ZIPF_INV_H = 2          # fpar: intervals per unit of s
ZIPF_FLOOR = 3          # fpar: lowest floor of the log-normaliser over the intervals
ZIPF_VOCAB = 2          # ipar: vocabulary
ZIPF_N_INT = 3          # ipar: spline intervals
# BANK: rows of log-probabilities in data, a node draws one
BANK_ROWS = 2           # ipar: rows
BANK_WIDTH = 3          # ipar: entries per row
# PEAKED: top-1 mass m ~ Beta(a, b), the rest Zipf(s) over vocab - 1 tokens, tempered by
# beta; data: the Beta quantile table of (a, b) (brwsim.kernels.betaquantile), or nothing
PEAKED_A = 0            # fpar: a
PEAKED_B = 1            # fpar: b
PEAKED_S_BETA = 2       # fpar: beta s
PEAKED_BETA = 3         # fpar: beta
PEAKED_LOG_H1 = 4       # fpar: log H(vocab - 1, s)
PEAKED_LOG_HB = 5       # fpar: log H(vocab - 1, beta s)
PEAKED_VOCAB = 2        # ipar: vocabulary
# ENTROPY: data holds (shape parameter, log normaliser) per entropy value, tempered
ENTROPY_VOCAB = 2       # ipar: Zipf's vocabulary, 0 for a geometric law

#: the slots each kind owns (tests/unit/test_kind_table.py checks the families write these)
LAYOUT = {
    UNIFORM: ((UNIFORM_LOGQ,), (UNIFORM_K,)),
    TABLE: ((), ()),
    GEOMETRIC: ((GEOM_R, GEOM_LOG_R, GEOM_LOG_1MR), ()),
    ZIPF: ((ZIPF_S_LO, ZIPF_S_HI, ZIPF_INV_H, ZIPF_FLOOR), (ZIPF_VOCAB, ZIPF_N_INT)),
    BANK: ((), (BANK_ROWS, BANK_WIDTH)),
    PEAKED: ((PEAKED_A, PEAKED_B, PEAKED_S_BETA, PEAKED_BETA, PEAKED_LOG_H1, PEAKED_LOG_HB),
             (PEAKED_VOCAB,)),
    ENTROPY: ((), (ENTROPY_VOCAB,)),
}


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


# log(i) for i < _N_LOG, by the same libm log the kernels call (bit-identical to math.log in
# a kernel): Zipf and Peaked ranks read it instead of computing a logarithm per child.
_N_LOG = 2048
_LOG = np.array([math.log(float(i)) if i > 0 else NEG_INF for i in range(_N_LOG)])


@inline_kernel
def log_int(i):
    """log(i) for an integer i >= 1 (a table below _N_LOG)."""
    return _LOG[i] if i < _N_LOG else math.log(float(i))


@inline_kernel
def closed_init(kinds, cw, fpar, ipar, data, key, d, lf, li, sc, t):
    """``dist_init`` of an i.i.d. node of a ``closed_form`` family (the same state), at
    position ``sc`` in a pass at cut-off ``t``: see :func:`closed_level_init` (returns a
    lower bound g of its rank 0's -log q; with sc + g > t the level is not set up)."""
    dk = purpose_key(key, DIST)
    c = 0
    if kinds.shape[0] > 1:
        c = pick_component(cw, 0, kinds.shape[0], unit(dk, 0))
    kind = kinds[c]
    li[d, KIND_SLOT] = kind
    li[d, RANK] = 0
    li[d, COMP] = c
    return closed_level_init(fpar, ipar, data, kind, c, dk, d, lf, li, sc, t)


@inline_kernel
def closed_level_init(fpar, ipar, data, kind, c, dk, d, lf, li, sc, t):
    """Level ``d``'s state for a closed-form component ``c`` of kind ``kind``.

    Returns a lower bound g of -log q of the level's rank 0 (-inf: none known). A Zipf
    level reads its log-normaliser off the spline of ``data`` [coefficients | interval
    starts | floors] (:func:`brwsim.families.tables.spline_starts_floors`): the same bits
    as :func:`~brwsim.kernels.special.spline_eval`, without its division. When its node,
    at position ``sc``, has sc + g > ``t`` with g its interval's floor, it has no child at
    or below t, and the level is left half set up (the caller does not descend; t = +inf
    sets it up fully).

    Level state: ZIPF ``lf[d, 0]`` s, ``lf[d, 1]`` log-normaliser, ``li[d, LISTED]`` the
    vocabulary; GEOMETRIC ``lf[d, 0..1]`` log r, log(1 - r); BANK ``li[d, LISTED]`` the
    drawn row; PEAKED ``lf[d, 0..2]`` log q of the top token, log coefficient and
    exponent of the Zipf part, ``li[d, LISTED]`` 1 once the top token is emitted.
    """
    if kind == ZIPF:
        s_lo = fpar[c, ZIPF_S_LO]
        s = s_lo + unit(dk, 1) * (fpar[c, ZIPF_S_HI] - s_lo)
        off = ipar[c, DATA_OFF]
        n_int = ipar[c, ZIPF_N_INT]
        i = spline_index(n_int, s_lo, fpar[c, ZIPF_INV_H], s)
        floor = data[off + 5 * n_int + i]
        if sc + floor > t:
            return floor
        lf[d, 0] = s
        # the log-normaliser: spline_eval's bits, the interval's start read, not divided
        lf[d, 1] = spline_poly(data, off + 4 * i, s - data[off + 4 * n_int + i])
        li[d, LISTED] = ipar[c, ZIPF_VOCAB]
    elif kind == GEOMETRIC:
        lf[d, 0] = fpar[c, GEOM_LOG_R]
        lf[d, 1] = fpar[c, GEOM_LOG_1MR]
    elif kind == BANK:
        nrows = ipar[c, BANK_ROWS]
        li[d, LISTED] = min(int(unit(dk, 1) * nrows), nrows - 1)
    elif kind == PEAKED:
        top, coef = _peaked_params(data, ipar[c, DATA_OFF], ipar[c, DATA_LEN], fpar[c, PEAKED_A],
                                   fpar[c, PEAKED_B], fpar[c, PEAKED_S_BETA], fpar[c, PEAKED_BETA],
                                   fpar[c, PEAKED_LOG_H1], fpar[c, PEAKED_LOG_HB], dk)
        lf[d, 0] = top
        lf[d, 1] = coef
        lf[d, 2] = fpar[c, PEAKED_S_BETA]
        li[d, LISTED] = 0                 # 1 once the top-1 token has been emitted
    return NEG_INF


@inline_kernel
def closed_next(fpar, ipar, data, d, lf, li):
    """``dist_next`` of a level set up by :func:`closed_init`."""
    kind = li[d, KIND_SLOT]
    c = li[d, COMP]
    r = li[d, RANK]
    li[d, RANK] = r + 1
    return closed_level_next(fpar, ipar, data, kind, c, r, d, lf, li)


@inline_kernel
def closed_level_next(fpar, ipar, data, kind, c, r, d, lf, li):
    """Log-probability of rank ``r`` of a closed-form level (``-inf`` past the vocabulary)."""
    out = NEG_INF
    if kind == ZIPF:
        if r < li[d, LISTED]:
            out = -lf[d, 0] * log_int(r + 1) - lf[d, 1]
    elif kind == GEOMETRIC:
        out = lf[d, 1] if r == 0 else lf[d, 1] + r * lf[d, 0]
    elif kind == UNIFORM:
        if r < ipar[c, UNIFORM_K]:
            out = fpar[c, UNIFORM_LOGQ]
    elif kind == TABLE:
        if r < ipar[c, DATA_LEN]:
            out = data[ipar[c, DATA_OFF] + r]
    elif kind == BANK:
        k = ipar[c, BANK_WIDTH]
        if r < k:
            out = data[ipar[c, DATA_OFF] + li[d, LISTED] * k + r]
    elif kind == PEAKED:
        i = r + 1 - li[d, LISTED]         # next Zipf index, 1-based
        if i <= ipar[c, PEAKED_VOCAB] - 1:
            out = lf[d, 1] - lf[d, 2] * log_int(i)
        if li[d, LISTED] == 0 and lf[d, 0] >= out:
            li[d, LISTED] = 1
            out = lf[d, 0]
    return out


@inline_kernel
def entropy_init(ipar, data, c, dk, d, lf, li, u_ctx):
    """An ENTROPY level: the node's parameter from the table in ``data`` at its context's
    quantile ``u_ctx`` (-1: its own uniform), set up as a GEOMETRIC or ZIPF level."""
    off, n_vals = ipar[c, DATA_OFF], ipar[c, DATA_LEN] // 2
    u = u_ctx if u_ctx >= 0.0 else unit(dk, 1)
    i = off + 2 * min(int(u * n_vals), n_vals - 1)
    if ipar[c, ENTROPY_VOCAB] == 0:
        r = data[i]
        lf[d, 0] = math.log(r) if r > 0.0 else NEG_INF
        lf[d, 1] = math.log1p(-r)
        li[d, KIND_SLOT] = GEOMETRIC
    else:
        lf[d, 0] = data[i]
        lf[d, 1] = data[i + 1]
        li[d, LISTED] = ipar[c, ENTROPY_VOCAB]
        li[d, KIND_SLOT] = ZIPF
