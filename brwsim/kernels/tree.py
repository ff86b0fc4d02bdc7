"""Optimal draft trees: a threshold pass plus nested selection (docs/design.md, ideas 2-4).

For one root, :func:`_collect` visits, in depth-first pre-order with children in rank
order, every node whose position S(v) = -log p(v) is at most a threshold t, stopping at a
node's first child above t (children come sorted, so the rest are above t too). It
samples the target's path on the way: at a path node with uniform U, the child of rank r
is on the path iff cum_{r-1} < U <= cum_r, which needs only the ranks the pass generates.

Positions are floating-point sums, so equal path probabilities can give positions a few
ulps apart; two positions within ``TIE_REL`` (relative) of each other are a tie, decided by
depth, then pre-order. The pass collects every node up to ``_tie_cut(t)``, past any node
tied with one <= t; if at least P_max nodes fall below t itself, the P_max first by
(S with ties, depth, pre-order index) are exactly T_{P_max}; pre-order among tied (S,
depth) is the lexicographic order of rank paths, so the tie-break does not depend on t.
:func:`_score_nested` scores every budget from buckets of position: a counting pass, sums
per budget, then a selection inside each budget's bucket only; :func:`_select_nested` (nested
quickselects over all nodes, largest budget first, the full order only among the few
nodes within 8 TIE_REL of the cut, see :func:`_select`) is its fallback. Both sum, per
budget, the path probabilities (in two-limb fixed point, so the sum is exact and
independent of the order of addition, hence of the budget list and of t), the path nodes
and the maximum depth. Large selections first split the nodes in one pass around two
values read off a sample (:func:`_select`), and a pass over a closed-form family does not
set up a node whose rank 0 is provably above t, nor one over i.i.d. order statistics a
node whose rank 0 is proven below its cut-off (:func:`_walk`); none of these changes a
tree.

Thresholds (:func:`grow_tree`): each root's first pass aims at a tuned multiple of P_max
nodes from the last root's count (:func:`_aim`, :func:`_tune`); a short pass of a
closed-form family is continued from per-node records (:func:`_resume`), others repeat it.
A pass that is not continued lowers its cut-off as it goes, to the P_max-th smallest
position collected so far (:func:`_walk`, :func:`_lower`): a star-shaped tree (the root's
own ranks, as Dirichlet(0.05, 32000) at P = 256) then stops near P_max nodes whatever the
aim. The trees never depend on the thresholds.

Runs of i.i.d. Zipf laws with a spread of exponents (one component, P_max at least
:data:`brwsim.kernels.levels.LEVEL_MIN_P`) collect the same nodes level by level
(:func:`brwsim.kernels.levels.level_pass`), out of pre-order: a short pass is repeated,
not continued, and ties at a cut send the root back to :func:`_collect`, as for a
continued pass.

Families of i.i.d. nodes whose components are all closed-form (Zipf, geometric, uniform,
table, bank, Peaked and their mixtures: :func:`brwsim.kernels.dist.closed_form`) are read
through small helpers inlined into the pass; every other family (order statistics, the
contextual families, n-grams, the LSTM) goes through the general ``dist_init`` /
``dist_next``, which are calls. Both give the same numbers.
"""

from __future__ import annotations

import math

import numpy as np

from brwsim.kernels import inline_kernel, kernel, njit_cached
from brwsim.kernels.dist import (
    CTX_F,
    CTX_I,
    CTX_NONE,
    GEOMETRIC,
    KIND_SLOT,
    LEVEL_F,
    LEVEL_I,
    ORDERSTAT,
    PEAKED,
    RANK,
    ROOT_DRAW,
    UNIFORM,
    ZIPF,
    closed_form,
    dist_init,
    dist_next,
    listed_next,
)
from brwsim.kernels.closed import (GEOM_LOG_1MR, UNIFORM_LOGQ, ZIPF_FLOOR, ZIPF_S_HI, ZIPF_S_LO,
                                   closed_init, closed_next)
from brwsim.kernels.orderstat import orderstat_child_empty
from brwsim.kernels.levels import level_buffers, level_family, level_pass
from brwsim.kernels.rng import PATH, child_key, mix, purpose_key, root_key, unit
from brwsim.kernels.special import exp_neg

_SCALE = 1099511627776.0          # 2**40: fixed-point limb
_INV_SCALE = 1.0 / _SCALE
_ABORT = -1
_TOO_DEEP = -2
MAX_NODES = 1 << 28               # hard limit on one pass (about 5 GB of buffers)
NO_DEPTH_CAP = 1 << 30            # max_depth of the unconstrained optimal tree
LEVEL_CELLS = 1 << 24             # head entries of a pass's first levels (128 MiB)
T_LIMIT = 800.0                   # -log p beyond this is 0 in float64: every node is found
HUGE_TIE = -1                     # grow_tree: more than MAX_NODES nodes tie at one position
TOO_FEW = -2                      # grow_tree: fewer than P nodes of positive probability
# Two positions tie when they differ by at most TIE_REL of the larger: S is a sum of d
# non-negative terms -log q, each within 1 ulp, so rounding moves it by at most
# 2 d 2**-53 S; exact ties at depth <= 2048 are therefore always recognised, and distinct
# positions closer than 1e-12 (relative) are ordered as ties, by depth and rank path.
TIE_REL = 2.0 ** -40


@kernel
def start_threshold(p_max):
    """The first pass's threshold -log p for a largest budget ``p_max`` (it only sets the
    speed: every pass retargets it until it holds enough nodes)."""
    return math.log(1.5 * max(p_max, 1.0)) + 1.0


@njit_cached
def _node_buffers(cap):
    """Node arrays of a pass holding ``cap`` nodes: positions, depths, on-path flags, order."""
    return np.empty(cap), np.empty(cap, np.int32), np.empty(cap, np.int8), np.empty(cap, np.int32)


@njit_cached
def _record_buffers(cap):
    """What :func:`_resume` needs of each of ``cap`` nodes, and of the root (last slot):
    key, position of its first child not taken, that child's rank."""
    return np.empty(cap + 1, np.uint64), np.empty(cap + 1), np.empty(cap + 1, np.int32)


@njit_cached
def _new_levels(n_levels, head_cap):
    """Per-level buffers of a pass: keys, positions, path state, family state, heads."""
    return (np.empty(n_levels, np.uint64), np.empty(n_levels), np.empty(n_levels, np.int8),
            np.empty(n_levels), np.empty(n_levels), np.empty((n_levels, LEVEL_F)),
            np.empty((n_levels, LEVEL_I), np.int64), np.empty((n_levels, max(head_cap, 1))))


@kernel
def _top_bound(kinds, fpar, closed):
    """An upper bound on every node's rank-0 log-probability (0.0: none known).

    A node whose position less this bound is above the threshold cannot have children, so
    a pass over a closed-form family never sets it up (rounding is monotonic). Zipf's
    rank 0 is minus its log-normaliser, a cubic spline in s: the bound is minus the
    lowest of its intervals' floors (``fpar[c, ZIPF_FLOOR]``, see
    :func:`brwsim.families.tables.spline_starts_floors`).
    """
    if not closed:
        return 0.0
    top = -np.inf
    for c in range(kinds.shape[0]):
        k = kinds[c]
        ub = 0.0
        if k == GEOMETRIC:
            ub = fpar[c, GEOM_LOG_1MR]
        elif k == UNIFORM:
            ub = fpar[c, UNIFORM_LOGQ]
        elif k == ZIPF:
            ub = -fpar[c, ZIPF_FLOOR]
        if not ub < 0.0:
            return 0.0
        if ub > top:
            top = ub
    return top


@kernel
def _restart(kinds, cw, fpar, ipar, data, cprog, closed, t, j, n_old, fr, fu, fc, pos, dep, nkey,
             nxt, nrk, own, keys, s_lev, on_lev, u_lev, c_lev, lf, li, head):
    """Set up the next start of a continued walk (:func:`_walk`): the first record from
    ``j`` on (-1: the root's) whose first child not taken lies at or below ``t``, its
    level made as it was left, its ranks before that child skipped (replayed where the
    order has state). Returns (the record after it, its level), or (n_old, -1) if none.
    """
    root = nkey.shape[0] - 1
    while j < n_old:
        if nxt[root if j < 0 else j] <= t:
            break
        j += 1
    if j >= n_old:
        return n_old, -1
    i = root if j < 0 else j
    d = 0 if j < 0 else dep[j]
    key = nkey[i]
    if nrk[i] < 0:                      # a leaf never set up: its key from its parent's
        key = child_key(key, -1 - nrk[i])
        nrk[i] = 0
        nkey[i] = key
    own[d] = i
    keys[d] = key
    s_lev[d] = 0.0 if i == root else pos[i]
    on_lev[d] = 0
    if i == fr:
        on_lev[d] = 1
        u_lev[d] = fu
        c_lev[d] = fc
    # (dist_init sets up a closed-form level exactly as closed_init: the inline helpers
    # stay in the hot loop only, each inlined copy costs compile time)
    dist_init(kinds, cw, fpar, ipar, data, cprog, key, d, lf, li, head, s_lev[d] - t,
              d - 1 if i != root else ROOT_DRAW, 0)
    if closed and li[d, KIND_SLOT] != PEAKED:   # rank-indexed: skip the ranks before
        li[d, RANK] = nrk[i]
    else:                               # an order with state: replay them
        for r in range(nrk[i]):
            dist_next(fpar, ipar, data, key, d, lf, li, head)
    return j + 1, d


@kernel
def _lattice(kinds, fpar):
    """True when a closed-form family's positions tie exactly between nodes: its laws are
    shared by every node (not Zipf with a spread of exponents, not Peaked, whose top mass
    is drawn per node), so equal multisets of ranks give equal positions."""
    for c in range(kinds.shape[0]):
        k = kinds[c]
        if not (k == PEAKED or (k == ZIPF and fpar[c, ZIPF_S_HI] > fpar[c, ZIPF_S_LO])):
            return True
    return False


@kernel
def _walk(kinds, cw, fpar, ipar, data, cprog, closed, top, t, cap, max_depth, n, d, n_old, fr,
          fu, fc, pos, dep, onpath, nkey, nxt, nrk, own, keys, s_lev, on_lev, u_lev, c_lev, lf, li,
          head, p_stop, order):
    """Depth-first pass at cut-off ``t`` (already a tie cut-off), appending nodes from index ``n``.

    Visits, children in rank order, every node with S <= t below the node whose
    distribution level ``d`` holds (d = -1: none), until that level is exhausted; then,
    with ``n_old`` > -1, it continues from the records of the root and nodes
    0 .. n_old - 1 of an earlier pass at a lower cut-off (see :func:`_resume`). Every
    collected node i records its key, and, once its children are done, the
    position ``nxt[i]`` of its first child not taken (+inf when it can have no more) and
    that child's rank ``nrk[i]``; a node never set up (its rank 0 is beyond ``top``)
    records instead the bound from ``top``, its parent's key and -1 - its own rank (its
    key is hashed only if a continuation needs it), and one whose level proves its rank
    0 above t before it is fully set up (:func:`closed_init`: a Zipf node's floor on its
    normaliser) records that bound, its key and rank 0. The records serve closed-form
    families only (a lazy level lists just the ranks above its cut-off; a level that
    proves itself empty is never set up). Recording costs about 1 ns a node, less than
    the compile time a switch would (LLVM would compile the loop once per setting).
    ``own[d]`` is the node whose distribution level d holds (the root's records go to the
    last slot). ``fr``, ``fu``, ``fc``: the path frontier, the node
    still searching the target's sampled child (-2: none yet), its path uniform and the
    probability of the children it took; it moves when that node's walk finds the child.

    With ``p_stop`` > 0 the pass lowers its cut-off as it goes (:func:`_lower`): once it
    holds ``p_stop`` nodes, and again after every further p_stop / 8, the cut-off becomes
    the tie cut-off of the p_stop-th smallest position v collected so far. Every node at
    or below v is still collected (the nodes not yet visited are walked at the new
    cut-off, which is above v), so the p_stop first nodes of the whole tree are among
    those collected, with every node tied with them: the same trees as a pass at the
    first cut-off, for less work where that cut-off was high. ``order`` is the scratch
    of the selection. Not with records for :func:`_resume` (their cut-offs would differ).

    Returns (n, fr, fu, fc, low): the new node count (``_ABORT`` beyond ``cap``,
    ``_TOO_DEEP`` beyond the level buffers), the frontier, and the last v (+inf if the
    cut-off was never lowered): at least p_stop of the nodes lie at or below it.
    """
    n_levels = keys.shape[0]
    low = np.inf
    n_check = p_stop if p_stop > 0 else MAX_NODES + 1
    # i.i.d. nodes of one ORDERSTAT component: a child whose rank 0 is provably below the
    # cut-off (dist.orderstat_child_empty, which dist_init would try first) is never set up
    os_iid = (not closed and kinds.shape[0] == 1 and kinds[0] == ORDERSTAT
              and int(cprog[0]) == CTX_NONE)
    base = max(d, 0)
    j = -1                              # next record to look at (-1: the root's)
    while True:
        while d >= base:
            if closed:
                lq = closed_next(fpar, ipar, data, d, lf, li)
            else:
                lq = listed_next(fpar, ipar, data, keys[d], d, lf, li, head)
            sc = s_lev[d] - lq
            # above the threshold, exhausted (-inf), NaN, or deeper than any top-P_max node
            if not sc <= t or d >= max_depth:
                o = own[d]
                nxt[o] = np.inf if d >= max_depth or not sc == sc else sc
                nrk[o] = li[d, 1] - 1
                if on_lev[d] == 1:
                    fr = o
                    fu = u_lev[d]
                    fc = c_lev[d]
                d -= 1
                continue
            if n >= cap:
                return _ABORT, fr, fu, fc, low
            if d + 1 >= n_levels:
                return _TOO_DEEP, fr, fu, fc, low
            child_on = 0
            if on_lev[d] == 1:
                c_lev[d] += math.exp(lq)
                if u_lev[d] <= c_lev[d]:
                    child_on = 1
                    on_lev[d] = 2       # this node's sampled child has been found
            rank = li[d, 1] - 1
            pos[n] = sc
            dep[n] = d + 1
            onpath[n] = child_on
            n += 1
            if n >= n_check:
                v = _lower(pos, dep, order, n, p_stop)
                if v < low:
                    low = v
                    t = min(t, _tie_cut(v))
                n_check = n + max(p_stop >> 3, 16)
            # (top <= 0: a node beyond a lowered cut-off is a leaf here)
            if sc - top > t:            # even its rank 0 is above t: no children
                nkey[n - 1] = keys[d]   # its parent's key and -1 - its rank: no hash
                nxt[n - 1] = sc - top
                nrk[n - 1] = -1 - rank
                if child_on == 1:
                    fr = n - 1
                    fu = unit(purpose_key(child_key(keys[d], rank), PATH), 0)
                    fc = 0.0
                continue
            ck = child_key(keys[d], rank)
            nkey[n - 1] = ck
            if os_iid and orderstat_child_empty(data, fpar, ipar, ck, sc - t):
                continue                # the same: its level would be EMPTY
            if closed:
                g = closed_init(kinds, cw, fpar, ipar, data, ck, d + 1, lf, li, sc, t)
                if sc + g > t:          # its rank 0 is above t after all: a leaf
                    nxt[n - 1] = sc + g
                    nrk[n - 1] = 0
                    if child_on == 1:
                        fr = n - 1
                        fu = unit(purpose_key(ck, PATH), 0)
                        fc = 0.0
                    continue
            d += 1
            own[d] = n - 1
            keys[d] = ck
            s_lev[d] = sc
            on_lev[d] = child_on
            if child_on == 1:
                u_lev[d] = unit(purpose_key(ck, PATH), 0)
                c_lev[d] = 0.0
            if not closed:
                dist_init(kinds, cw, fpar, ipar, data, cprog, ck, d, lf, li, head, sc - t, d - 1, rank)
        # the walk below one start is done: the next record with a child in reach
        if n_old < 0:
            break
        j, d = _restart(kinds, cw, fpar, ipar, data, cprog, closed, t, j, n_old, fr, fu, fc, pos,
                        dep, nkey, nxt, nrk, own, keys, s_lev, on_lev, u_lev, c_lev, lf, li, head)
        if d < 0:
            break
        base = d
    return n, fr, fu, fc, low


@kernel
def _lower(pos, dep, order, n, k):
    """The k-th smallest of the positions pos[:n] (``order[:n]`` is overwritten)."""
    for i in range(n):
        order[i] = i
    _select(order, 0, n, k, pos, dep)
    v = pos[order[0]]
    for i in range(1, k):
        if pos[order[i]] > v:
            v = pos[order[i]]
    return v


@kernel
def _collect(kinds, cw, fpar, ipar, data, cprog, closed, top, rkey, root_mode, t, cap, max_depth,
             pos, dep, onpath, nkey, nxt, nrk, own, keys, s_lev, on_lev, u_lev, c_lev, lf, li, head,
             p_stop, order):
    """Nodes with S <= _tie_cut(t) below the root ``rkey`` into (pos, dep, onpath), in pre-order.

    ``root_mode`` is ROOT_DRAW (the root's context drawn from the stationary law) or
    ROOT_PRESET (already written into level 0 by the caller, for generation runs). The
    per-level buffers (``keys`` .. ``head``) are never rebound here. With ``closed``
    (:func:`brwsim.kernels.dist.closed_form`: i.i.d. nodes, closed-form components) the
    distributions are set up and read by the small inline ``closed_init`` / ``closed_next``
    (the same state and numbers as ``dist_init`` / ``dist_next``); ``top`` is
    :func:`_top_bound`; the nodes' records for :func:`_resume` are kept (:func:`_walk`).
    ``p_stop`` > 0 lowers the cut-off as the pass goes (``order``: its scratch, see
    :func:`_walk`). Returns (n, frontier, u, c, low) as :func:`_walk`: the number of
    nodes, ``_ABORT`` if more than ``cap``, or ``_TOO_DEEP`` if the tree is deeper than
    the level buffers; the frontier; the lowered threshold (+inf: not lowered).
    """
    t = _tie_cut(t)
    keys[0] = rkey
    s_lev[0] = 0.0
    on_lev[0] = 1
    u_lev[0] = unit(purpose_key(rkey, PATH), 0)
    c_lev[0] = 0.0
    own[0] = nkey.shape[0] - 1
    nkey[nkey.shape[0] - 1] = rkey
    # (for a closed-form family, the same state as closed_init: see _restart)
    dist_init(kinds, cw, fpar, ipar, data, cprog, rkey, 0, lf, li, head, -t, root_mode, 0)
    return _walk(kinds, cw, fpar, ipar, data, cprog, closed, top, t, cap, max_depth, 0, 0, -1, -2,
                 0.0, 0.0, pos, dep, onpath, nkey, nxt, nrk, own, keys, s_lev, on_lev, u_lev,
                 c_lev, lf, li, head, p_stop, order)


@kernel
def _resume(kinds, cw, fpar, ipar, data, cprog, closed, top, t, cap, max_depth, n, fr, fu, fc, pos,
            dep, onpath, nkey, nxt, nrk, own, keys, s_lev, on_lev, u_lev, c_lev, lf, li, head):
    """Continue a recorded pass of ``n`` nodes to the higher threshold ``t``.

    For closed-form families only (:func:`brwsim.kernels.dist.closed_form`: a node's
    distribution is a function of its key, read rank by rank, and an exhausted level has
    no more children; a lazy family's level lists only the ranks above its cut-off). Every
    node of the pass, and the root, whose first child not taken lies at or below the new
    cut-off is set up again, its ranks before that child skipped (replayed where the
    order has state), and the walk goes on from there (:func:`_walk`): the nodes added
    are exactly those with S in (old cut-off, new cut-off], appended after the others
    (not in pre-order), and no node is collected twice. ``fr``, ``fu``, ``fc``: the
    pass's path frontier. Returns (n, frontier, u, c) as :func:`_walk`.
    """
    return _walk(kinds, cw, fpar, ipar, data, cprog, closed, top, _tie_cut(t), cap, max_depth, n, -1,
                 n, fr, fu, fc, pos, dep, onpath, nkey, nxt, nrk, own, keys, s_lev, on_lev,
                 u_lev, c_lev, lf, li, head, 0, nrk)[:4]  # (no lowering: no scratch is read)


@kernel
def _tie_cut(t):
    """Cut-off of a threshold pass at t: every position tied with one <= t is below it."""
    return t + 4.0 * TIE_REL * abs(t)


@kernel
def _within(pos, n, t):
    """Number of the n collected nodes with position <= t (the pass's core, see grow_tree)."""
    k = 0
    for i in range(n):
        if pos[i] <= t:
            k += 1
    return k


@kernel
def _before(pos, dep, i, j):
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
    """i before j: by plain float position (``plain``), else by :func:`_before`."""
    if plain:
        return pos[i] < pos[j]
    return _before(pos, dep, i, j)


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


_SAMPLE = 1024          # sample of _select's split (from 4 samples' worth of nodes on)
_SAMPLE_SLACK = 48      # sample ranks either side of the k-th's expected rank


@kernel
def _select(order, lo, hi, k, pos, dep):
    """Rearrange order[lo:hi] so that order[lo:k] holds its k - lo first nodes by :func:`_before`.

    A quickselect on plain float positions finds the k-th smallest value v first; the nodes
    below v - 8 TIE_REL |v| are then certainly among the k first (every node tied with v's
    lies within 2 TIE_REL |v| of it), the nodes above v + 8 TIE_REL |v| certainly not, and
    only the few in between are ordered by :func:`_before` (a strict weak order wherever
    ties do not chain: the same k first nodes as a quickselect by :func:`_before` alone).
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
def _select_by(n, key, dep, order, budgets):
    """order[:budgets[b]] = the budgets[b] first nodes by (key, depth, index), nested.

    Repeated budgets (a policy that stops growing) are skipped. Returns the largest tie
    zone of the selections (:func:`_select`).
    """
    for i in range(n):
        order[i] = i
    hi = n
    zone = 0
    for b in range(budgets.shape[0] - 1, -1, -1):
        if budgets[b] < hi:
            zone = max(zone, _select(order, 0, hi, budgets[b], key, dep))
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
    inline, so :func:`_score_nested`'s loop of them vectorises, and the sums no longer
    depend on the platform's libm (issue 23, ninth round: E[X | T] moved by at most a few
    1e-16 against earlier versions; trees, X and depths did not change).
    """
    return _split_limbs(exp_neg(-x))


@inline_kernel
def _add_nodes(order, a, b, pos, dep, onpath, p_hi, p_lo, n_path, max_dep):
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
def _accumulate(order, pos, dep, onpath, budgets, acc_out, exp_out, dep_out, col):
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
        p_hi, p_lo, n_path, max_dep, _ = _add_nodes(order, start, budgets[b], pos, dep, onpath,
                                                    p_hi, p_lo, n_path, max_dep)
        if budgets[b] > start:
            start = budgets[b]
        acc_out[b, col] = n_path
        exp_out[b, col] = p_hi * _INV_SCALE + p_lo * (_INV_SCALE * _INV_SCALE)
        dep_out[b, col] = max_dep


@kernel
def _select_nested(n, pos, dep, onpath, order, budgets, acc_out, exp_out, dep_out, col):
    """Per-budget accepted count, E[X | T] and depth of one iteration into column ``col``.

    ``budgets`` is sorted ascending and its last entry is at most ``n``. Returns the
    largest tie zone of the selections (:func:`_select`).
    """
    zone = _select_by(n, pos, dep, order, budgets)
    _accumulate(order, pos, dep, onpath, budgets, acc_out, exp_out, dep_out, col)
    return zone


# Bucket scoring (:func:`_score_nested`): rows of ``sel[0]``, one per quantity, a column
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
def _score_buffers(cap):
    """Scratch of :func:`_score_nested` for passes of up to ``cap`` nodes: SEL_COLS rows of
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
def _score_nested(n, pos, dep, onpath, order, sel, budgets, acc_out, exp_out, dep_out, col, ties):
    """:func:`_select_nested`'s outputs, by buckets of position instead of nested selections.

    The positions' range is cut into about n / 8 equal buckets (a monotone map, so every
    node of a lower bucket has a smaller or equal position). One pass counts the buckets
    (and keeps each node's); the cumulative counts give the bucket B_j holding each
    budget's k-th node. A node of bucket b belongs to the trees of the budgets j with
    B_j > b, so it is added, in two-limb fixed point, to the accumulators of the first of
    them (``_B_LANES`` per budget, taken in turn, so that consecutive additions do not wait
    on each other; a single budget's are one reduction, which vectorises); each depth
    records its lowest bucket, each path node its budget; the members of the budgets'
    buckets are listed at their counting-sort places in ``order``. Each loop does one
    thing (the path probabilities exp(-S) have a loop of their own, which vectorises):
    measured 17.2 -> 6.8-7.1 ns a node with 14 budgets, 4.7 with one (benchmarks/README.md,
    issue 23's ninth round). A budget's tree is then its
    accumulators and those of the budgets before it, the depths whose lowest bucket is
    below B_j, and the first members of B_j by :func:`_select`.

    That is T_k exactly when no node of another bucket can tie with the k-th node: the
    zone of +-``_B_ZONE`` TIE_REL |v| around it must lie inside its bucket (a node tied
    with it lies within 2 TIE_REL of it). Otherwise, or when the positions are all equal,
    or a quarter of them share the largest budget's bucket (a huge tie), or the caller
    knows the family's positions tie (``ties``), or there are too few buckets for the
    accumulators, :func:`_select_nested` scores the iteration instead. ``sel``:
    :func:`_score_buffers`. Sums of integer limbs do not depend on the order of
    addition: the outputs are the same bits as :func:`_select_nested`'s. Returns (True
    when the buckets scored it, the largest tie zone of the selections, :func:`_select`).
    """
    m = budgets.shape[0]
    if ties:
        return False, _select_nested(n, pos, dep, onpath, order, budgets, acc_out, exp_out, dep_out,
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
        return False, _select_nested(n, pos, dep, onpath, order, budgets, acc_out, exp_out, dep_out,
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
        return False, _select_nested(n, pos, dep, onpath, order, budgets, acc_out, exp_out, dep_out,
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
        zone = max(zone, _select(order, lo, hi, k, pos, dep))
        q_hi, q_lo, q_path, q_dep, v = _add_nodes(order, lo, k, pos, dep, onpath, p_hi, p_lo,
                                                  n_path, max_dep)
        z = _B_ZONE * TIE_REL * abs(v)
        if _bucket(v - z, x0, inv, nb) != b or _bucket(v + z, x0, inv, nb) != b:
            return False, _select_nested(n, pos, dep, onpath, order, budgets, acc_out, exp_out,
                                         dep_out, col)
        acc_out[j, col] = q_path
        exp_out[j, col] = q_hi * _INV_SCALE + q_lo * (_INV_SCALE * _INV_SCALE)
        dep_out[j, col] = q_dep
    return True, zone


# How a worker aims its thresholds (:func:`_retarget`, :func:`_aim`)
AIM_TIES = 0      # positions with exact ties (lattices): n(t) moves in steps, aim wide
AIM_REPEAT = 1    # a short pass is repeated whole
AIM_RESUME = 2    # a short pass is continued (:func:`_resume`)
_RESUME_AIM = 1.08     # a continued pass aims at this many times P_max nodes
_REPEAT_STEP_AIM = 1.3  # a repeated one at this many
_AIM_STEP = 1.0        # the next root's threshold moves by at most this much
# A root's first pass aims at a P_max nodes by the last root's count, a tuned per worker:
# up by the first factor after a short pass, down by the second otherwise (never below
# _AIM_MIN). The balance sits where short passes are 1 in (1 + log(up) / -log(down)):
# 1 in 15 when a short pass is repeated whole, 1 in 2.6 when it is continued (cheap).
_AIM_MIN = 1.02
_AIM_REPEAT = (1.2, 1.15, 0.99)     # start, up, down
_AIM_RESUME = (1.05, 1.05, 0.97)


@kernel
def _tune(a, short, mode):
    """The next root's aim after a root whose first pass was ``short`` (or not)."""
    start, up, down = _AIM_RESUME if mode == AIM_RESUME else _AIM_REPEAT
    if a == 0.0:
        a = start
    a = a * up if short else a * down
    return min(max(a, _AIM_MIN), 4.0)


@kernel
def _rate(rate, t0, n0, t1, n1):
    """The worker's growth rate of counts with t after two passes (t0, n0), (t1, n1) of a
    root: half the old estimate and half log(n1 / n0) / (t1 - t0), within [0.25, 64];
    unchanged when the passes cannot tell (too few nodes, equal counts)."""
    if n0 < 16 or n1 < 16 or n0 == n1 or t1 == t0:
        return rate
    g = math.log(n1 / n0) / (t1 - t0)
    if not g > 0.0:
        return rate
    return min(max(0.5 * rate + 0.5 * g, 0.25), 64.0)


@kernel
def _retarget(n, p_max, t, t_lo, t_hi, mode, rate):
    """Threshold bookkeeping after a pass of ``n`` nodes (or ``_ABORT``): bisect or extrapolate.

    Returns (done, t, t_lo, t_hi, widen); ``widen`` asks the caller to double its node
    buffers and retry at the same threshold (a huge tie at one position). A pass short
    of P_max (of at least 16 nodes) steps up by log(a P_max / n) / rate, as the count of
    nodes below t grows about as exp(rate t) (see :func:`_aim`): a = _RESUME_AIM when it will be
    continued (``mode`` AIM_RESUME), a little more when it is repeated whole; with
    AIM_TIES (counts that move in steps) by at least 0.5.
    """
    if n == _ABORT:
        t_hi = t
        if t_hi - t_lo > 1e-9 * max(1.0, abs(t)):
            t = 0.5 * (t_lo + t_hi) if t_lo > -np.inf else t - 0.7
            return False, t, t_lo, t_hi, False
        return False, t, t_lo, t_hi, True
    if n < p_max:
        t_lo = t
        if mode != AIM_TIES and n >= 16:
            a = _RESUME_AIM if mode == AIM_RESUME else _REPEAT_STEP_AIM
            t += max(0.01, math.log(a * p_max / n) / rate)
            if t >= t_hi:
                t = 0.5 * (t_lo + t_hi)
        elif t_hi < np.inf:
            t = 0.5 * (t_lo + t_hi)
        else:
            t += max(0.5, 1.2 * math.log(1.5 * p_max / max(n, 1)))
        return False, t, t_lo, t_hi, False
    return True, t, t_lo, t_hi, False


@kernel
def _after_pass(pos, n, p_max, t, t_lo, t_hi, mode, flags, passes, prev, t_prev, short):
    """Bookkeeping after a pass of ``n`` nodes (or ``_ABORT``) at ``t``, for a root's
    ``passes``-th pass: the pass is done only when P_max nodes lie at or below t itself
    (ties at the cut); the worker's growth rate (``flags[2]``, :func:`_rate`) learns
    from this pass and the previous one (``prev`` nodes at ``t_prev``); ``short``: the
    root's first pass fell short. Returns :func:`_retarget`'s (done, t, t_lo, t_hi,
    widen) and the new (passes, prev, t_prev, short).
    """
    core = n if n < p_max else _within(pos, n, t)
    if passes == 0:
        short = 0 <= core < p_max
    elif core >= 0 and prev >= 0:
        flags[2] = _rate(flags[2], t_prev, prev, t, core)
    done, t_new, t_lo, t_hi, widen = _retarget(core, p_max, t, t_lo, t_hi, mode, flags[2])
    return done, t_new, t_lo, t_hi, widen, passes + 1, core, t, short


@kernel
def _aim(n, p_max, t, mode, a, rate):
    """Threshold for the next root after a final pass of ``n`` nodes at ``t``.

    The count of nodes below t grows about as exp(rate t) (rate 1 asymptotically, the
    Malthusian rate of children's probabilities summing to 1; a shallow tree of a flat
    law grows much faster, see :func:`_rate`), so this root would have had a P_max nodes
    at about t - log(n / (a P_max)) / rate: the next root starts there (``a`` from
    :func:`_tune`), the step clipped to _AIM_STEP. Counts that move in steps (``mode`` AIM_TIES) would make
    that oscillate across a step: they lower t only past 2 P_max nodes, to about
    1.5 P_max.
    """
    if mode == AIM_TIES:
        if n > 2 * p_max:
            t -= 0.5 * math.log(n / (1.5 * p_max))
        return t
    step = math.log(n / (a * p_max)) / rate if n > 0 else -_AIM_STEP
    return t - min(max(step, -_AIM_STEP), _AIM_STEP)


@kernel
def first_levels(head_cap):
    """Levels a pass starts with: 256, fewer (at least 8) when a level's head row is so wide
    (a transformer's KV cache) that 256 of them would exceed LEVEL_CELLS entries."""
    return max(8, min(256, LEVEL_CELLS // max(head_cap, 1)))


@njit_cached
def new_workspace(p_max, head_cap):
    """Buffers of one worker: node arrays (6 P_max + 64), :func:`first_levels` levels
    (both grow on demand), the bucket rows of :func:`_score_nested`, the nodes' records
    for :func:`_resume` (:func:`_record_buffers`), each level's owner, and flags
    (``flags[0]``: 1 once the worker has seen exact ties, ``flags[1]``: the aim of its
    next first pass, in P_max (0 until set), ``flags[2]``: the growth rate of counts with
    t, 1 until measured; see :func:`grow_tree`)."""
    cap = 6 * p_max + 64
    keys, s_lev, on_lev, u_lev, c_lev, lf, li, head = _new_levels(first_levels(head_cap), head_cap)
    pos, dep, onpath, order = _node_buffers(cap)
    sel = _score_buffers(cap)
    nkey, nxt, nrk = _record_buffers(cap)
    own = np.empty(keys.shape[0], np.int64)
    flags = np.zeros(3)
    flags[2] = 1.0
    return (pos, dep, onpath, order, keys, s_lev, on_lev, u_lev, c_lev, lf, li, head, sel, nkey, nxt,
            nrk, own, flags, level_buffers(cap))


@njit_cached
def grow_tree(kinds, cw, fpar, ipar, data, cprog, head_cap, rkey, root_mode, root_ci, root_cf,
              budgets, max_depth, t, ws, acc_out, exp_out, dep_out, col):
    """The optimal trees of one root for every budget, into column ``col`` of the outputs.

    The optimal tree among nodes of depth <= ``max_depth`` (NO_DEPTH_CAP: unconstrained);
    the restriction keeps trees prefix-closed, so it is still the top P by path probability.
    The threshold ``t`` is adapted between passes (it only changes the speed, never the
    result): each root's first pass aims at a tuned multiple of P_max nodes (:func:`_aim`,
    :func:`_tune`). For closed-form families with a drawn root a pass short of P_max
    nodes is continued (:func:`_resume`), not repeated (a lazy family's level lists just
    the ranks above its cut-off, a contextual family's node needs its parent's level:
    they repeat it); a pass that is not continued lowers its cut-off once it holds P_max
    nodes (:func:`_walk`), and the next root then starts from the lowered value. A
    continued pass's nodes are no longer in pre-order, so when a budget's cut has more
    than one node in its tie zone (where pre-order breaks ties) the root is collected
    again in one pass at the final threshold, and the worker's later
    roots repeat short passes; families with exact ties (:func:`_lattice`: lattices, a
    Zipf law shared by every node) never continue.
    With ``root_mode`` ROOT_PRESET the root's context is (root_ci, root_cf).
    Returns (nodes visited, next threshold, workspace), or visited = HUGE_TIE when more than
    MAX_NODES nodes tie at one position, TOO_FEW when fewer than P_max nodes within the
    depth cap have a positive path probability.
    """
    (pos, dep, onpath, order, keys, s_lev, on_lev, u_lev, c_lev, lf, li, head, sel, nkey, nxt, nrk,
     own, flags, lv) = ws
    p_max = budgets[budgets.shape[0] - 1]
    cut = p_max if p_max < max_depth else max_depth   # no top-P node is deeper than P
    closed = closed_form(kinds, cprog)
    if closed and flags[0] == 0.0 and _lattice(kinds, fpar):
        flags[0] = 1.0
    # i.i.d. Zipf laws with a spread of exponents: passes level by level (kernels.levels),
    # not in pre-order, so neither continued nor lowered; a short pass is repeated
    level = root_mode == ROOT_DRAW and flags[0] == 0.0 and level_family(kinds, fpar, closed, p_max)
    resume = closed and root_mode == ROOT_DRAW and flags[0] == 0.0 and not level
    mode = AIM_TIES if flags[0] == 1.0 else (AIM_RESUME if resume else AIM_REPEAT)
    # a pass that is not continued lowers its cut-off as it goes (_walk); its overshoot is
    # then cheap, so the next root is aimed as for continuous counts even where some
    # positions tie (a lazy family's tail), though not on a lattice (counts in steps)
    p_stop = 0 if mode == AIM_RESUME or level else p_max
    aim_mode = AIM_REPEAT if p_stop > 0 and not closed else mode
    passes = 0
    short = False
    prev = -1
    t_prev = 0.0
    cap = pos.shape[0]
    top = _top_bound(kinds, fpar, closed)
    visited = 0
    t_lo = -np.inf
    t_hi = np.inf
    n = 0
    fr = -2
    fu = 0.0
    fc = 0.0
    fresh = True
    resumed = False                 # the nodes are not in pre-order (continued, or by levels)
    lowered = False
    while True:
        if fresh and level:
            n0 = 0
            resumed = True
            lowered = False
            n = level_pass(fpar, ipar, data, rkey, _tie_cut(t), cap, cut, top, pos, dep, onpath, lv)
        elif fresh:
            li[0, CTX_I] = root_ci
            lf[0, CTX_F] = root_cf
            n0 = 0
            n, fr, fu, fc, low = _collect(kinds, cw, fpar, ipar, data, cprog, closed, top, rkey,
                                          root_mode, t, cap, cut, pos, dep, onpath, nkey, nxt, nrk,
                                          own, keys, s_lev, on_lev, u_lev, c_lev, lf, li, head,
                                          p_stop, order)
            lowered = low < np.inf      # the pass lowered its cut-off: P_max nodes lie below
            if low < t:
                t = low
        else:
            n0 = n
            resumed = True
            lowered = False
            n, fr, fu, fc = _resume(kinds, cw, fpar, ipar, data, cprog, closed, top, t, cap, cut, n,
                                    fr, fu, fc, pos, dep, onpath, nkey, nxt, nrk, own, keys, s_lev,
                                    on_lev, u_lev, c_lev, lf, li, head)
        if n == _TOO_DEEP:
            root_row = head[0]          # a preset root may keep its state in its head row
            keys, s_lev, on_lev, u_lev, c_lev, lf, li, head = _new_levels(2 * keys.shape[0], head_cap)
            own = np.empty(keys.shape[0], np.int64)
            for j in range(root_row.shape[0]):      # (a slice assignment would compile numba's
                head[0, j] = root_row[j]            # shape-mismatch message: 25 s of string code)
            fresh = True
            resumed = False
            continue
        visited += cap - n0 if n == _ABORT else n - n0
        done, t, t_lo, t_hi, widen, passes, prev, t_prev, short = _after_pass(
            pos, n, p_max, t, t_lo, t_hi, mode, flags, passes, prev, t_prev, short)
        fresh = n == _ABORT or not resume
        if fresh and not level:
            resumed = False
        if widen:                   # a huge tie at one position: widen the buffers
            if 2 * cap > MAX_NODES:
                return HUGE_TIE, t, ws     # (the caller stops: an error)
            cap *= 2
            pos, dep, onpath, order = _node_buffers(cap)
            nkey, nxt, nrk = _record_buffers(cap)
            lv = level_buffers(cap)
            sel = _score_buffers(cap)
        if done:
            zone = _score_nested(n, pos, dep, onpath, order, sel, budgets, acc_out, exp_out,
                                 dep_out, col, flags[0] == 1.0)[1]
            if zone > 1:            # exact ties: aim as for them, continue no more passes
                flags[0] = 1.0
            if not (resumed and zone > 1):
                break
            # ties may be broken by pre-order: collect the root again at the final threshold
            fresh = True
            resumed = False
            level = False
            continue
        if t > T_LIMIT:             # the threshold passed every positive path probability
            return TOO_FEW, t, ws      # (the caller stops: an error)
    flags[1] = _tune(flags[1], short, aim_mode)
    ws = (pos, dep, onpath, order, keys, s_lev, on_lev, u_lev, c_lev, lf, li, head, sel, nkey, nxt,
          nrk, own, flags, lv)
    # (a lowered pass's threshold is where P_max nodes lie, whatever ties it holds)
    return visited, _aim(p_max if lowered else n, p_max, t, aim_mode, flags[1], flags[2]), ws


@njit_cached
def simulate_chunk(kinds, cw, fpar, ipar, data, cprog, head_cap, seed_key, it0, n_it, budgets,
                   max_depth, t_start, acc_out, exp_out, dep_out, ws):
    """Optimal trees of iterations it0 .. it0 + n_it - 1 (roots drawn from the stationary law).

    ``ws`` is a :func:`new_workspace` of this ``head_cap`` for a largest budget of at least
    budgets[-1], used before or not: its buffers are reused, so a call touches no fresh
    memory (first touches of fresh pages cost zipf(1.5, 128000, 0.4) at P = 65536 about
    20% in calls of 15 trees), and its flags are reset, so what it learnt of earlier
    calls' thresholds and ties is not carried over: the passes, and the nodes visited,
    depend only on this call's arguments (the trees never depend on them). Returns
    (nodes visited by all passes, final threshold, the workspace, which may have grown),
    or (HUGE_TIE or TOO_FEW, t, ws).
    """
    flags = ws[17]
    flags[0] = 0.0
    flags[1] = 0.0
    flags[2] = 1.0
    t = t_start
    visited = 0
    for col in range(n_it):
        v, t, ws = grow_tree(kinds, cw, fpar, ipar, data, cprog, head_cap,
                             root_key(seed_key, it0 + col), ROOT_DRAW, 0, 0.0, budgets, max_depth,
                             t, ws, acc_out, exp_out, dep_out, col)
        if v < 0:
            return v, t, ws
        visited += v
    return visited, t, ws


# ---------------------------------------------------------------------------------------
# Forests: B independent roots (the requests of a batch) sharing one budget.
#
# The optimal allocation of P draft nodes over a batch is the top P by path probability
# over the union of the B trees (each request's accepted tokens are its own path's nodes
# in its tree, so E[sum X_r | forest] = sum of p(v) over the forest). One threshold pass
# walks every root at the same threshold t, the roots' nodes concatenated in request
# order; the nested selection above then runs unchanged on the concatenation, so ties go
# to the smaller S, then the smaller depth, then the smaller request index, then the
# lexicographically smaller rank path. The equal split gives request r its own optimal
# tree of P_r = floor(P / B) + (r < P mod B) nodes, read off the same pass when root r
# has at least P_r nodes below t, else from its own single-root pass.

_BATCH = np.uint64(0x3C6EF372FE94F82B)     # purpose: iteration root -> request roots
_REQUEST = np.uint64(0xA54FF53A5F1D36F1)   # odd multiplier of the request index


@kernel
def request_key(seed_key, iteration, request):
    """Root key of request ``request`` of iteration ``iteration``: (seed, iteration, request) only.

    Request 0 is the single-root key :func:`root_key` of the iteration, so a batch of one
    is today's tree and every batch's first request shares its root with it.
    """
    k = root_key(seed_key, iteration)
    if request == 0:
        return k
    return mix(mix(k ^ _BATCH) + np.uint64(request) * _REQUEST)


@njit_cached
def split_budgets(budgets, batch):
    """(batch, len(budgets)) per-request budgets of the equal split: floor(P/B), +1 for r < P mod B."""
    out = np.empty((batch, budgets.shape[0]), np.int64)
    for b in range(budgets.shape[0]):
        q = budgets[b] // batch
        rem = budgets[b] - q * batch
        for r in range(batch):
            out[r, b] = q + (1 if r < rem else 0)
    return out


@njit_cached
def grow_forest(kinds, cw, fpar, ipar, data, cprog, head_cap, rkeys, budgets, max_depth, t, ws,
                starts, acc_out, exp_out, dep_out, col):
    """The optimal allocations of every budget over the roots ``rkeys``, into column ``col``.

    Outputs are forest totals (accepted nodes on the requests' sampled paths, E[sum X | F])
    and the deepest node of the forest. ``starts`` (len(rkeys) + 1) receives each root's
    first node in the concatenated pass, for :func:`split_from_pass`. Returns (nodes
    visited, next threshold, workspace, nodes of the final pass) or a negative status as
    :func:`grow_tree`.
    """
    (pos, dep, onpath, order, keys, s_lev, on_lev, u_lev, c_lev, lf, li, head, sel, nkey, nxt, nrk,
     own, flags, lv) = ws
    n_roots = rkeys.shape[0]
    p_max = budgets[budgets.shape[0] - 1]
    cut = p_max if p_max < max_depth else max_depth
    closed = closed_form(kinds, cprog)
    cap = pos.shape[0]
    top = _top_bound(kinds, fpar, closed)
    mode = AIM_TIES if flags[0] == 1.0 else AIM_REPEAT
    passes = 0
    short = False
    prev = -1
    t_prev = 0.0
    visited = 0
    t_lo = -np.inf
    t_hi = np.inf
    while True:
        n = 0
        status = 0
        for r in range(n_roots):
            starts[r] = n
            li[0, CTX_I] = 0
            lf[0, CTX_F] = 0.0
            k = _collect(kinds, cw, fpar, ipar, data, cprog, closed, top, rkeys[r], ROOT_DRAW, t,
                         cap - n, cut, pos[n:], dep[n:], onpath[n:], nkey[n:], nxt[n:], nrk[n:],
                         own, keys, s_lev, on_lev, u_lev, c_lev, lf, li, head, 0, order)[0]
            if k < 0:
                status = k
                break
            n += k
        starts[n_roots] = n
        if status == _TOO_DEEP:
            keys, s_lev, on_lev, u_lev, c_lev, lf, li, head = _new_levels(2 * keys.shape[0], head_cap)
            own = np.empty(keys.shape[0], np.int64)
            continue
        if status == _ABORT:
            n = _ABORT
        visited += cap if n == _ABORT else n
        done, t, t_lo, t_hi, widen, passes, prev, t_prev, short = _after_pass(
            pos, n, p_max, t, t_lo, t_hi, mode, flags, passes, prev, t_prev, short)
        if widen:
            if 2 * cap > MAX_NODES:
                return HUGE_TIE, t, ws, 0  # (the caller stops: an error)
            cap *= 2
            pos, dep, onpath, order = _node_buffers(cap)
            nkey, nxt, nrk = _record_buffers(cap)
            lv = level_buffers(cap)
            sel = _score_buffers(cap)
        if done:
            break
        if t > T_LIMIT:
            return TOO_FEW, t, ws, 0   # (the caller stops: an error)
    if _score_nested(n, pos, dep, onpath, order, sel, budgets, acc_out, exp_out, dep_out, col,
                     flags[0] == 1.0)[1] > 1:
        flags[0] = 1.0              # exact ties: aim as for them (see grow_tree)
    flags[1] = _tune(flags[1], short, mode)
    ws = (pos, dep, onpath, order, keys, s_lev, on_lev, u_lev, c_lev, lf, li, head, sel, nkey, nxt,
          nrk, own, flags, lv)
    return visited, _aim(n, p_max, t, mode, flags[1], flags[2]), ws, n


@njit_cached
def split_from_pass(kinds, cw, fpar, ipar, data, cprog, head_cap, rkeys, sbudgets, max_depth, ws,
                    starts, ws1, t1, tmp_acc, tmp_exp, tmp_dep, acc_out, exp_out, col):
    """Equal split: each request's own optimal tree of sbudgets[r] nodes, summed into ``col``.

    Reads root r's nodes from the forest pass in ``ws`` (segment starts[r]:starts[r+1])
    when it holds at least sbudgets[r, -1] of them; otherwise grows root r alone with the
    workspace ``ws1`` and threshold ``t1``. Returns (nodes visited by extra passes, t1,
    ws1) or a negative status.
    """
    pos, dep, onpath, order, sel, flags = ws[0], ws[1], ws[2], ws[3], ws[12], ws[17]
    m = sbudgets.shape[1]
    for b in range(m):
        acc_out[b, col] = 0
        exp_out[b, col] = 0.0
    visited = 0
    for r in range(rkeys.shape[0]):
        need = sbudgets[r, m - 1]
        if need == 0:
            continue
        s = starts[r]
        e = starts[r + 1]
        if e - s >= need:
            _score_nested(e - s, pos[s:e], dep[s:e], onpath[s:e], order, sel, sbudgets[r], tmp_acc,
                          tmp_exp, tmp_dep, 0, flags[0] == 1.0)
        else:
            if not t1 == t1:
                t1 = start_threshold(need)
            v, t1, ws1 = grow_tree(kinds, cw, fpar, ipar, data, cprog, head_cap, rkeys[r], ROOT_DRAW,
                                   0, 0.0, sbudgets[r], max_depth, t1, ws1, tmp_acc, tmp_exp, tmp_dep, 0)
            if v < 0:
                return v, t1, ws1
            visited += v
        for b in range(m):
            acc_out[b, col] += tmp_acc[b, 0]
            exp_out[b, col] += tmp_exp[b, 0]
    return visited, t1, ws1


@njit_cached
def forest_chunk(kinds, cw, fpar, ipar, data, cprog, head_cap, seed_key, it0, n_it, batch, budgets,
                 max_depth, t_start, split, acc_out, exp_out, dep_out, acc_split, exp_split):
    """Forests of ``batch`` roots for iterations it0 .. it0 + n_it - 1, with the equal split.

    Returns (nodes visited by the shared passes, nodes visited by the split's extra
    passes, final threshold), or a negative status in the first slot. With ``split``
    False the split outputs are left untouched.
    """
    p_max = budgets[budgets.shape[0] - 1]
    ws = new_workspace(p_max, head_cap)
    sb = split_budgets(budgets, batch)
    ws1 = new_workspace(max(sb[0, sb.shape[1] - 1], 1), head_cap)
    m = budgets.shape[0]
    tmp_acc = np.empty((m, 1), np.int32)
    tmp_exp = np.empty((m, 1))
    tmp_dep = np.empty((m, 1), np.int32)
    rkeys = np.empty(batch, np.uint64)
    starts = np.empty(batch + 1, np.int64)
    t = t_start
    t1 = np.nan
    visited = 0
    visited1 = 0
    for col in range(n_it):
        for r in range(batch):
            rkeys[r] = request_key(seed_key, it0 + col, r)
        v, t, ws, n = grow_forest(kinds, cw, fpar, ipar, data, cprog, head_cap, rkeys, budgets,
                                  max_depth, t, ws, starts, acc_out, exp_out, dep_out, col)
        if v < 0:
            return v, 0, t
        visited += v
        if split:
            v1, t1, ws1 = split_from_pass(kinds, cw, fpar, ipar, data, cprog, head_cap, rkeys, sb,
                                          max_depth, ws, starts, ws1, t1, tmp_acc, tmp_exp, tmp_dep,
                                          acc_split, exp_split, col)
            if v1 < 0:
                return v1, 0, t
            visited1 += v1
    return visited, visited1, t
