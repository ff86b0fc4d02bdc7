"""The depth-first threshold pass: every node of one root at or below a cut-off.

For one root, :func:`collect` visits, in depth-first pre-order with children in rank
order, every node whose position S(v) = -log p(v) is at most a threshold t, stopping at a
node's first child above t (children come sorted, so the rest are above t too). It
samples the target's path on the way: at a path node with uniform U, the child of rank r
is on the path iff cum_{r-1} < U <= cum_r, which needs only the ranks the pass generates.

A short pass of a closed-form family is continued from per-node records
(:func:`resume`); a pass that is not continued lowers its cut-off as it goes, to the
P_max-th smallest position collected so far (:func:`walk_pass`,
:func:`brwsim.kernels.select.lower_cut`): a star-shaped tree (the root's own ranks, as
Dirichlet(0.05, 32000) at P = 256) then stops near P_max nodes whatever the aim. A pass
over a closed-form family does not set up a node whose rank 0 is provably above t, nor
one over i.i.d. order statistics a node whose rank 0 is proven below its cut-off; none of
these changes a tree.

Families of i.i.d. nodes whose components are all closed forms
(:func:`brwsim.kernels.dist.closed_form`) are read through small helpers inlined into the
pass (:mod:`brwsim.kernels.closed`); every other family (order statistics, Dirichlet,
context programs, n-grams, the LSTM, transformers) goes through the general ``dist_init``
/ ``dist_next``, which are calls. Both give the same numbers.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from brwsim.kernels import inline_kernel, kernel
from brwsim.kernels.closed import (GEOM_LOG_1MR, UNIFORM_LOGQ, ZIPF_FLOOR, ZIPF_S_HI, ZIPF_S_LO,
                                   closed_init, closed_next)
from brwsim.kernels.dist import (CTX_NONE, GEOMETRIC, KIND_SLOT, ORDERSTAT, PEAKED, RANK, ROOT_DRAW,
                                 UNIFORM, ZIPF, closed_form, dist_init, dist_next, listed_next)
from brwsim.kernels.orderstat import orderstat_child_empty
from brwsim.kernels.rng import PATH, child_key, purpose_key, unit
from brwsim.kernels.select import lower_cut, tie_cut

ABORT = -1              # a pass found more nodes than its buffers hold
TOO_DEEP = -2           # a pass went deeper than its level buffers
#: Hard limit on one pass's nodes (about 5 GB of buffers).
MAX_NODES = 1 << 28


class Nodes(NamedTuple):
    """A pass's nodes, node i in slot i of each array (a slice from slot n on holds the nodes
    of a later root of a forest): position S = -log p (``pos``), depth (``dep``, int32),
    whether it is on the target's sampled path (``onpath``, int8), and the records a
    continued pass reads (:func:`resume`; one more slot than ``pos``, the last the root's):
    its key (``nkey``, uint64), the position of its first child not taken (``nxt``) and
    that child's rank (``nrk``, int32). A pass holds at most ``pos.shape[0]`` nodes."""

    pos: np.ndarray
    dep: np.ndarray
    onpath: np.ndarray
    nkey: np.ndarray
    nxt: np.ndarray
    nrk: np.ndarray


class Levels(NamedTuple):
    """The depth-first walk's state, level d for the node of depth d it stands on: that
    node's index (``own``; the root's is the records' last slot), key (``keys``), position
    (``s_lev``), path state (``on_lev``: 0 off the path, 1 searching its sampled child, 2
    found), path uniform and the probability of the children taken (``u_lev``, ``c_lev``),
    and its distribution's level (``lf``, ``li``, ``head``: :mod:`brwsim.kernels.dist`)."""

    own: np.ndarray
    keys: np.ndarray
    s_lev: np.ndarray
    on_lev: np.ndarray
    u_lev: np.ndarray
    c_lev: np.ndarray
    lf: np.ndarray
    li: np.ndarray
    head: np.ndarray


@kernel
def top_bound(kinds, fpar, closed):
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
def _restart(law, closed, t, j, n_old, front, nodes, levels):
    """Set up the next start of a continued walk (:func:`walk_pass`): the first record from
    ``j`` on (-1: the root's) whose first child not taken lies at or below ``t``, its
    level made as it was left, its ranks before that child skipped (replayed where the
    order has state); ``front`` is the path frontier (fr, fu, fc). Returns (the record
    after it, its level), or (n_old, -1) if none.
    """
    fpar, ipar, data = law.fpar, law.ipar, law.data
    fr, fu, fc = front
    pos, dep, _, nkey, nxt, nrk = nodes
    own, keys, s_lev, on_lev, u_lev, c_lev, lf, li, head = levels
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
    dist_init(law, key, d, lf, li, head, s_lev[d] - t, d - 1 if i != root else ROOT_DRAW, 0)
    if closed and li[d, KIND_SLOT] != PEAKED:   # rank-indexed: skip the ranks before
        li[d, RANK] = nrk[i]
    else:                               # an order with state: replay them
        for r in range(nrk[i]):
            dist_next(fpar, ipar, data, key, d, lf, li, head)
    return j + 1, d


@kernel
def lattice(kinds, fpar):
    """True when a closed-form family's positions tie exactly between nodes: its laws are
    shared by every node (not Zipf with a spread of exponents, not Peaked, whose top mass
    is drawn per node), so equal multisets of ranks give equal positions."""
    for c in range(kinds.shape[0]):
        k = kinds[c]
        if not (k == PEAKED or (k == ZIPF and fpar[c, ZIPF_S_HI] > fpar[c, ZIPF_S_LO])):
            return True
    return False


@kernel
def walk_pass(law, t, max_depth, n, d, n_old, front, nodes, levels, p_stop, order):
    """Depth-first pass at cut-off ``t`` (already a tie cut-off), appending nodes from index ``n``
    to ``nodes`` (:class:`Nodes`), walking ``levels`` (:class:`Levels`).

    Visits, children in rank order, every node with S <= t below the node whose
    distribution level ``d`` holds (d = -1: none), until that level is exhausted; then,
    with ``n_old`` > -1, it continues from the records of the root and nodes
    0 .. n_old - 1 of an earlier pass at a lower cut-off (see :func:`resume`). Every
    collected node i records its key, and, once its children are done, the
    position ``nxt[i]`` of its first child not taken (+inf when it can have no more) and
    that child's rank ``nrk[i]``; a node never set up (its rank 0 is beyond ``top``)
    records instead the bound from ``top``, its parent's key and -1 - its own rank (its
    key is hashed only if a continuation needs it), and one whose level proves its rank
    0 above t before it is fully set up (:func:`closed_init`: a Zipf node's floor on its
    normaliser) records that bound, its key and rank 0. The records serve closed-form
    families only (a lazy level lists just the ranks above its cut-off; a level that
    proves itself empty is never set up). Recording always costs less than a switch
    would in compile time (LLVM would compile the loop once per setting).
    ``own[d]`` is the node whose distribution level d holds (the root's records go to the
    last slot). ``front`` = (fr, fu, fc): the path frontier, the node
    still searching the target's sampled child (-2: none yet), its path uniform and the
    probability of the children it took; it moves when that node's walk finds the child.

    With ``p_stop`` > 0 the pass lowers its cut-off as it goes (:func:`lower_cut`): once it
    holds ``p_stop`` nodes, and again after every further p_stop / 8, the cut-off becomes
    the tie cut-off of the p_stop-th smallest position v collected so far. Every node at
    or below v is still collected (the nodes not yet visited are walked at the new
    cut-off, which is above v), so the p_stop first nodes of the whole tree are among
    those collected, with every node tied with them: the same trees as a pass at the
    first cut-off, for less work where that cut-off was high. ``order`` is the scratch
    of the selection. Not with records for :func:`resume` (their cut-offs would differ).

    Families of i.i.d. closed-form nodes (:func:`brwsim.kernels.dist.closed_form`) are read
    through the inline ``closed_init`` / ``closed_next``, whose ``top``
    (:func:`top_bound`) spares the set-up of nodes that can have no child below ``t``.

    Returns (n, fr, fu, fc, low): the new node count (``ABORT`` beyond ``cap``, the length
    of ``nodes.pos``,
    ``TOO_DEEP`` beyond the level buffers), the frontier, and the last v (+inf if the
    cut-off was never lowered): at least p_stop of the nodes lie at or below it.
    """
    kinds, cw, fpar, ipar, data, cprog = law
    fr, fu, fc = front
    pos, dep, onpath, nkey, nxt, nrk = nodes
    own, keys, s_lev, on_lev, u_lev, c_lev, lf, li, head = levels
    closed = closed_form(kinds, cprog)
    top = top_bound(kinds, fpar, closed)
    cap = pos.shape[0]
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
                return ABORT, fr, fu, fc, low
            if d + 1 >= n_levels:
                return TOO_DEEP, fr, fu, fc, low
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
                v = lower_cut(pos, dep, order, n, p_stop)
                if v < low:
                    low = v
                    t = min(t, tie_cut(v))
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
                dist_init(law, ck, d, lf, li, head, sc - t, d - 1, rank)
        # the walk below one start is done: the next record with a child in reach
        if n_old < 0:
            break
        j, d = _restart(law, closed, t, j, n_old, (fr, fu, fc), nodes, levels)
        if d < 0:
            break
        base = d
    return n, fr, fu, fc, low


@inline_kernel
def collect(law, rkey, root_mode, t, max_depth, nodes, levels, p_stop, order):
    """Nodes with S <= tie_cut(t) below the root ``rkey`` into ``nodes``, in pre-order.

    ``root_mode`` is ROOT_DRAW (the root's context drawn from the stationary law) or
    ROOT_PRESET (already written into level 0 by the caller, for generation runs). The
    arrays of ``levels`` are never rebound here. For a closed-form family
    (:func:`brwsim.kernels.dist.closed_form`: i.i.d. nodes, closed-form components) the
    distributions are set up and read by the small inline ``closed_init`` / ``closed_next``
    (the same state and numbers as ``dist_init`` / ``dist_next``); the nodes' records for
    :func:`resume` are kept (:func:`walk_pass`).
    ``p_stop`` > 0 lowers the cut-off as the pass goes (``order``: its scratch, see
    :func:`walk_pass`). Returns (n, frontier, u, c, low) as :func:`walk_pass`: the number of
    nodes, ``ABORT`` if more than ``nodes.pos`` holds, or ``TOO_DEEP`` if the tree is deeper than
    the level buffers; the frontier; the lowered threshold (+inf: not lowered).
    """
    own, keys, s_lev, on_lev, u_lev, c_lev, lf, li, head = levels
    nkey = nodes.nkey
    t = tie_cut(t)
    keys[0] = rkey
    s_lev[0] = 0.0
    on_lev[0] = 1
    u_lev[0] = unit(purpose_key(rkey, PATH), 0)
    c_lev[0] = 0.0
    own[0] = nkey.shape[0] - 1
    nkey[nkey.shape[0] - 1] = rkey
    # (for a closed-form family, the same state as closed_init: see _restart)
    dist_init(law, rkey, 0, lf, li, head, -t, root_mode, 0)
    return walk_pass(law, t, max_depth, 0, 0, -1, (-2, 0.0, 0.0), nodes, levels, p_stop, order)


@inline_kernel
def resume(law, t, max_depth, n, front, nodes, levels):
    """Continue a recorded pass of ``n`` nodes to the higher threshold ``t``.

    For closed-form families only (:func:`brwsim.kernels.dist.closed_form`: a node's
    distribution is a function of its key, read rank by rank, and an exhausted level has
    no more children; a lazy family's level lists only the ranks above its cut-off). Every
    node of the pass, and the root, whose first child not taken lies at or below the new
    cut-off is set up again, its ranks before that child skipped (replayed where the
    order has state), and the walk goes on from there (:func:`walk_pass`): the nodes added
    are exactly those with S in (old cut-off, new cut-off], appended after the others
    (not in pre-order), and no node is collected twice. ``front`` = (fr, fu, fc): the
    pass's path frontier. Returns (n, frontier, u, c) as :func:`walk_pass`.
    """
    return walk_pass(law, tie_cut(t), max_depth, n, -1, n, front, nodes, levels, 0,
                     nodes.nrk)[:4]     # (no lowering: no scratch is read)

