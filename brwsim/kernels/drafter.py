"""A second transformer checkpoint as the drafter: its trees, scored on the target's truth.

The environment is a transformer family (one TRANSFORMER component, see
:mod:`brwsim.kernels.transformer`); the draft model is another checkpoint's weight block
(:class:`Draft`'s ``data``, offset 0) of the same vocabulary. Every tree node keeps two
level rows of the transformer row layout: the target's (``head[d]``, set up by
``policies._init_node`` without a cut-off, so all V ranks are listed with their tokens)
and the draft's (``dhead[d]``, set up by
:func:`~brwsim.kernels.transformer.transformer_init` on the draft's weights over the same
context: the root's tokens copied from the target's row, then one token per level, with
the target's window and carry). The draft lists its children by its own probability
(rank k, token ``dhead[d, V + k]``); ``inv[d, token]`` is that token's rank among the
target's children, which names the node (its key is ``child_key(parent key, target
rank)``, as in every other policy and the optimal pass) and gives its true
log-probability ``head[d, rank]``. The sampled target path is the optimal pass's: the
child of target rank r is on it iff cum_{r-1} < U <= cum_r.

Three shapes, each scored by ``select.accumulate`` on TRUE path probabilities:

* :func:`best_chunk`: best-first by the draft's path log-probability, as a threshold
  pass (``aim.after_pass``) in depth-first pre-order with children in the draft's rank
  order; the draft's children are sorted, so a node's scan stops at its first child above
  the threshold. The target's row of a node is set up only when the node gets a child.
* :func:`chain_chunk`: the draft's greedy chain (its rank-0 child at every level).
* :func:`dynamic_chunk`: EAGLE-2/3 layers (``policies._dynamic_tree``) on the draft's
  path values.

Each chunk kernel takes ``(law, head_cap, roots, draft, <its own parameters>, budgets,
out)`` as the kernels of :mod:`brwsim.kernels.policies`, ``draft`` a :class:`Draft`; its
buffers travel to its helpers as :class:`DraftRows`, :class:`BestLevels`,
:class:`DraftCands` and :class:`~brwsim.kernels.policies.Collected`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from brwsim.kernels import kernel, njit_cached
from brwsim.kernels.dist import CTX_F, CTX_I, DATA_OFF, LEVEL_F, LEVEL_I
from brwsim.kernels.policies import NEG_INF, Collected, _init_node, _layer_top, _preset_row
from brwsim.kernels.rng import PATH, child_key, purpose_key, unit
from brwsim.kernels.netinit import net_init
from brwsim.kernels.transformer import META, TF_CARRY, TF_SLOTS, TF_WINDOW
from brwsim.kernels.aim import AIM_TIES, after_pass, aim, bracket_search, new_search
from brwsim.kernels.collect import ABORT, MAX_NODES, TOO_DEEP
from brwsim.kernels.select import accumulate, select_by, tie_cut
from brwsim.kernels.tree import first_levels, node_buffers


class Draft(NamedTuple):
    """The draft model: its checkpoint's weight block (``data``, the transformer layout
    from offset 0, the target's vocabulary), the exponent of its probabilities (``beta`` =
    1 / its temperature) and the width of its level rows (``cap``)."""

    data: np.ndarray
    beta: float
    cap: int


class DraftRows(NamedTuple):
    """Both models' rows of the nodes a tree keeps, one row each: the target's
    distribution level (``lf``, ``li``, ``head``: :mod:`brwsim.kernels.dist`, all ranks
    listed with their tokens), the draft's row (``dhead``, the transformer row layout),
    target ranks by token (``inv``, -1 if unlisted), the draft's listed count (``dn``) and
    the target rank of the sampled child (``p_lev``, -1 off the path or if not reached)."""

    lf: np.ndarray
    li: np.ndarray
    head: np.ndarray
    dhead: np.ndarray
    inv: np.ndarray
    dn: np.ndarray
    p_lev: np.ndarray


class BestLevels(NamedTuple):
    """The best-first walk's state, level d for the node of depth d it stands on: key
    (``keys``), draft and true positions (``s_lev``, ``t_lev``), whether it is on the
    sampled path (``on_lev``, int8), its next draft rank to scan (``k_lev``), its target
    rank among its parent's children (``r_lev``), whether its target row is set up
    (``ready``, int8) and both models' rows (``rows``, :class:`DraftRows`)."""

    keys: np.ndarray
    s_lev: np.ndarray
    t_lev: np.ndarray
    on_lev: np.ndarray
    k_lev: np.ndarray
    r_lev: np.ndarray
    ready: np.ndarray
    rows: DraftRows


class DraftCands(NamedTuple):
    """EAGLE candidates by the draft's path values, in generation order, candidate i in
    slot i: draft position (``est``), true position (``pos``), depth (``dep``, int32),
    whether it is on the sampled path (``onpath``, int8), key (``ckey``), target and draft
    ranks among its parent's children (``crank``, ``cdrank``) and its parent's row
    (``crow``)."""

    est: np.ndarray
    pos: np.ndarray
    dep: np.ndarray
    onpath: np.ndarray
    ckey: np.ndarray
    crank: np.ndarray
    cdrank: np.ndarray
    crow: np.ndarray


# ---------------------------------------------------------------------------------------
# One node's two rows

@kernel
def _root(law, roots, col, draft, v, min_dlogq, dprog, rows):
    """Both rows 0 of ``rows`` (:class:`DraftRows`) for root ``col`` of ``roots``: the
    target's (drawn or preset context; ``v`` its vocabulary), then the draft's over the
    same tokens (``dprog``: a one-window context program). Returns the draft's listed
    count (ranks with log-probability >= ``min_dlogq``)."""
    fpar, ipar = law.fpar, law.ipar
    ddata, dbeta = draft.data, draft.beta
    lf, li, head, dhead = rows.lf, rows.li, rows.head, rows.dhead
    li[0, CTX_I] = roots.ci[col]
    lf[0, CTX_F] = roots.cf[col]
    _init_node(law, roots.keys[col], 0, lf, li, head, roots.mode, 0)
    mm = 2 * v
    n = int(head[0, mm])
    dprog[2] = n
    for j in range(n):
        dprog[5 + j] = head[0, mm + META + j]
    net = (ddata, 0, dbeta, fpar[0, TF_CARRY], fpar[0, TF_WINDOW], ipar[0, TF_SLOTS])
    nd = net_init(False, net, dprog, 0, -1, True, 0, 0, min_dlogq, dhead, 0)
    dhead[0, mm + 1] = head[0, mm + 1]        # tokens carried past the window (generation)
    return nd


@kernel
def _draft_child(fpar, ipar, draft, dprog, d, pd, k, n_list, min_dlogq, dhead):
    """The draft's (``draft``, :class:`Draft`) row of the child of draft rank ``k`` of
    level ``pd``; its listed count."""
    net = (draft.data, 0, draft.beta, fpar[0, TF_CARRY], fpar[0, TF_WINDOW], ipar[0, TF_SLOTS])
    return net_init(False, net, dprog, d, pd, False, k, n_list, min_dlogq, dhead, 0)


@kernel
def _target_view(v, key, d, on, li, head, inv, p_lev):
    """Target ranks by token (``inv[d]``, -1 if unlisted) and the sampled child's rank
    (``p_lev[d]``; -1 off the path or if the cumulative sum never reaches U)."""
    for j in range(v):
        inv[d, j] = -1
    n = li[d, 3]
    for r in range(n):
        inv[d, int(head[d, v + r])] = r
    p = -1
    if on == 1:
        u = unit(purpose_key(key, PATH), 0)
        c = 0.0
        for r in range(n):
            c += math.exp(head[d, r])
            if u <= c:
                p = r
                break
    p_lev[d] = p


@njit_cached
def _rows(n_levels, head_cap, dcap, v):
    """The :class:`DraftRows` of ``n_levels`` rows (target head ``head_cap`` wide, draft
    rows ``dcap`` wide, a vocabulary of ``v`` tokens)."""
    return DraftRows(np.empty((n_levels, LEVEL_F)), np.empty((n_levels, LEVEL_I), np.int64),
                     np.empty((n_levels, max(head_cap, 1))), np.empty((n_levels, dcap)),
                     np.empty((n_levels, v), np.int64), np.empty(n_levels, np.int64),
                     np.empty(n_levels, np.int64))


@njit_cached
def _best_levels(n_levels, head_cap, dcap, v):
    """The :class:`BestLevels` of ``n_levels`` levels (rows as :func:`_rows`)."""
    return BestLevels(np.empty(n_levels, np.uint64), np.empty(n_levels), np.empty(n_levels),
                      np.empty(n_levels, np.int8), np.empty(n_levels, np.int64),
                      np.empty(n_levels, np.int64), np.empty(n_levels, np.int8),
                      _rows(n_levels, head_cap, dcap, v))


# ---------------------------------------------------------------------------------------
# Best-first

@kernel
def _best_collect(law, roots, col, draft, v, dprog, t, cap, dmax, found, lev, fwd):
    """Nodes below root ``col`` of ``roots`` with draft position <= tie_cut(t), in
    pre-order (children in draft rank order), into ``found`` (:class:`Collected`, at most
    ``cap`` nodes), walking the levels of ``lev`` (:class:`BestLevels`).

    ``est`` the draft's position -log q_draft(path), ``pos`` the true one; returns the
    count, ``ABORT`` or ``TOO_DEEP`` as ``collect.collect``. Nodes deeper than ``dmax``
    (the largest budget) are never collected. ``fwd[0]`` counts the draft's forward
    set-ups, ``fwd[1]`` the target's (both added to).
    """
    fpar, ipar = law.fpar, law.ipar
    est, pos, dep, onpath = found
    keys, s_lev, t_lev, on_lev, k_lev, r_lev, ready, rows = lev
    lf, li, head, dhead, inv, dn, p_lev = rows
    rkey = roots.keys[col]
    n_levels = keys.shape[0]
    t = tie_cut(t)
    keys[0] = rkey
    s_lev[0] = 0.0
    t_lev[0] = 0.0
    on_lev[0] = 1
    k_lev[0] = 0
    dn[0] = _root(law, roots, col, draft, v, -t, dprog, rows)
    _target_view(v, rkey, 0, 1, li, head, inv, p_lev)
    ready[0] = 1
    fwd[0] += 1
    fwd[1] += 1
    n = 0
    d = 0
    while d >= 0:
        k = k_lev[d]
        if k >= dn[d]:
            d -= 1
            continue
        k_lev[d] = k + 1
        sc = s_lev[d] - dhead[d, k]
        if not sc <= t:                 # the draft's ranks are sorted: the rest are above t
            d -= 1
            continue
        if ready[d] == 0:               # the target's row, now that the node has a child
            _init_node(law, keys[d], d, lf, li, head, d - 1, r_lev[d])
            _target_view(v, keys[d], d, on_lev[d], li, head, inv, p_lev)
            ready[d] = 1
            fwd[1] += 1
        r = inv[d, int(dhead[d, v + k])]
        if r < 0:
            continue
        if n >= cap:
            return ABORT
        if d + 1 >= n_levels:
            return TOO_DEEP
        child_on = 1 if on_lev[d] == 1 and p_lev[d] == r else 0
        st = t_lev[d] - head[d, r]
        est[n] = sc
        pos[n] = st
        dep[n] = d + 1
        onpath[n] = child_on
        n += 1
        if d + 1 >= dmax:               # no tree of <= dmax nodes holds its children
            continue
        nd = _draft_child(fpar, ipar, draft, dprog, d + 1, d, k, dn[d], sc - t, dhead)
        fwd[0] += 1
        keys[d + 1] = child_key(keys[d], r)
        d += 1
        s_lev[d] = sc
        t_lev[d] = st
        on_lev[d] = child_on
        r_lev[d] = r
        k_lev[d] = 0
        dn[d] = nd
        ready[d] = 0
    return n


@njit_cached
def best_chunk(law, head_cap, roots, draft, budgets, t_start, out):
    """Best-first trees by the draft's (``draft``, :class:`Draft`) path probability below
    the roots ``roots.keys``.

    Roots as ``policies.static_chunk``; the tree of budget P is the first P collected
    nodes by (draft position with ties, depth, pre-order), nested across budgets.
    Returns (nodes collected, draft forward set-ups, target forward set-ups, threshold);
    nodes = -1 when more than MAX_NODES nodes tie.
    """
    ipar, data = law.ipar, law.data
    rkeys, rhead = roots.keys, roots.head
    dcap = draft.cap
    acc_out, exp_out, dep_out = out
    v = int(data[ipar[0, DATA_OFF] + 1])
    p_max = budgets[budgets.shape[0] - 1]
    cap = 6 * p_max + 64
    est = np.empty(cap)
    pos, dep, onpath, order = node_buffers(cap)
    dprog = np.zeros(5 + ipar[0, TF_SLOTS])
    n_levels = min(first_levels(head_cap + dcap), p_max + 1)
    lev = _best_levels(n_levels, head_cap, dcap, v)
    forwards = np.zeros(2, np.int64)
    t = t_start
    visited = 0
    unit_rate = np.ones(3)          # after_pass's flags: growth rate 1, not learnt
    for col in range(rkeys.shape[0]):
        search = new_search()
        while True:
            _preset_row(rhead, col, lev.rows.head)
            n = _best_collect(law, roots, col, draft, v, dprog, t, cap, p_max,
                              Collected(est, pos, dep, onpath), lev, forwards)
            if n == TOO_DEEP:
                n_levels = min(2 * n_levels, p_max + 1)
                lev = _best_levels(n_levels, head_cap, dcap, v)
                continue
            visited += cap if n == ABORT else n
            done, t, widen, search = after_pass(est, dep, order, n, cap, p_max, t, AIM_TIES,
                                                unit_rate, bracket_search(search, t))
            if widen:                   # a huge tie at one position: widen the buffers
                if 2 * cap > MAX_NODES:
                    return -1, forwards[0], forwards[1], t
                cap *= 2
                est = np.empty(cap)
                pos, dep, onpath, order = node_buffers(cap)
            if done:
                break
        select_by(n, est, dep, order, budgets)
        accumulate(order, pos, dep, onpath, budgets, acc_out, exp_out, dep_out, col)
        t = aim(n, p_max, t, AIM_TIES, 0.0, 1.0)
    return visited, forwards[0], forwards[1], t


# ---------------------------------------------------------------------------------------
# Greedy chain

@njit_cached
def chain_chunk(law, head_cap, roots, draft, budgets, out):
    """The draft's (``draft``, :class:`Draft`) greedy chain (its most likely token at every
    level) below each root of ``roots``.

    Two alternating rows per model; the chain of budget P is its first P nodes.
    """
    fpar, ipar, data = law.fpar, law.ipar, law.data
    rkeys, rhead = roots.keys, roots.head
    acc_out, exp_out, dep_out = out
    v = int(data[ipar[0, DATA_OFF] + 1])
    p_max = budgets[budgets.shape[0] - 1]
    pos, dep, onpath, order = node_buffers(p_max)
    dprog = np.zeros(5 + ipar[0, TF_SLOTS])
    rows = _rows(2, head_cap, draft.cap, v)
    lf, li, head, dhead, inv, p_lev = rows.lf, rows.li, rows.head, rows.dhead, rows.inv, rows.p_lev
    for col in range(rkeys.shape[0]):
        _preset_row(rhead, col, head)
        key = rkeys[col]
        nd = _root(law, roots, col, draft, v, NEG_INF, dprog, rows)
        _target_view(v, key, 0, 1, li, head, inv, p_lev)
        st = 0.0
        on = 1
        n = 0
        for i in range(p_max):
            a = i % 2
            r = inv[a, int(dhead[a, v])] if nd > 0 else -1
            if r < 0:
                break
            st -= head[a, r]
            on = 1 if on == 1 and p_lev[a] == r else 0
            pos[i] = st
            dep[i] = i + 1
            onpath[i] = on
            order[i] = i
            n += 1
            if i + 1 < p_max:
                key = child_key(key, r)
                _init_node(law, key, 1 - a, lf, li, head, a, r)
                nd = _draft_child(fpar, ipar, draft, dprog, 1 - a, a, 0, nd, NEG_INF, dhead)
                _target_view(v, key, 1 - a, on, li, head, inv, p_lev)
        bc = np.minimum(budgets, n)
        accumulate(order, pos, dep, onpath, bc, acc_out, exp_out, dep_out, col)


# ---------------------------------------------------------------------------------------
# Dynamic (EAGLE-2/3)

@kernel
def _expand(v, key, row, pest, ppos, pdep, k, cand, n, rows, on):
    """Append the draft's top-``k`` children of the node at row ``row`` of ``rows``
    (:class:`DraftRows`) as candidates n, ... of ``cand`` (:class:`DraftCands`); returns
    the new count. ``pest``, ``ppos``, ``pdep`` and ``on`` are the node's draft and true
    positions, depth and path flag."""
    est, pos, dep, onpath, ckey, crank, cdrank, crow = cand
    head, dhead, inv, dn, p_lev = rows.head, rows.dhead, rows.inv, rows.dn, rows.p_lev
    for j in range(min(k, dn[row])):
        r = inv[row, int(dhead[row, v + j])]
        if r < 0:
            continue
        est[n] = pest - dhead[row, j]
        pos[n] = ppos - head[row, r]
        dep[n] = pdep + 1
        onpath[n] = 1 if on == 1 and p_lev[row] == r else 0
        ckey[n] = child_key(key, r)
        crank[n] = r
        cdrank[n] = j
        crow[n] = row
        n += 1
    return n


@kernel
def _dynamic_tree(law, roots, col, draft, v, dprog, depth, topk, cand, lay, rows):
    """All candidates (``cand``, :class:`DraftCands`) of the EAGLE layers below root ``col``
    of ``roots`` by the draft's path values, in generation order; returns their count.
    Row 0 of ``rows`` (:class:`DraftRows`) is the root, rows 1.. the expanded nodes;
    ``lay`` holds a layer's top."""
    fpar, ipar = law.fpar, law.ipar
    est, pos, dep, onpath, ckey, crank, cdrank, crow = cand
    lf, li, head, dhead, inv, dn, p_lev = rows
    rkey = roots.keys[col]
    dn[0] = _root(law, roots, col, draft, v, NEG_INF, dprog, rows)
    _target_view(v, rkey, 0, 1, li, head, inv, p_lev)
    n = _expand(v, rkey, 0, 0.0, 0.0, np.int64(0), topk, cand, 0, rows, np.int64(1))
    start = 0
    row = 1
    for _layer in range(1, depth):
        kk = _layer_top(lay, start, n, topk, est, dep)
        if kk == 0:
            break
        start = n
        for j in range(kk):
            c = lay[j]
            _init_node(law, ckey[c], row, lf, li, head, crow[c], crank[c])
            dn[row] = _draft_child(fpar, ipar, draft, dprog, row, crow[c], cdrank[c],
                                   dn[crow[c]], NEG_INF, dhead)
            on = np.int64(onpath[c])
            _target_view(v, ckey[c], row, on, li, head, inv, p_lev)
            n = _expand(v, ckey[c], row, est[c], pos[c], np.int64(dep[c]), topk, cand, n, rows,
                        on)
            row += 1
    return n


@njit_cached
def dynamic_chunk(law, head_cap, roots, draft, depth, topk, budgets, out):
    """EAGLE-2/3 trees by the draft's (``draft``, :class:`Draft`) path values below the
    roots ``roots.keys``, scored.

    The tree of budget P is the first P candidates by (draft path value, depth, generation
    order); ``budgets`` is non-decreasing, already capped at the policy's ``total``.
    """
    ipar, data = law.ipar, law.data
    rkeys, rhead = roots.keys, roots.head
    acc_out, exp_out, dep_out = out
    v = int(data[ipar[0, DATA_OFF] + 1])
    cap = topk + (depth - 1) * topk * topk
    est = np.empty(cap)
    pos, dep, onpath, order = node_buffers(cap)
    ckey = np.empty(cap, np.uint64)
    crank = np.empty(cap, np.int64)
    cdrank = np.empty(cap, np.int64)
    crow = np.empty(cap, np.int64)
    lay = np.empty(topk * topk, np.int32)
    n_rows = 1 + (depth - 1) * topk
    dprog = np.zeros(5 + ipar[0, TF_SLOTS])
    rows = _rows(n_rows, head_cap, draft.cap, v)
    cand = DraftCands(est, pos, dep, onpath, ckey, crank, cdrank, crow)
    bc = np.empty_like(budgets)
    for col in range(rkeys.shape[0]):
        _preset_row(rhead, col, rows.head)
        n = _dynamic_tree(law, roots, col, draft, v, dprog, depth, topk, cand, lay, rows)
        for b in range(budgets.shape[0]):
            bc[b] = min(budgets[b], n)
        select_by(n, est, dep, order, bc)
        accumulate(order, pos, dep, onpath, bc, acc_out, exp_out, dep_out, col)
