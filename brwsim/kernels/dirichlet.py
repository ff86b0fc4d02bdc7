"""Symmetric Dirichlet(alpha) node distributions (DIRICHLET), lazily, by binary aggregation.

A node lists its ranks above the caller's cut-off, sorted, in its head row at set-up
(:func:`dirichlet_init`), by splits of token groups through tabulated Beta quantiles
(:mod:`brwsim.kernels.betaquantile`) and, for small groups, size-biased picks. The family
(:func:`brwsim.families.dirichlet.aggregation_component`) writes the slots named below.
"""

from __future__ import annotations

import math

import numpy as np

from brwsim.kernels import inline_kernel, kernel
from brwsim.kernels.betaquantile import beta_log_heavy, beta_log_pair
from brwsim.kernels.kinds import DATA_OFF, DIRICHLET, LISTED, lowered_cut
from brwsim.kernels.rng import gamma_parts, mix, unit
from brwsim.kernels.special import exp_neg, neg_log, spline_index, spline_poly

# Parameter slots (the family writes them by these names)
DIR_ALPHA = 0           # fpar: alpha
DIR_VOCAB = 2           # ipar: vocabulary
DIR_PICKED = 3          # ipar: the largest group drawn by size-biased picks
#: the slots the kind owns (tests/unit/test_kind_table.py checks the family writes these)
LAYOUT = {DIRICHLET: ((DIR_ALPHA,), (DIR_VOCAB, DIR_PICKED))}

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
#: size-biased picks instead of splits (the family's ``picked_size``): the fastest set-up
#: of the values timed (``benchmarks/README.md``).
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
    time (``benchmarks/README.md``).
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
def dirichlet_init(data, fpar, ipar, c, dk, d, li, head, min_logq):
    """A DIRICHLET level: the node's ranks above ``min_logq``, sorted, in its head row.

    A symmetric Dirichlet(alpha) over n tokens is a binary aggregation tree (exact): a
    group of m tokens with mass M splits into its first m1 = m // 2 tokens and the other
    m2 with masses M B and M (1 - B), B ~ Beta(m1 alpha, m2 alpha) independent of M and
    of every other split, and, given its mass, a group is again a symmetric
    Dirichlet(alpha) over its m tokens. Group g (the root is 1, the halves of g are 2g and
    2g + 1) draws from its own stream, a hash of (node key, g).

    * A group of more than ``ipar[c, DIR_PICKED]`` tokens (``picked_size`` of the family: m alpha
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
      many picks as a split walk needs splits per listed rank, without its chain
      (timings in ``benchmarks/README.md``).

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
    there); otherwise it reads
    the heavier part's log mass (:func:`brwsim.kernels.betaquantile.beta_log_heavy`, the
    same number as the pair's). A group's halves' uniforms are hashed before its split's
    outcome is known (the stack holds them): the walk down the heavier halves is a chain
    of dependent draws, and the hashes then overlap it.

    Inline in ``dist_init`` (a call per node costs more than the walk of most nodes).
    ``li[d, LISTED]`` is the number of listed ranks.
    """
    alpha = fpar[c, DIR_ALPHA]
    n = ipar[c, DIR_VOCAB]
    n_picked = ipar[c, DIR_PICKED]
    base = ipar[c, DATA_OFF]
    cut = lowered_cut(min_logq)
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
    li[d, LISTED] = k
