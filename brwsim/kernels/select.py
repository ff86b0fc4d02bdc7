"""Selection and scoring of a threshold pass's nodes: the nested optimal trees of every budget.

Positions are floating-point sums, so equal path probabilities can give positions a few
ulps apart; two positions within ``TIE_REL`` (relative) of each other are a tie, decided by
depth, then pre-order (:func:`before`). A pass collects every node up to :func:`tie_cut`
of its threshold t, past any node tied with one <= t; if at least P_max nodes fall below t
itself, the P_max first by (S with ties, depth, pre-order index) are exactly T_{P_max};
pre-order among tied (S, depth) is the lexicographic order of rank paths, so the
tie-break does not depend on t.

:func:`score_nested` scores every budget from buckets of position: a counting pass, sums
per budget, then a selection inside each budget's bucket only; :func:`select_nested`
(nested quickselects over all nodes, largest budget first, the full order only among the
few nodes within 8 TIE_REL of the cut, see :func:`select`) is its fallback. Both sum, per
budget, the path probabilities (in two-limb fixed point, so the sum is exact and
independent of the order of addition, hence of the budget list and of t), the path nodes
and the maximum depth. Large selections first split the nodes in one pass around two
values read off a sample (:func:`select`). None of this changes a tree.
"""

from __future__ import annotations

import math

import numpy as np

from brwsim.kernels import inline_kernel, kernel, njit_cached
from brwsim.kernels.special import exp_neg

_SCALE = 1099511627776.0          # 2**40: fixed-point limb
_INV_SCALE = 1.0 / _SCALE
# Two positions tie when they differ by at most TIE_REL of the larger: S is a sum of d
# non-negative terms -log q, each within 1 ulp, so rounding moves it by at most
# 2 d 2**-53 S; exact ties at depth <= 2048 are therefore always recognised, and distinct
# positions closer than 1e-12 (relative) are ordered as ties, by depth and rank path.
TIE_REL = 2.0 ** -40


@kernel
def tie_cut(t):
    """Cut-off of a threshold pass at t: every position tied with one <= t is below it."""
    return t + 4.0 * TIE_REL * abs(t)


@kernel
def within(pos, n, t):
    """Number of the n collected nodes with position <= t (the pass's core, see grow_tree)."""
    k = 0
    for i in range(n):
        if pos[i] <= t:
            k += 1
    return k


@kernel
def before(pos, dep, i, j):
    """Strict tree order: smaller S (beyond a tie, TIE_REL), then smaller depth, then
    earlier pre-order index (the lexicographically smaller rank path)."""
    a = pos[i]
    b = pos[j]
    if a != b:
        if math.isinf(a) or math.isinf(b) or abs(a - b) > TIE_REL * max(abs(a), abs(b)):
            return a < b
    if dep[i] != dep[j]:
        return dep[i] < dep[j]
    return i < j


@kernel
def _less(pos, dep, i, j, plain):
    """i before j: by plain float position (``plain``), else by :func:`before`."""
    if plain:
        return pos[i] < pos[j]
    return before(pos, dep, i, j)


@kernel
def _select_range(order, lo, hi, k, pos, dep, plain):
    """Rearrange order[lo:hi] so that order[lo:k] holds its k - lo first nodes by
    :func:`_less` (quickselect, median-of-three pivot)."""
    hi -= 1
    while hi > lo:
        mid = (lo + hi) >> 1
        a, b, c = order[lo], order[mid], order[hi]
        if _less(pos, dep, a, b, plain):
            if _less(pos, dep, b, c, plain):
                piv = b
            elif _less(pos, dep, a, c, plain):
                piv = c
            else:
                piv = a
        elif _less(pos, dep, a, c, plain):
            piv = a
        elif _less(pos, dep, b, c, plain):
            piv = c
        else:
            piv = b
        i, j = lo, hi
        while i <= j:
            while _less(pos, dep, order[i], piv, plain):
                i += 1
            while _less(pos, dep, piv, order[j], plain):
                j -= 1
            if i <= j:
                order[i], order[j] = order[j], order[i]
                i += 1
                j -= 1
        if k - 1 <= j:
            hi = j
        elif k - 1 >= i:
            lo = i
        else:
            return


_SAMPLE = 1024          # sample of select's split (from 4 samples' worth of nodes on)
_SAMPLE_SLACK = 48      # sample ranks either side of the k-th's expected rank


@kernel
def select(order, lo, hi, k, pos, dep):
    """Rearrange order[lo:hi] so that order[lo:k] holds its k - lo first nodes by :func:`before`.

    A quickselect on plain float positions finds the k-th smallest value v first; the nodes
    below v - 8 TIE_REL |v| are then certainly among the k first (every node tied with v's
    lies within 2 TIE_REL |v| of it), the nodes above v + 8 TIE_REL |v| certainly not, and
    only the few in between are ordered by :func:`before` (a strict weak order wherever
    ties do not chain: the same k first nodes as a quickselect by :func:`before` alone).
    Returns the number of nodes in that zone (1 when no node is near the cut; 0 when
    there was nothing to select).
    """
    if k >= hi or k <= lo:
        return 0
    # the k smallest plain positions first. A large range is split in one pass around two
    # values bracketing the k-th smallest, read off an evenly spread sample (Floyd and
    # Rivest), so that the quickselect runs on the few nodes in between only (any sample
    # gives the same k values; a poor one only leaves more to the quickselect)
    size = hi - lo
    if size < 4 * _SAMPLE:
        _select_range(order, lo, hi, k, pos, dep, True)
    else:
        step = size // _SAMPLE
        for j in range(1, _SAMPLE):
            order[lo + j], order[lo + j * step] = order[lo + j * step], order[lo + j]
        ks = ((k - lo) * _SAMPLE) // size
        lo_p = -np.inf
        hi_p = np.inf
        r_hi = ks + _SAMPLE_SLACK
        if r_hi < _SAMPLE:
            _select_range(order, lo, lo + _SAMPLE, lo + r_hi + 1, pos, dep, True)
            hi_p = pos[order[lo]]
            for j in range(lo + 1, lo + r_hi + 1):
                if pos[order[j]] > hi_p:
                    hi_p = pos[order[j]]
        else:
            r_hi = _SAMPLE - 1
        r_lo = ks - _SAMPLE_SLACK
        if r_lo >= 0:
            _select_range(order, lo, lo + r_hi + 1, lo + r_lo + 1, pos, dep, True)
            lo_p = pos[order[lo]]
            for j in range(lo + 1, lo + r_lo + 1):
                if pos[order[j]] > lo_p:
                    lo_p = pos[order[j]]
        # one pass: order[lo:a] < lo_p <= order[a:b] <= hi_p < order[b:hi]
        a = lo
        i = lo
        b = hi
        while i < b:
            x = pos[order[i]]
            if x < lo_p:
                order[a], order[i] = order[i], order[a]
                a += 1
                i += 1
            elif x > hi_p:
                b -= 1
                order[b], order[i] = order[i], order[b]
            else:
                i += 1
        if k < a:
            _select_range(order, lo, a, k, pos, dep, True)
        elif k > b:
            _select_range(order, b, hi, k, pos, dep, True)
        elif a < k < b:
            _select_range(order, a, b, k, pos, dep, True)
    v = pos[order[lo]]                  # the k-th smallest value
    for i in range(lo + 1, k):
        if pos[order[i]] > v:
            v = pos[order[i]]
    m = 8.0 * TIE_REL * abs(v)
    lo_v = v - m
    hi_v = v + m
    # order[lo:k]: move the certain ones (pos < lo_v) to the front, zone nodes after them
    c = lo
    for i in range(lo, k):
        if pos[order[i]] < lo_v:
            order[c], order[i] = order[i], order[c]
            c += 1
    z = k
    for i in range(k, hi):
        if pos[order[i]] <= hi_v:
            order[z], order[i] = order[i], order[z]
            z += 1
    if z > k:
        _select_range(order, c, z, k, pos, dep, False)
    return z - c


@kernel
def select_by(n, key, dep, order, budgets):
    """order[:budgets[b]] = the budgets[b] first nodes by (key, depth, index), nested.

    Repeated budgets (a policy that stops growing) are skipped. Returns the largest tie
    zone of the selections (:func:`select`).
    """
    for i in range(n):
        order[i] = i
    hi = n
    zone = 0
    for b in range(budgets.shape[0] - 1, -1, -1):
        if budgets[b] < hi:
            zone = max(zone, select(order, 0, hi, budgets[b], key, dep))
            hi = budgets[b]
    return zone


@inline_kernel
def _split_limbs(w):
    """A probability w as two int64 limbs of 2**-40 and 2**-80 (sums of limbs are exact)."""
    y = w * _SCALE
    h = math.floor(y)
    return np.int64(h), np.int64(round((y - h) * _SCALE))


@inline_kernel
def _limbs(x):
    """exp(-x) as two int64 limbs of 2**-40 and 2**-80 (:func:`_split_limbs`).

    exp is :func:`brwsim.kernels.special.exp_neg` (within 4.4e-16 of libm's), not libm's:
    inline, so :func:`score_nested`'s loop of them vectorises, and the sums do not depend
    on the platform's libm.
    """
    return _split_limbs(exp_neg(-x))


@inline_kernel
def add_nodes(order, a, b, pos, dep, onpath, p_hi, p_lo, n_path, max_dep):
    """Add the nodes order[a:b] to the sums (limbs of exp(-S), path nodes, deepest node);
    returns them and the largest position among those nodes (-inf if none)."""
    top = -np.inf
    for j in range(a, b):
        v = order[j]
        x = pos[v]
        if x > top:
            top = x
        h, low = _limbs(x)
        p_hi += h
        p_lo += low
        n_path += onpath[v]
        if dep[v] > max_dep:
            max_dep = dep[v]
    return p_hi, p_lo, n_path, max_dep, top


@kernel
def accumulate(order, pos, dep, onpath, budgets, acc_out, exp_out, dep_out, col):
    """Score the nested trees ``order[:budgets[b]]`` into column ``col`` of the outputs.

    ``budgets`` is non-decreasing. E[X | T] sums exp(-pos) in two 2**-40 limbs of int64
    fixed point: exact, so independent of the order of addition.
    """
    p_hi = 0
    p_lo = 0
    n_path = 0
    max_dep = 0
    start = 0
    for b in range(budgets.shape[0]):
        p_hi, p_lo, n_path, max_dep, _ = add_nodes(order, start, budgets[b], pos, dep, onpath,
                                                    p_hi, p_lo, n_path, max_dep)
        if budgets[b] > start:
            start = budgets[b]
        acc_out[b, col] = n_path
        exp_out[b, col] = p_hi * _INV_SCALE + p_lo * (_INV_SCALE * _INV_SCALE)
        dep_out[b, col] = max_dep


@kernel
def select_nested(n, pos, dep, onpath, order, budgets, acc_out, exp_out, dep_out, col):
    """Per-budget accepted count, E[X | T] and depth of one iteration into column ``col``.

    ``budgets`` is sorted ascending and its last entry is at most ``n``. Returns the
    largest tie zone of the selections (:func:`select`).
    """
    zone = select_by(n, pos, dep, order, budgets)
    accumulate(order, pos, dep, onpath, budgets, acc_out, exp_out, dep_out, col)
    return zone


@kernel
def lower_cut(pos, dep, order, n, k):
    """The k-th smallest of the positions pos[:n] (``order[:n]`` is overwritten)."""
    for i in range(n):
        order[i] = i
    select(order, 0, n, k, pos, dep)
    v = pos[order[0]]
    for i in range(1, k):
        if pos[order[i]] > v:
            v = pos[order[i]]
    return v


# Bucket scoring (:func:`score_nested`): rows of ``sel[0]``, one per quantity, a column
# per bucket or per accumulator (dense rows: each loop over the nodes reads one or two)
_B_CUM = 0      # count, then the number of nodes in the buckets before this one
_B_SEG = 1      # below the largest budget's bucket: the first budget whose bucket is above
_B_HI = 2       # accumulators: fixed-point limbs of path probabilities, _B_LANES per budget
_B_LO = 3
_B_ON = 4       # path nodes, per budget
_B_FILL = 5     # a budget's bucket: next free slot of its members in ``order``; else -1
SEL_COLS = 6
SEL_ROWS = 1 << 16  # at most this many buckets
_B_PER = 8      # nodes per bucket aimed at
_B_ZONE = 20.0  # tie-zone half-width checked around a budget's cut, in TIE_REL |v|
_B_LANES = 8    # accumulators per budget (a power of 2), consecutive nodes into different ones


@njit_cached
def score_buffers(cap):
    """Scratch of :func:`score_nested` for passes of up to ``cap`` nodes: SEL_COLS rows of
    per-bucket (or per-accumulator) integers, each node's bucket, each node's path
    probability, and each depth's lowest bucket."""
    return (np.empty((SEL_COLS, min(SEL_ROWS, cap // _B_PER) + 2), np.int64),
            np.empty(cap, np.int32), np.empty(cap), np.empty(cap + 1, np.int64))


@kernel
def _bucket(x, x0, inv, nb):
    """Bucket of position ``x``: non-decreasing in x (every step rounds monotonically)."""
    f = (x - x0) * inv
    if not f < nb - 1:
        return nb - 1
    if not f > 0.0:
        return 0
    return int(f)


@kernel
def score_nested(n, pos, dep, onpath, order, sel, budgets, acc_out, exp_out, dep_out, col, ties):
    """:func:`select_nested`'s outputs, by buckets of position instead of nested selections.

    The positions' range is cut into about n / 8 equal buckets (a monotone map, so every
    node of a lower bucket has a smaller or equal position). One pass counts the buckets
    (and keeps each node's); the cumulative counts give the bucket B_j holding each
    budget's k-th node. A node of bucket b belongs to the trees of the budgets j with
    B_j > b, so it is added, in two-limb fixed point, to the accumulators of the first of
    them (``_B_LANES`` per budget, taken in turn, so that consecutive additions do not wait
    on each other; a single budget's are one reduction, which vectorises); each depth
    records its lowest bucket, each path node its budget; the members of the budgets'
    buckets are listed at their counting-sort places in ``order``. Each loop does one
    thing (the path probabilities exp(-S) have a loop of their own, which vectorises).
    A budget's tree is then its
    accumulators and those of the budgets before it, the depths whose lowest bucket is
    below B_j, and the first members of B_j by :func:`select`.

    That is T_k exactly when no node of another bucket can tie with the k-th node: the
    zone of +-``_B_ZONE`` TIE_REL |v| around it must lie inside its bucket (a node tied
    with it lies within 2 TIE_REL of it). Otherwise, or when the positions are all equal,
    or a quarter of them share the largest budget's bucket (a huge tie), or the caller
    knows the family's positions tie (``ties``), or there are too few buckets for the
    accumulators, :func:`select_nested` scores the iteration instead. ``sel``:
    :func:`score_buffers`. Sums of integer limbs do not depend on the order of
    addition: the outputs are the same bits as :func:`select_nested`'s. Returns (True
    when the buckets scored it, the largest tie zone of the selections, :func:`select`).
    """
    m = budgets.shape[0]
    if ties:
        return False, select_nested(n, pos, dep, onpath, order, budgets, acc_out, exp_out, dep_out,
                                     col)
    rows, bid, wgt, dlow = sel
    nb = min(rows.shape[1] - 1, max(1, n // _B_PER))
    x0 = np.inf
    x1 = -np.inf
    d_max = 0
    for i in range(n):
        x = pos[i]
        if x < x0:
            x0 = x
        if x > x1:
            x1 = x
        if dep[i] > d_max:
            d_max = dep[i]
    lanes = _B_LANES                     # fewer when the rows are short (few nodes, many budgets)
    while lanes > 1 and m * lanes > rows.shape[1]:
        lanes >>= 1
    if (nb < 2 or not (x1 > x0) or math.isinf(x1 - x0) or m * lanes > rows.shape[1]
            or d_max >= dlow.shape[0]):
        return False, select_nested(n, pos, dep, onpath, order, budgets, acc_out, exp_out, dep_out,
                                     col)
    # half a bucket of margin at either end: positions on a lattice (exact ties) whose
    # extremes are x0 and x1 then fall on bucket edges only by accident
    inv = (nb - 1) / (x1 - x0)
    x0 -= 0.5 / inv
    cnt = rows[_B_CUM]
    fill = rows[_B_FILL]
    for b in range(nb + 1):
        cnt[b] = 0
        fill[b] = -1
    for d in range(d_max + 1):
        dlow[d] = nb
    for i in range(n):
        b = _bucket(pos[i], x0, inv, nb)
        bid[i] = b
        cnt[b] += 1
        if b < dlow[dep[i]]:
            dlow[dep[i]] = b
    c = 0
    for b in range(nb):
        k = cnt[b]
        cnt[b] = c
        c += k
    cnt[nb] = c
    # each budget's bucket (budgets ascending, so are their buckets), and each bucket
    # below the largest's, the first budget whose bucket is above it
    seg = rows[_B_SEG]                   # 2 j + 1 where a budget's members are listed
    b = 0
    top = 0
    for j in range(m):
        while cnt[b + 1] < budgets[j]:
            seg[b] = 2 * j + (1 if fill[b] >= 0 else 0)
            b += 1
        fill[b] = cnt[b]
        seg[b] = 2 * j + 1
        top = b
    if 4 * (cnt[top + 1] - cnt[top]) > n:
        # a quarter of the nodes in one bucket (a huge tie): the buckets would not help
        return False, select_nested(n, pos, dep, onpath, order, budgets, acc_out, exp_out, dep_out,
                                     col)
    for i in range(n):
        wgt[i] = exp_neg(-pos[i])          # as _limbs (the same bits), vectorised
    a_hi = rows[_B_HI]
    a_lo = rows[_B_LO]
    a_on = rows[_B_ON]
    for a in range(m * lanes):
        a_hi[a] = 0
        a_lo[a] = 0
        a_on[a] = 0
    if m == 1:
        # one budget: every node below its bucket adds to the same sums, a reduction that
        # vectorises; its bucket's members are listed apart
        p_hi = 0
        p_lo = 0
        for i in range(n):
            h, low = _split_limbs(wgt[i])
            below = bid[i] < top
            p_hi += h if below else 0
            p_lo += low if below else 0
        a_hi[0] = p_hi
        a_lo[0] = p_lo
        f = fill[top]
        for i in range(n):
            if bid[i] == top:
                order[f] = i
                f += 1
    else:
        for i in range(n):
            b = bid[i]
            if b <= top:
                v = seg[b]
                if b < top:
                    h, low = _split_limbs(wgt[i])
                    a = (v >> 1) * lanes + (i & (lanes - 1))
                    a_hi[a] += h
                    a_lo[a] += low
                if v & 1:
                    order[fill[b]] = i
                    fill[b] += 1
    for i in range(n):
        if onpath[i] != 0 and bid[i] < top:
            a_on[(seg[bid[i]] >> 1) * lanes] += onpath[i]
    # per budget: the accumulators of the budgets up to it, then the first members of its bucket
    p_hi = 0
    p_lo = 0
    n_path = 0
    zone = 0
    b = 0
    for j in range(m):
        k = budgets[j]
        for a in range(j * lanes, (j + 1) * lanes):
            p_hi += a_hi[a]
            p_lo += a_lo[a]
            n_path += a_on[a]
        while cnt[b + 1] < k:
            b += 1
        max_dep = 0
        for d in range(d_max, 0, -1):
            if dlow[d] < b:
                max_dep = d
                break
        lo = cnt[b]
        hi = cnt[b + 1]
        zone = max(zone, select(order, lo, hi, k, pos, dep))
        q_hi, q_lo, q_path, q_dep, v = add_nodes(order, lo, k, pos, dep, onpath, p_hi, p_lo,
                                                  n_path, max_dep)
        z = _B_ZONE * TIE_REL * abs(v)
        if _bucket(v - z, x0, inv, nb) != b or _bucket(v + z, x0, inv, nb) != b:
            return False, select_nested(n, pos, dep, onpath, order, budgets, acc_out, exp_out,
                                         dep_out, col)
        acc_out[j, col] = q_path
        exp_out[j, col] = q_hi * _INV_SCALE + q_lo * (_INV_SCALE * _INV_SCALE)
        dep_out[j, col] = q_dep
    return True, zone

