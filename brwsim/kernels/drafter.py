"""A second transformer checkpoint as the drafter: its trees, scored on the target's truth.

The environment is a transformer family (one TRANSFORMER component, see
:mod:`brwsim.kernels.transformer`); the draft model is another checkpoint's weight block
(``ddata``, offset 0) of the same vocabulary. Every tree node keeps two level rows of the
transformer row layout: the target's (``head[d]``, set up by ``policies._init_node``
without a cut-off, so all V ranks are listed with their tokens) and the draft's
(``dhead[d]``, set up by :func:`~brwsim.kernels.transformer.transformer_init` on the
draft's weights over the same context: the root's tokens copied from the target's row,
then one token per level, with the target's window and carry). The draft lists its
children by its own probability (rank k, token ``dhead[d, V + k]``); ``inv[d, token]``
is that token's rank among the target's children, which names the node (its key is
``child_key(parent key, target rank)``, as in every other policy and the optimal pass)
and gives its true log-probability ``head[d, rank]``. The sampled target path is the
optimal pass's: the child of target rank r is on it iff cum_{r-1} < U <= cum_r.

Three shapes, each scored by ``select.accumulate`` on TRUE path probabilities:

* :func:`best_chunk`: best-first by the draft's path log-probability, as a threshold
  pass (``aim.after_pass``) in depth-first pre-order with children in the draft's rank
  order; the draft's children are sorted, so a node's scan stops at its first child above
  the threshold. The target's row of a node is set up only when the node gets a child.
* :func:`chain_chunk`: the draft's greedy chain (its rank-0 child at every level).
* :func:`dynamic_chunk`: EAGLE-2/3 layers (``policies._dynamic_tree``) on the draft's
  path values.
"""

from __future__ import annotations

import math

import numpy as np

from brwsim.kernels import kernel, njit_cached
from brwsim.kernels.dist import CTX_F, CTX_I, DATA_OFF, LEVEL_F, LEVEL_I
from brwsim.kernels.policies import NEG_INF, _init_node, _layer_top, _preset_row
from brwsim.kernels.rng import PATH, child_key, purpose_key, unit
from brwsim.kernels.netinit import net_init
from brwsim.kernels.transformer import META, TF_CARRY, TF_SLOTS, TF_WINDOW
from brwsim.kernels.aim import AIM_TIES, after_pass, aim
from brwsim.kernels.collect import ABORT, MAX_NODES, TOO_DEEP
from brwsim.kernels.select import accumulate, select_by, tie_cut
from brwsim.kernels.tree import first_levels, node_buffers


# ---------------------------------------------------------------------------------------
# One node's two rows

@kernel
def _root(kinds, cw, fpar, ipar, data, cprog, rkey, rmode, rci, rcf, ddata, dbeta, v,
          min_dlogq, dprog, lf, li, head, dhead):
    """Both rows of the root: the target's (drawn or preset context), then the draft's
    over the same tokens (``dprog``: a one-window context program). Returns the draft's
    listed count (ranks with log-probability >= ``min_dlogq``)."""
    li[0, CTX_I] = rci
    lf[0, CTX_F] = rcf
    _init_node(kinds, cw, fpar, ipar, data, cprog, rkey, 0, lf, li, head, rmode, 0)
    mm = 2 * v
    n = int(head[0, mm])
    dprog[2] = n
    for j in range(n):
        dprog[5 + j] = head[0, mm + META + j]
    nd = net_init(False, ddata, 0, dbeta, fpar[0, TF_CARRY], fpar[0, TF_WINDOW], ipar[0, TF_SLOTS],
                  dprog, 0, -1, True, 0, 0, min_dlogq, dhead, 0)
    dhead[0, mm + 1] = head[0, mm + 1]        # tokens carried past the window (generation)
    return nd


@kernel
def _draft_child(fpar, ipar, ddata, dbeta, dprog, d, pd, k, n_list, min_dlogq, dhead):
    """The draft's row of the child of draft rank ``k`` of level ``pd``; its listed count."""
    return net_init(False, ddata, 0, dbeta, fpar[0, TF_CARRY], fpar[0, TF_WINDOW], ipar[0, TF_SLOTS],
                    dprog, d, pd, False, k, n_list, min_dlogq, dhead, 0)


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
    """Per-level state: target rows (lf, li, head), draft rows, the token -> rank map."""
    return (np.empty((n_levels, LEVEL_F)), np.empty((n_levels, LEVEL_I), np.int64),
            np.empty((n_levels, max(head_cap, 1))), np.empty((n_levels, dcap)),
            np.empty((n_levels, v), np.int64))


@njit_cached
def _best_levels(n_levels, head_cap, dcap, v):
    lf, li, head, dhead, inv = _rows(n_levels, head_cap, dcap, v)
    return (np.empty(n_levels, np.uint64), np.empty(n_levels), np.empty(n_levels),
            np.empty(n_levels, np.int8), np.empty(n_levels, np.int64),
            np.empty(n_levels, np.int64), np.empty(n_levels, np.int64),
            np.empty(n_levels, np.int64), np.empty(n_levels, np.int8), lf, li, head, dhead, inv)


# ---------------------------------------------------------------------------------------
# Best-first

@kernel
def _best_collect(kinds, cw, fpar, ipar, data, cprog, rkey, rmode, rci, rcf, ddata, dbeta, v,
                  t, cap, dmax, dprog, est, pos, dep, onpath, keys, s_lev, t_lev, on_lev, p_lev,
                  k_lev, r_lev, dn, ready, fwd, lf, li, head, dhead, inv):
    """Nodes with draft position <= tie_cut(t), in pre-order (children in draft rank order).

    ``est`` the draft's position -log q_draft(path), ``pos`` the true one; returns the
    count, ``ABORT`` or ``TOO_DEEP`` as ``collect.collect``. Nodes deeper than ``dmax``
    (the largest budget) are never collected. ``fwd[0]`` counts the draft's forward
    set-ups, ``fwd[1]`` the target's (both added to).
    """
    n_levels = keys.shape[0]
    t = tie_cut(t)
    keys[0] = rkey
    s_lev[0] = 0.0
    t_lev[0] = 0.0
    on_lev[0] = 1
    k_lev[0] = 0
    dn[0] = _root(kinds, cw, fpar, ipar, data, cprog, rkey, rmode, rci, rcf, ddata, dbeta, v,
                  -t, dprog, lf, li, head, dhead)
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
            _init_node(kinds, cw, fpar, ipar, data, cprog, keys[d], d, lf, li, head, d - 1,
                       r_lev[d])
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
        nd = _draft_child(fpar, ipar, ddata, dbeta, dprog, d + 1, d, k, dn[d], sc - t, dhead)
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
def best_chunk(kinds, cw, fpar, ipar, data, cprog, head_cap, rkeys, rmode, rci, rcf, rhead,
               ddata, dbeta, dcap, budgets, t_start, acc_out, exp_out, dep_out):
    """Best-first trees by the draft's path probability below the roots ``rkeys``.

    Roots as ``policies.static_chunk``; the tree of budget P is the first P collected
    nodes by (draft position with ties, depth, pre-order), nested across budgets.
    Returns (nodes collected, draft forward set-ups, target forward set-ups, threshold);
    nodes = -1 when more than MAX_NODES nodes tie.
    """
    v = int(data[ipar[0, DATA_OFF] + 1])
    p_max = budgets[budgets.shape[0] - 1]
    cap = 6 * p_max + 64
    est = np.empty(cap)
    pos, dep, onpath, order = node_buffers(cap)
    dprog = np.zeros(5 + ipar[0, TF_SLOTS])
    n_levels = min(first_levels(head_cap + dcap), p_max + 1)
    (keys, s_lev, t_lev, on_lev, p_lev, k_lev, r_lev, dn, ready,
     lf, li, head, dhead, inv) = _best_levels(n_levels, head_cap, dcap, v)
    forwards = np.zeros(2, np.int64)
    t = t_start
    visited = 0
    unit_rate = np.ones(3)          # after_pass's flags: growth rate 1, not learnt
    for col in range(rkeys.shape[0]):
        t_lo = -np.inf
        t_hi = np.inf
        while True:
            _preset_row(rhead, col, head)
            n = _best_collect(kinds, cw, fpar, ipar, data, cprog, rkeys[col], rmode, rci[col],
                              rcf[col], ddata, dbeta, v, t, cap, p_max, dprog, est, pos, dep,
                              onpath, keys, s_lev, t_lev, on_lev, p_lev, k_lev, r_lev, dn, ready,
                              forwards, lf, li, head, dhead, inv)
            if n == TOO_DEEP:
                n_levels = min(2 * n_levels, p_max + 1)
                (keys, s_lev, t_lev, on_lev, p_lev, k_lev, r_lev, dn, ready,
                 lf, li, head, dhead, inv) = _best_levels(n_levels, head_cap, dcap, v)
                continue
            visited += cap if n == ABORT else n
            done, t, t_lo, t_hi, widen = after_pass(est, dep, order, n, cap, p_max, t, t_lo, t_hi,
                                                    AIM_TIES, unit_rate, 1, -1, t, False)[:5]
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
def chain_chunk(kinds, cw, fpar, ipar, data, cprog, head_cap, rkeys, rmode, rci, rcf, rhead,
                ddata, dbeta, dcap, budgets, acc_out, exp_out, dep_out):
    """The draft's greedy chain (its most likely token at every level) below each root.

    Two alternating rows per model; the chain of budget P is its first P nodes.
    """
    v = int(data[ipar[0, DATA_OFF] + 1])
    p_max = budgets[budgets.shape[0] - 1]
    pos, dep, onpath, order = node_buffers(p_max)
    dprog = np.zeros(5 + ipar[0, TF_SLOTS])
    lf, li, head, dhead, inv = _rows(2, head_cap, dcap, v)
    p_lev = np.empty(2, np.int64)
    for col in range(rkeys.shape[0]):
        _preset_row(rhead, col, head)
        key = rkeys[col]
        nd = _root(kinds, cw, fpar, ipar, data, cprog, key, rmode, rci[col], rcf[col], ddata,
                   dbeta, v, NEG_INF, dprog, lf, li, head, dhead)
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
                _init_node(kinds, cw, fpar, ipar, data, cprog, key, 1 - a, lf, li, head, a, r)
                nd = _draft_child(fpar, ipar, ddata, dbeta, dprog, 1 - a, a, 0, nd, NEG_INF,
                                  dhead)
                _target_view(v, key, 1 - a, on, li, head, inv, p_lev)
        bc = np.minimum(budgets, n)
        accumulate(order, pos, dep, onpath, bc, acc_out, exp_out, dep_out, col)


# ---------------------------------------------------------------------------------------
# Dynamic (EAGLE-2/3)

@kernel
def _expand(v, key, row, pest, ppos, pdep, k, est, pos, dep, onpath, ckey, crank, cdrank,
            crow, n, dn, head, dhead, inv, p_lev, on):
    """Append the draft's top-``k`` children of the node at ``row`` as candidates n, ..."""
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
def _dynamic_tree(kinds, cw, fpar, ipar, data, cprog, rkey, rmode, rci, rcf, ddata, dbeta, v,
                  depth, topk, dprog, est, pos, dep, onpath, ckey, crank, cdrank, crow, lay, dn,
                  p_lev, lf, li, head, dhead, inv):
    """All candidates of the EAGLE layers below ``rkey`` by the draft's path values, in
    generation order; returns their count. Row 0 is the root, rows 1.. the expanded nodes."""
    dn[0] = _root(kinds, cw, fpar, ipar, data, cprog, rkey, rmode, rci, rcf, ddata, dbeta, v,
                  NEG_INF, dprog, lf, li, head, dhead)
    _target_view(v, rkey, 0, 1, li, head, inv, p_lev)
    n = _expand(v, rkey, 0, 0.0, 0.0, np.int64(0), topk, est, pos, dep, onpath, ckey, crank,
                cdrank, crow, 0, dn, head, dhead, inv, p_lev, np.int64(1))
    start = 0
    rows = 1
    for _layer in range(1, depth):
        kk = _layer_top(lay, start, n, topk, est, dep)
        if kk == 0:
            break
        start = n
        for j in range(kk):
            c = lay[j]
            _init_node(kinds, cw, fpar, ipar, data, cprog, ckey[c], rows, lf, li, head, crow[c],
                       crank[c])
            dn[rows] = _draft_child(fpar, ipar, ddata, dbeta, dprog, rows, crow[c], cdrank[c],
                                    dn[crow[c]], NEG_INF, dhead)
            on = np.int64(onpath[c])
            _target_view(v, ckey[c], rows, on, li, head, inv, p_lev)
            n = _expand(v, ckey[c], rows, est[c], pos[c], np.int64(dep[c]), topk, est, pos, dep,
                        onpath, ckey, crank, cdrank, crow, n, dn, head, dhead, inv, p_lev, on)
            rows += 1
    return n


@njit_cached
def dynamic_chunk(kinds, cw, fpar, ipar, data, cprog, head_cap, rkeys, rmode, rci, rcf, rhead,
                  ddata, dbeta, dcap, depth, topk, budgets, acc_out, exp_out, dep_out):
    """EAGLE-2/3 trees by the draft's path values below the roots ``rkeys``, scored.

    The tree of budget P is the first P candidates by (draft path value, depth, generation
    order); ``budgets`` is non-decreasing, already capped at the policy's ``total``.
    """
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
    lf, li, head, dhead, inv = _rows(n_rows, head_cap, dcap, v)
    dn = np.empty(n_rows, np.int64)
    p_lev = np.empty(n_rows, np.int64)
    bc = np.empty_like(budgets)
    for col in range(rkeys.shape[0]):
        _preset_row(rhead, col, head)
        n = _dynamic_tree(kinds, cw, fpar, ipar, data, cprog, rkeys[col], rmode, rci[col],
                          rcf[col], ddata, dbeta, v, depth, topk, dprog, est, pos, dep, onpath,
                          ckey, crank, cdrank, crow, lay, dn, p_lev, lf, li, head, dhead, inv)
        for b in range(budgets.shape[0]):
            bc[b] = min(budgets[b], n)
        select_by(n, est, dep, order, bc)
        accumulate(order, pos, dep, onpath, bc, acc_out, exp_out, dep_out, col)
