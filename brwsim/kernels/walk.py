"""Walking the target's sampled path: generation runs and distributions along real paths.

A call of a generation run builds a tree at its root, accepts X draft tokens and emits
one more; the next call's root is the node that path reaches after X + 1 tokens
(docs/design.md, idea 6). The path is the same one the tree kernels sample: at a node with
uniform U (purpose PATH) the child of rank r is taken iff cum_{r-1} < U <= cum_r; if U
exceeds the listed mass, the token is outside every tree and gets the next free rank.
"""

from __future__ import annotations

import math

import numpy as np

from brwsim.kernels import kernel, njit_cached
from brwsim.kernels.dist import (
    CTX_DEPTH,
    CTX_F,
    CTX_I,
    LEVEL_F,
    LEVEL_I,
    ROOT_DRAW,
    ROOT_PRESET,
    dist_init,
    dist_next,
)
from brwsim.kernels.rng import PATH, child_key, purpose_key, root_key, unit
from brwsim.kernels.aim import start_threshold
from brwsim.kernels.tree import grow_tree, new_workspace

_MAX_RANKS = 1 << 24


@kernel
def _sampled_rank(fpar, ipar, data, key, d, lf, li, head):
    """Rank of the target's token at the node of level ``d`` (next free rank if outside)."""
    u = unit(purpose_key(key, PATH), 0)
    cum = 0.0
    r = 0
    while r < _MAX_RANKS:
        lq = dist_next(fpar, ipar, data, key, d, lf, li, head)
        if lq < -745.0:                 # exhausted or no representable mass left
            return r
        cum += math.exp(lq)
        if u <= cum:
            return r
        r += 1
    return r


@kernel
def advance(law, key, mode, ci, cf, steps, lf, li, head):
    """Key and context of the node ``steps`` sampled tokens below the root ``key``.

    Uses levels 0 and 1 of the scratch arrays alternately. Returns (key, ctx_i, ctx_f).
    """
    fpar, ipar, data = law.fpar, law.ipar, law.data
    li[0, CTX_I] = ci
    lf[0, CTX_F] = cf
    dist_init(law, key, 0, lf, li, head, -np.inf, mode, 0)
    cur = 0
    for _ in range(steps):
        r = _sampled_rank(fpar, ipar, data, key, cur, lf, li, head)
        key = child_key(key, r)
        nxt = 1 - cur
        dist_init(law, key, nxt, lf, li, head, -np.inf, cur, r)
        cur = nxt
    return key, li[cur, CTX_I], lf[cur, CTX_F]


@njit_cached
def generation_run(law, head_cap, seed_key, run, budgets, max_depth, n_tokens, out, ctx_i_out,
                   ctx_f_out):
    """Optimal-tree calls until ``n_tokens`` tokens are produced; returns the number of calls.

    Trees are capped at ``max_depth`` (see ``tree.grow_tree``); a negative return is a
    ``grow_tree`` error code.

    Call c's root is where call c-1's sampled path arrived after X + 1 tokens; the first
    root is ``root_key(seed_key, run)`` with its context drawn from the stationary law.
    ``out`` (:class:`~brwsim.kernels.spec.Out`) holds one column per call (at most its
    width); ctx_*_out record each root's
    context (regime or depth index; latent value). A preset root's head row is carried
    along too (the recurrent state of ``charlstm``).
    """
    ws = new_workspace(budgets[budgets.shape[0] - 1], head_cap)
    lf = np.empty((2, LEVEL_F))
    li = np.empty((2, LEVEL_I), np.int64)
    head = np.empty((2, max(head_cap, 1)))
    key = root_key(seed_key, run)
    mode = ROOT_DRAW
    ci = 0
    cf = 0.0
    t = start_threshold(budgets[budgets.shape[0] - 1])
    produced = 0
    calls = 0
    while produced < n_tokens and calls < out.acc.shape[1]:
        v, t, ws = grow_tree(law, head_cap, key, mode, ci, cf, budgets, max_depth, t, ws, out,
                             calls)
        if v < 0:
            return v
        root = ws.levels                # level 0: the root's
        ci = root.li[0, CTX_I]
        cf = root.lf[0, CTX_F]
        ctx_i_out[calls] = ci
        ctx_f_out[calls] = cf
        x = out.acc[budgets.shape[0] - 1, calls]
        head[0, :] = root.head[0, :]    # the root's row: a family may keep its state there
        key, ci, cf = advance(law, key, ROOT_PRESET, ci, cf, x + 1, lf, li, head)
        root.head[0, :] = head[(x + 1) % 2, :]     # the new root's row (advance alternates rows)
        if int(law.cprog[0]) == CTX_DEPTH:
            ci = 0                      # depth counts from the new root
        mode = ROOT_PRESET
        produced += x + 1
        calls += 1
    return calls


@kernel
def path_distributions(law, key, steps, rows, h_out, m2_out, lf, li, head):
    """Along the sampled path from the root ``key``: each node's top ranks and moments.

    ``rows[j, :]`` gets the first ranks' probabilities of the j-th path node (zero padded),
    ``h_out[j]`` and ``m2_out[j]`` its entropy and second log-moment over all ranks (summed
    until the listed mass is exhausted or 1 - 1e-12 is reached). Uses levels 0 and 1.
    """
    fpar, ipar, data = law.fpar, law.ipar, law.data
    dist_init(law, key, 0, lf, li, head, -np.inf, ROOT_DRAW, 0)
    cur = 0
    k = rows.shape[1]
    for j in range(steps):
        u = unit(purpose_key(key, PATH), 0)
        cum = 0.0
        h = 0.0
        m2 = 0.0
        r = 0
        sampled = -1
        while r < _MAX_RANKS:
            lq = dist_next(fpar, ipar, data, key, cur, lf, li, head)
            if lq < -745.0:
                break
            q = math.exp(lq)
            if r < k:
                rows[j, r] = q
            h -= q * lq
            m2 += q * lq * lq
            cum += q
            if sampled < 0 and u <= cum:
                sampled = r
            r += 1
            if cum >= 1.0 - 1e-12 and sampled >= 0:
                break
        for rr in range(r, k):
            rows[j, rr] = 0.0
        if sampled < 0:
            sampled = r
        h_out[j] = h
        m2_out[j] = m2
        key = child_key(key, sampled)
        nxt = 1 - cur
        dist_init(law, key, nxt, lf, li, head, -np.inf, cur, sampled)
        cur = nxt
