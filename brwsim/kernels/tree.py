"""Optimal draft trees of one root: ``grow_tree`` and its workspace (docs/design.md, ideas 2-4).

:func:`grow_tree` runs threshold passes over one root (:mod:`brwsim.kernels.collect`) until
one holds P_max nodes at or below its threshold, then scores every budget's nested optimal
tree from it (:mod:`brwsim.kernels.select`). Each root's first pass aims at a tuned
multiple of P_max nodes from the last root's count (:mod:`brwsim.kernels.aim`); a short
pass of a closed-form family is continued from per-node records
(:func:`~brwsim.kernels.collect.resume`), others repeat it. A pass that is not continued
lowers its cut-off as it goes. The trees never depend on the thresholds.

Runs of i.i.d. Zipf laws with a spread of exponents (one component, P_max at least
:data:`brwsim.kernels.levels.LEVEL_MIN_P`) collect the same nodes level by level
(:func:`brwsim.kernels.levels.level_pass`), out of pre-order: a short pass is repeated,
not continued, and ties at a cut send the root back to the depth-first pass, as for a
continued pass.

A worker's buffers are one :class:`Workspace` (:func:`new_workspace`); :func:`simulate_chunk`
grows the trees of a run's iterations.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from brwsim.kernels import inline_njit, kernel, njit_cached
from brwsim.kernels.aim import AIM_REPEAT, AIM_RESUME, AIM_TIES, after_pass, aim, new_search, tune
from brwsim.kernels.collect import (ABORT, MAX_NODES, TOO_DEEP, Levels, Nodes, collect, lattice,
                                    resume, top_bound)
from brwsim.kernels.dist import CTX_F, CTX_I, LEVEL_F, LEVEL_I, ROOT_DRAW, closed_form
from brwsim.kernels.levels import level_buffers, level_family, level_pass
from brwsim.kernels.rng import root_key
from brwsim.kernels.select import score_buffers, score_nested, tie_cut

NO_DEPTH_CAP = 1 << 30            # max_depth of the unconstrained optimal tree
LEVEL_CELLS = 1 << 24             # head entries of a pass's first levels (128 MiB)
T_LIMIT = 800.0                   # -log p beyond this is 0 in float64: every node is found
HUGE_TIE = -1                     # grow_tree: more than MAX_NODES nodes tie at one position
TOO_FEW = -2                      # grow_tree: fewer than P nodes of positive probability


class Workspace(NamedTuple):
    """The buffers of one worker (:func:`new_workspace`): a pass's nodes (with their records)
    and levels, the selection's order scratch (``order``, int32), the bucket rows of
    :func:`~brwsim.kernels.select.score_nested` (``sel``), the level-by-level pass's buffers
    (``lv``) and the worker's flags (``flags[0]``: 1 once it has seen exact ties,
    ``flags[1]``: the aim of its next first pass, in P_max (0 until set), ``flags[2]``: the
    growth rate of counts with t, 1 until measured; see :func:`grow_tree`)."""

    nodes: Nodes
    order: np.ndarray
    levels: Levels
    sel: tuple
    flags: np.ndarray
    lv: tuple


@njit_cached
def node_buffers(cap):
    """Node arrays of a pass holding ``cap`` nodes: positions, depths, on-path flags, order."""
    return np.empty(cap), np.empty(cap, np.int32), np.empty(cap, np.int8), np.empty(cap, np.int32)


@njit_cached
def record_buffers(cap):
    """What :func:`resume` needs of each of ``cap`` nodes, and of the root (last slot):
    key, position of its first child not taken, that child's rank."""
    return np.empty(cap + 1, np.uint64), np.empty(cap + 1), np.empty(cap + 1, np.int32)


@njit_cached
def new_levels(n_levels, head_cap):
    """Per-level buffers of a pass: keys, positions, path state, family state, heads."""
    return (np.empty(n_levels, np.uint64), np.empty(n_levels), np.empty(n_levels, np.int8),
            np.empty(n_levels), np.empty(n_levels), np.empty((n_levels, LEVEL_F)),
            np.empty((n_levels, LEVEL_I), np.int64), np.empty((n_levels, max(head_cap, 1))))


@njit_cached
def walk_levels(n_levels, head_cap):
    """The :class:`~brwsim.kernels.collect.Levels` of a depth-first pass: ``n_levels`` levels."""
    keys, s_lev, on_lev, u_lev, c_lev, lf, li, head = new_levels(n_levels, head_cap)
    return Levels(np.empty(n_levels, np.int64), keys, s_lev, on_lev, u_lev, c_lev, lf, li, head)


@njit_cached
def new_nodes(cap):
    """The :class:`~brwsim.kernels.collect.Nodes` of a pass holding ``cap`` nodes."""
    nkey, nxt, nrk = record_buffers(cap)
    return Nodes(np.empty(cap), np.empty(cap, np.int32), np.empty(cap, np.int8), nkey, nxt, nrk)


@njit_cached
def wider_buffers(cap):
    """The node-sized buffers of a :class:`Workspace` for ``cap`` nodes (a pass's buffers
    widened for a tie): nodes, the order scratch, the scoring's and the level-by-level
    pass's buffers."""
    return new_nodes(cap), np.empty(cap, np.int32), score_buffers(cap), level_buffers(cap)


@njit_cached
def deeper_levels(levels, head_cap):
    """Twice as many levels as ``levels`` (a pass went deeper than they reach), the root's
    head row kept (a preset root may keep its state there)."""
    deeper = walk_levels(2 * levels.keys.shape[0], head_cap)
    root_row = levels.head[0]
    for j in range(root_row.shape[0]):      # (a slice assignment would compile numba's
        deeper.head[0, j] = root_row[j]     # long shape-mismatch message code)
    return deeper


@kernel
def first_levels(head_cap):
    """Levels a pass starts with: 256, fewer (at least 8) when a level's head row is so wide
    (a transformer's KV cache) that 256 of them would exceed LEVEL_CELLS entries."""
    return max(8, min(256, LEVEL_CELLS // max(head_cap, 1)))


@njit_cached
def new_workspace(p_max, head_cap):
    """The :class:`Workspace` of one worker: nodes for 6 P_max + 64 nodes and
    :func:`first_levels` levels (both grow on demand), flags as after a reset."""
    cap = 6 * p_max + 64
    flags = np.zeros(3)
    flags[2] = 1.0
    return Workspace(new_nodes(cap), np.empty(cap, np.int32),
                     walk_levels(first_levels(head_cap), head_cap), score_buffers(cap), flags,
                     level_buffers(cap))


@inline_njit
def grow_tree(law, head_cap, rkey, root_mode, root_ci, root_cf, budgets, max_depth, t, ws, out,
              col):
    """The optimal trees of one root for every budget, into column ``col`` of ``out``
    (:class:`~brwsim.kernels.spec.Out`), with the buffers of ``ws`` (:class:`Workspace`).

    The optimal tree among nodes of depth <= ``max_depth`` (NO_DEPTH_CAP: unconstrained);
    the restriction keeps trees prefix-closed, so it is still the top P by path probability.
    The threshold ``t`` is adapted between passes (it only changes the speed, never the
    result): each root's first pass aims at a tuned multiple of P_max nodes (:func:`aim`,
    :func:`tune`). For closed-form families with a drawn root a pass short of P_max
    nodes is continued (:func:`resume`), not repeated (a lazy family's level lists just
    the ranks above its cut-off, a contextual family's node needs its parent's level:
    they repeat it); a pass that is not continued lowers its cut-off once it holds P_max
    nodes (:func:`walk_pass`), and the next root then starts from the lowered value. A
    continued pass's nodes are no longer in pre-order, so when a budget's cut has more
    than one node in its tie zone (where pre-order breaks ties) the root is collected
    again in one pass at the final threshold, and the worker's later
    roots repeat short passes; families with exact ties (:func:`lattice`: lattices, a
    Zipf law shared by every node) never continue.
    With ``root_mode`` ROOT_PRESET the root's context is (root_ci, root_cf).
    Returns (nodes visited, next threshold, workspace), or visited = HUGE_TIE when more than
    MAX_NODES nodes tie at one position, TOO_FEW when fewer than P_max nodes within the
    depth cap have a positive path probability.
    """
    kinds, fpar, ipar, data, cprog = law.kinds, law.fpar, law.ipar, law.data, law.cprog
    # (the buffers' arrays are bound to names once, and again when rebound: each read of a
    # tuple's field in this kernel, which has the numba runtime, costs reference counts)
    nodes, order, levels, sel, flags, lv = ws
    pos, dep, onpath = nodes.pos, nodes.dep, nodes.onpath
    li, lf = levels.li, levels.lf
    acc_out, exp_out, dep_out = out
    p_max = budgets[budgets.shape[0] - 1]
    cut = p_max if p_max < max_depth else max_depth   # no top-P node is deeper than P
    closed = closed_form(kinds, cprog)
    if closed and flags[0] == 0.0 and lattice(kinds, fpar):
        flags[0] = 1.0
    # i.i.d. Zipf laws with a spread of exponents: passes level by level (kernels.levels),
    # not in pre-order, so neither continued nor lowered; a short pass is repeated
    level = root_mode == ROOT_DRAW and flags[0] == 0.0 and level_family(kinds, fpar, closed, p_max)
    continued = closed and root_mode == ROOT_DRAW and flags[0] == 0.0 and not level
    mode = AIM_TIES if flags[0] == 1.0 else (AIM_RESUME if continued else AIM_REPEAT)
    # a pass that is not continued lowers its cut-off as it goes (walk_pass); its overshoot is
    # then cheap, so the next root is aimed as for continuous counts even where some
    # positions tie (a lazy family's tail), though not on a lattice (counts in steps)
    p_stop = 0 if mode == AIM_RESUME or level else p_max
    aim_mode = AIM_REPEAT if p_stop > 0 and not closed else mode
    search = new_search()
    cap = pos.shape[0]
    top = top_bound(kinds, fpar, closed)
    visited = 0
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
            n = level_pass(fpar, ipar, data, rkey, tie_cut(t), cap, cut, top, pos, dep, onpath, lv)
            filled = 0              # (an overflowing level is not written)
        elif fresh:
            li[0, CTX_I] = root_ci
            lf[0, CTX_F] = root_cf
            n0 = 0
            n, fr, fu, fc, low = collect(law, rkey, root_mode, t, cut, nodes, levels, p_stop, order)
            filled = cap
            lowered = low < np.inf      # the pass lowered its cut-off: P_max nodes lie below
            if low < t:
                t = low
        else:
            n0 = n
            resumed = True
            lowered = False
            n, fr, fu, fc = resume(law, t, cut, n, (fr, fu, fc), nodes, levels)
            filled = cap
        if n == TOO_DEEP:
            levels = deeper_levels(levels, head_cap)
            li, lf = levels.li, levels.lf
            fresh = True
            resumed = False
            continue
        visited += cap - n0 if n == ABORT else n - n0
        done, t, widen, search = after_pass(pos, dep, order, n, filled, p_max, t, mode, flags,
                                            search)
        fresh = n == ABORT or not continued
        if fresh and not level:
            resumed = False
        if widen:                   # a huge tie at one position: widen the buffers
            if 2 * cap > MAX_NODES:
                return HUGE_TIE, t, Workspace(nodes, order, levels, sel, flags, lv)   # (an error)
            cap *= 2
            nodes, order, sel, lv = wider_buffers(cap)
            pos, dep, onpath = nodes.pos, nodes.dep, nodes.onpath
        if done:
            zone = score_nested(n, pos, dep, onpath, order, sel, budgets, acc_out, exp_out,
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
            return TOO_FEW, t, Workspace(nodes, order, levels, sel, flags, lv)     # (an error)
    flags[1] = tune(flags[1], search.short, aim_mode)
    # (a lowered pass's threshold is where P_max nodes lie, whatever ties it holds)
    return (visited, aim(p_max if lowered else n, p_max, t, aim_mode, flags[1], flags[2]),
            Workspace(nodes, order, levels, sel, flags, lv))


def pass_callees(ws, head_cap, budgets, out):
    """The kernels :func:`grow_tree` calls once a pass is done (:func:`score_nested`, the
    largest; :func:`after_pass`; :func:`deeper_levels`; :func:`wider_buffers`), each with
    the argument types of its call there, for a run's workspace ``ws``, ``head_cap``,
    ``budgets`` and outputs ``out``: to compile them in another process ahead of the tree
    kernel (:mod:`brwsim.beside`), which then loads them. A test checks that these are
    grow_tree's types (a mismatch costs a second compile, nothing else)."""
    from numba import typeof, types

    nodes, i64 = ws.nodes, types.int64
    pos, dep, order = typeof(nodes.pos), typeof(nodes.dep), typeof(ws.order)
    return [(score_nested, (i64, pos, dep, typeof(nodes.onpath), order, typeof(ws.sel),
                            typeof(budgets), typeof(out.acc), typeof(out.exp), typeof(out.dep),
                            i64, types.boolean)),
            (after_pass, (pos, dep, order, i64, i64, typeof(budgets).dtype, types.float64, i64,
                          typeof(ws.flags), typeof(new_search()))),
            (deeper_levels, (typeof(ws.levels), typeof(head_cap))),
            (wider_buffers, (i64,))]


@njit_cached
def simulate_chunk(law, head_cap, seed_key, it0, n_it, budgets, max_depth, t_start, out, ws):
    """Optimal trees of iterations it0 .. it0 + n_it - 1 (roots drawn from the stationary law).

    ``ws`` is a :func:`new_workspace` of this ``head_cap`` for a largest budget of at least
    budgets[-1], used before or not: its buffers are reused, so a call touches no fresh
    memory (first touches of fresh pages are costly), and its flags are reset, so what it
    learnt of earlier calls' thresholds and ties is not carried over: the passes, and the
    nodes visited, depend only on this call's arguments (the trees never depend on them).
    Returns (nodes visited by all passes, final threshold, the workspace, which may have
    grown), or (HUGE_TIE or TOO_FEW, t, ws).
    """
    flags = ws.flags
    flags[0] = 0.0
    flags[1] = 0.0
    flags[2] = 1.0
    t = t_start
    visited = 0
    for col in range(n_it):
        v, t, ws = grow_tree(law, head_cap, root_key(seed_key, it0 + col), ROOT_DRAW, 0, 0.0,
                             budgets, max_depth, t, ws, out, col)
        if v < 0:
            return v, t, ws
        visited += v
    return visited, t, ws

