"""Forests: B independent roots (the requests of a batch) sharing one budget.

The optimal allocation of P draft nodes over a batch is the top P by path probability
over the union of the B trees (each request's accepted tokens are its own path's nodes
in its tree, so E[sum X_r | forest] = sum of p(v) over the forest). One threshold pass
walks every root at the same threshold t, the roots' nodes concatenated in request
order; the nested selection (:mod:`brwsim.kernels.select`) then runs unchanged on the
concatenation, so ties go to the smaller S, then the smaller depth, then the smaller
request index, then the lexicographically smaller rank path. The equal split gives
request r its own optimal tree of P_r = floor(P / B) + (r < P mod B) nodes, read off the
same pass when root r has at least P_r nodes below t, else from its own single-root pass.
"""

from __future__ import annotations

import numpy as np

from brwsim.kernels import kernel, njit_cached
from brwsim.kernels.aim import (AIM_REPEAT, AIM_TIES, after_pass, aim, new_search, start_threshold,
                               tune)
from brwsim.kernels.collect import ABORT, MAX_NODES, TOO_DEEP, Nodes, collect
from brwsim.kernels.dist import CTX_F, CTX_I, ROOT_DRAW
from brwsim.kernels.rng import mix, root_key
from brwsim.kernels.select import score_nested
from brwsim.kernels.spec import Out
from brwsim.kernels.tree import (HUGE_TIE, T_LIMIT, TOO_FEW, Workspace, deeper_levels, grow_tree,
                                 new_workspace, wider_buffers)

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
def grow_forest(law, head_cap, rkeys, budgets, max_depth, t, ws, starts, out, col):
    """The optimal allocations of every budget over the roots ``rkeys``, into column ``col``
    of ``out`` (:class:`~brwsim.kernels.spec.Out`).

    Outputs are forest totals (accepted nodes on the requests' sampled paths, E[sum X | F])
    and the deepest node of the forest. ``starts`` (len(rkeys) + 1) receives each root's
    first node in the concatenated pass, for :func:`split_from_pass`. Returns (nodes
    visited, next threshold, workspace, nodes of the final pass) or a negative status as
    :func:`grow_tree`.
    """
    nodes, order, levels, sel, flags, lv = ws
    n_roots = rkeys.shape[0]
    p_max = budgets[budgets.shape[0] - 1]
    cut = p_max if p_max < max_depth else max_depth
    cap = nodes.pos.shape[0]
    mode = AIM_TIES if flags[0] == 1.0 else AIM_REPEAT
    search = new_search()
    visited = 0
    while True:
        n = 0
        status = 0
        for r in range(n_roots):
            starts[r] = n
            levels.li[0, CTX_I] = 0
            levels.lf[0, CTX_F] = 0.0
            rest = Nodes(nodes.pos[n:], nodes.dep[n:], nodes.onpath[n:], nodes.nkey[n:],
                         nodes.nxt[n:], nodes.nrk[n:])      # root r's nodes from slot n on
            k = collect(law, rkeys[r], ROOT_DRAW, t, cut, rest, levels, 0, order)[0]
            if k < 0:
                status = k
                break
            n += k
        starts[n_roots] = n
        if status == TOO_DEEP:
            levels = deeper_levels(levels, head_cap)
            continue
        if status == ABORT:
            n = ABORT
        visited += cap if n == ABORT else n
        done, t, widen, search = after_pass(nodes.pos, nodes.dep, order, n, cap, p_max, t, mode,
                                            flags, search)
        if widen:
            if 2 * cap > MAX_NODES:
                return HUGE_TIE, t, Workspace(nodes, order, levels, sel, flags, lv), 0  # (error)
            cap *= 2
            nodes, order, sel, lv = wider_buffers(cap)
        if done:
            break
        if t > T_LIMIT:
            return TOO_FEW, t, Workspace(nodes, order, levels, sel, flags, lv), 0   # (error)
    if score_nested(n, nodes.pos, nodes.dep, nodes.onpath, order, sel, budgets, out.acc,
                    out.exp, out.dep, col, flags[0] == 1.0)[1] > 1:
        flags[0] = 1.0              # exact ties: aim as for them (see grow_tree)
    flags[1] = tune(flags[1], search.short, mode)
    return (visited, aim(n, p_max, t, mode, flags[1], flags[2]),
            Workspace(nodes, order, levels, sel, flags, lv), n)


@njit_cached
def split_from_pass(law, head_cap, rkeys, sbudgets, max_depth, ws, starts, ws1, t1, tmp, out,
                    col):
    """Equal split: each request's own optimal tree of sbudgets[r] nodes, summed into column
    ``col`` of ``out`` (accepted and expected only).

    Reads root r's nodes from the forest pass in ``ws`` (segment starts[r]:starts[r+1])
    when it holds at least sbudgets[r, -1] of them; otherwise grows root r alone with the
    workspace ``ws1`` and threshold ``t1``; ``tmp`` (an :class:`~brwsim.kernels.spec.Out`
    of one column) holds one request's scores. Returns (nodes visited by extra passes, t1,
    ws1) or a negative status.
    """
    pos, dep, onpath = ws.nodes.pos, ws.nodes.dep, ws.nodes.onpath
    order, sel, flags = ws.order, ws.sel, ws.flags
    tmp_acc, tmp_exp, tmp_dep = tmp
    acc_out, exp_out = out.acc, out.exp
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
            score_nested(e - s, pos[s:e], dep[s:e], onpath[s:e], order, sel, sbudgets[r], tmp_acc,
                          tmp_exp, tmp_dep, 0, flags[0] == 1.0)
        else:
            if not t1 == t1:
                t1 = start_threshold(need)
            v, t1, ws1 = grow_tree(law, head_cap, rkeys[r], ROOT_DRAW, 0, 0.0, sbudgets[r],
                                   max_depth, t1, ws1, tmp, 0)
            if v < 0:
                return v, t1, ws1
            visited += v
        for b in range(m):
            acc_out[b, col] += tmp_acc[b, 0]
            exp_out[b, col] += tmp_exp[b, 0]
    return visited, t1, ws1


@njit_cached
def forest_chunk(law, head_cap, seed_key, it0, n_it, batch, budgets, max_depth, t_start, split,
                 out, out_split):
    """Forests of ``batch`` roots for iterations it0 .. it0 + n_it - 1 into ``out``, with the
    equal split into ``out_split`` (:class:`~brwsim.kernels.spec.Out`; its depth unwritten).

    Returns (nodes visited by the shared passes, nodes visited by the split's extra
    passes, final threshold), or a negative status in the first slot. With ``split``
    False the split outputs are left untouched.
    """
    p_max = budgets[budgets.shape[0] - 1]
    ws = new_workspace(p_max, head_cap)
    sb = split_budgets(budgets, batch)
    ws1 = new_workspace(max(sb[0, sb.shape[1] - 1], 1), head_cap)
    m = budgets.shape[0]
    tmp = Out(np.empty((m, 1), np.int32), np.empty((m, 1)), np.empty((m, 1), np.int32))
    rkeys = np.empty(batch, np.uint64)
    starts = np.empty(batch + 1, np.int64)
    t = t_start
    t1 = np.nan
    visited = 0
    visited1 = 0
    for col in range(n_it):
        for r in range(batch):
            rkeys[r] = request_key(seed_key, it0 + col, r)
        v, t, ws, n = grow_forest(law, head_cap, rkeys, budgets, max_depth, t, ws, starts, out, col)
        if v < 0:
            return v, 0, t
        visited += v
        if split:
            v1, t1, ws1 = split_from_pass(law, head_cap, rkeys, sb, max_depth, ws, starts, ws1, t1,
                                          tmp, out_split, col)
            if v1 < 0:
                return v1, 0, t
            visited1 += v1
    return visited, visited1, t
