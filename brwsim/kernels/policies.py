"""Drafting-policy kernels: the tree a drafter builds, scored on the true environment.

Every kernel here reads the environment the optimal pass reads (same root keys, node keys,
DIST and PATH purposes; :mod:`brwsim.kernels.tree`), so a policy and the optimal tree are
compared on common random numbers: the same node distributions and the same sampled target
path (the child of rank r is on the path iff cum_{r-1} < U <= cum_r, cumulative sums of
the true probabilities taken in rank order, exactly as :func:`collect.collect` sums them).

Three builders, one scorer:

* :func:`static_chunk`: a fixed shape (chain, k-ary, expansion, Sequoia) given as pre-order
  arrays (depth, rank within the parent, leaf flag) and a priority order for nested budgets,
  walked with a level stack like :func:`collect.collect`.
* :func:`dynamic_chunk`: EAGLE-2/3 layers (top-k of the newest layer expanded into top-k
  children each), then the global top nodes by path value.
* :func:`noisy_chunk`: best-first by a drafter's *estimated* path probability, as a
  threshold pass over the estimated positions (the estimated tree is not sorted by rank).

Per budget, ``select.accumulate`` scores the first ``budgets[b]`` nodes of a priority order:
accepted count, E[X | T] = sum of TRUE path probabilities in exact two-limb fixed point
(independent of the order of addition), and depth. ``select.select_nested`` is
``select_by`` then ``accumulate`` with the positions as both key and value; the noisy
policy selects by estimate and scores by truth.

Environment access goes through :func:`_init_node` and :func:`_next_logq` only: every
node is set up without a cut-off (a policy may use any rank), with its parent's level as
its context.

Every chunk kernel takes ``(law, head_cap, roots, <its own parameters>, budgets, out)``:
the family's :class:`~brwsim.kernels.spec.Law`, the width of a level's head, the chunk's
:class:`~brwsim.kernels.spec.Roots` and its :class:`~brwsim.kernels.spec.Out` (column i
for root i). The buffers a kernel allocates travel to its helpers as the named tuples
below (:class:`StaticLevels`, :class:`EagleCands`, :class:`EagleRows`,
:class:`NoisyLevels`, :class:`Collected`, :class:`Noise`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from brwsim.kernels import kernel, njit_cached
from brwsim.kernels.dist import CTX_F, CTX_I, LEVEL_F, LEVEL_I, dist_init, dist_next
from brwsim.kernels.rng import PATH, child_key, normal, purpose_key, unit
from brwsim.kernels.aim import AIM_TIES, after_pass, aim, bracket_search, new_search
from brwsim.kernels.collect import ABORT, MAX_NODES, TOO_DEEP
from brwsim.kernels.select import accumulate, before, select, select_by, select_nested, tie_cut
from brwsim.kernels.tree import first_levels, new_levels, node_buffers

# Purpose of the drafter's noise at a node (next 64 bits of pi after rng.ROOT).
NOISE = np.uint64(0x452821E638D01377)
NEG_INF = -np.inf
HEAD_K = 64          # ranks of a node the noisy drafter scores individually
_MASS_EPS = 1e-13    # 1 - (sum of <= HEAD_K probabilities) below this is rounding noise


class StaticLevels(NamedTuple):
    """A static shape's walk, level d for the last visited node of depth d: its key
    (``keys``), true position (``s_lev``), path state (``on_lev``: 0 off the path, 1
    searching its sampled child, 2 found), path uniform and probability of the ranks
    generated (``u_lev``, ``c_lev``), next rank to generate (``r_lev``), sampled child's
    rank once found (``p_lev``) and its distribution's level (``lf``, ``li``, ``head``:
    :mod:`brwsim.kernels.dist`)."""

    keys: np.ndarray
    s_lev: np.ndarray
    on_lev: np.ndarray
    u_lev: np.ndarray
    c_lev: np.ndarray
    r_lev: np.ndarray
    p_lev: np.ndarray
    lf: np.ndarray
    li: np.ndarray
    head: np.ndarray


class EagleCands(NamedTuple):
    """EAGLE candidates in generation order, candidate i in slot i: true position
    -log q(path) (``pos``), depth (``dep``, int32), whether it is on the sampled path
    (``onpath``, int8), key (``ckey``), rank among its parent's children (``crank``) and
    its parent's level row (``crow``)."""

    pos: np.ndarray
    dep: np.ndarray
    onpath: np.ndarray
    ckey: np.ndarray
    crank: np.ndarray
    crow: np.ndarray


class EagleRows(NamedTuple):
    """The distributions' levels (``lf``, ``li``, ``head``: :mod:`brwsim.kernels.dist`) of
    an EAGLE tree's expanded nodes, one row each: row 0 the root, then expansion order."""

    lf: np.ndarray
    li: np.ndarray
    head: np.ndarray


class Noise(NamedTuple):
    """The noisy drafter: noise scale at depth 1 (``sigma``), its growth with depth
    (``gamma``), the exponent of the true probabilities (``beta`` = 1 / T), whether the
    estimates are the truth (``exact``: sigma 0 and beta 1) and the head ranks it scores
    individually (``kh``)."""

    sigma: float
    gamma: float
    beta: float
    exact: bool
    kh: int


class Collected(NamedTuple):
    """Nodes of a best-first pass by a drafter's estimate, node i in slot i, in pre-order:
    estimated position (``est``), true position -log q(path) (``pos``), depth (``dep``,
    int32) and whether it is on the sampled path (``onpath``, int8). A pass holds at most
    ``est.shape[0]`` nodes."""

    est: np.ndarray
    pos: np.ndarray
    dep: np.ndarray
    onpath: np.ndarray


class NoisyLevels(NamedTuple):
    """The noisy drafter's walk, level d for the node of depth d it stands on: its key
    (``keys``), estimated and true positions (``s_lev``, ``t_lev``), path state (``on_lev``
    as in :class:`StaticLevels`), path uniform and probability of the ranks read
    (``u_lev``, ``c_lev``), sampled child's rank once found (``p_lev``), next rank to scan
    (``r_lev``), ranks buffered (``g_lev``), the tail's estimate offset (``z_lev``), the
    largest head estimate (``h_lev``), the buffered true log q of ranks 0..kh (``lqb``),
    the head's estimates (``leb``) and its distribution's level (``lf``, ``li``, ``head``)."""

    keys: np.ndarray
    s_lev: np.ndarray
    t_lev: np.ndarray
    on_lev: np.ndarray
    u_lev: np.ndarray
    c_lev: np.ndarray
    p_lev: np.ndarray
    r_lev: np.ndarray
    g_lev: np.ndarray
    z_lev: np.ndarray
    h_lev: np.ndarray
    lqb: np.ndarray
    leb: np.ndarray
    lf: np.ndarray
    li: np.ndarray
    head: np.ndarray


# ---------------------------------------------------------------------------------------
# Environment access (the only calls into brwsim.kernels.dist)

@kernel
def _init_node(law, key, row, lf, li, head, prow, rank):
    """Set up level ``row`` for the node ``key``, child of rank ``rank`` of level ``prow``.

    ``prow`` is the root's context mode (ROOT_DRAW or ROOT_PRESET) for a root. No cut-off:
    a policy may ask for any rank.
    """
    dist_init(law, key, row, lf, li, head, NEG_INF, prow, rank)


@kernel
def _preset_row(rhead, col, head):
    """Copy root ``col``'s preset head row into level 0 (a generation run's recurrent state).

    ``rhead`` has one row per root, or none (no family state to carry).
    """
    if col < rhead.shape[0]:
        for j in range(min(rhead.shape[1], head.shape[1])):
            head[0, j] = rhead[col, j]


@kernel
def _next_logq(fpar, ipar, data, key, row, lf, li, head):
    """True log-probability of the next rank of level ``row`` (-inf once exhausted)."""
    return dist_next(fpar, ipar, data, key, row, lf, li, head)


# ---------------------------------------------------------------------------------------
# Scoring

# ---------------------------------------------------------------------------------------
# Static shapes

@kernel
def _static_tree(law, roots, col, sdep, srank, sleaf, pos, dep, onpath, lev):
    """Positions, depths and path flags of a pre-order shape below root ``col`` of ``roots``.

    Level d of ``lev`` (:class:`StaticLevels`) holds the last visited node of depth d;
    ``r_lev[d]`` is its next rank to generate, ``on_lev[d]`` 0 off the path, 1 on it
    (sampled child not yet found), 2 found (``p_lev[d]`` its rank). A child of probability
    0 (past the vocabulary) gets S = inf.
    """
    fpar, ipar, data = law.fpar, law.ipar, law.data
    keys, s_lev, on_lev, u_lev, c_lev, r_lev, p_lev, lf, li, head = lev
    rkey = roots.keys[col]
    keys[0] = rkey
    s_lev[0] = 0.0
    on_lev[0] = 1
    u_lev[0] = unit(purpose_key(rkey, PATH), 0)
    c_lev[0] = 0.0
    r_lev[0] = 0
    li[0, CTX_I] = roots.ci[col]
    lf[0, CTX_F] = roots.cf[col]
    _init_node(law, rkey, 0, lf, li, head, roots.mode, 0)
    for i in range(sdep.shape[0]):
        d = sdep[i]
        p = d - 1
        r = srank[i]
        lq = NEG_INF
        if s_lev[p] < np.inf:
            while r_lev[p] <= r:
                lq = _next_logq(fpar, ipar, data, keys[p], p, lf, li, head)
                if on_lev[p] == 1:
                    c_lev[p] += math.exp(lq)
                    if u_lev[p] <= c_lev[p]:
                        on_lev[p] = 2
                        p_lev[p] = r_lev[p]
                r_lev[p] += 1
        sc = s_lev[p] - lq
        child_on = 1 if on_lev[p] == 2 and p_lev[p] == r else 0
        pos[i] = sc
        dep[i] = d
        onpath[i] = child_on
        if sleaf[i] == 0:
            ck = child_key(keys[p], r)
            keys[d] = ck
            s_lev[d] = sc
            on_lev[d] = child_on
            r_lev[d] = 0
            if child_on == 1:
                u_lev[d] = unit(purpose_key(ck, PATH), 0)
                c_lev[d] = 0.0
            if sc < np.inf:
                _init_node(law, ck, d, lf, li, head, p, r)


@njit_cached
def static_chunk(law, head_cap, roots, sdep, srank, sleaf, sorder, budgets, out):
    """A static shape below each root ``roots.keys[i]``, scored into column i of ``out``.

    Roots: ``roots.mode`` ROOT_DRAW (context from the stationary law) or ROOT_PRESET
    (context ``roots.ci[i]``, ``roots.cf[i]`` and, if ``roots.head`` has rows, head row
    ``roots.head[i]``: a family's recurrent state), as for every policy kernel here.

    ``sdep``, ``srank``, ``sleaf`` describe the shape in pre-order (children in rank
    order); ``sorder[j]`` is the pre-order index of the node of priority j; ``budgets``
    is non-decreasing and at most the shape's size.
    """
    rkeys, rhead = roots.keys, roots.head
    acc_out, exp_out, dep_out = out
    n = sdep.shape[0]
    n_levels = 1
    for i in range(n):
        n_levels = max(n_levels, sdep[i] + 1)
    keys, s_lev, on_lev, u_lev, c_lev, lf, li, head = new_levels(n_levels, head_cap)
    r_lev = np.empty(n_levels, np.int64)
    p_lev = np.empty(n_levels, np.int64)
    lev = StaticLevels(keys, s_lev, on_lev, u_lev, c_lev, r_lev, p_lev, lf, li, head)
    pos = np.empty(n)
    dep = np.empty(n, np.int32)
    onpath = np.empty(n, np.int8)
    for col in range(rkeys.shape[0]):
        _preset_row(rhead, col, head)
        _static_tree(law, roots, col, sdep, srank, sleaf, pos, dep, onpath, lev)
        accumulate(sorder, pos, dep, onpath, budgets, acc_out, exp_out, dep_out, col)


# ---------------------------------------------------------------------------------------
# Dynamic (EAGLE-2/3)

@kernel
def _expand(law, key, row, ppos, pdep, on, u, k, cand, n, rows):
    """Append the top-``k`` children of the node at level ``row`` of ``rows``
    (:class:`EagleRows`) as candidates n, n+1, ... of ``cand`` (:class:`EagleCands`);
    returns the new count. ``ppos``, ``pdep``, ``on`` and ``u`` are the node's position,
    depth, path state and path uniform."""
    fpar, ipar, data = law.fpar, law.ipar, law.data
    pos, dep, onpath, ckey, crank, crow = cand
    lf, li, head = rows
    c = 0.0
    for r in range(k):
        lq = _next_logq(fpar, ipar, data, key, row, lf, li, head)
        if not lq > NEG_INF:
            break
        child_on = 0
        if on == 1:
            c += math.exp(lq)
            if u <= c:
                child_on = 1
                on = 2
        pos[n] = ppos - lq
        dep[n] = pdep + 1
        onpath[n] = child_on
        ckey[n] = child_key(key, r)
        crank[n] = r
        crow[n] = row
        n += 1
    return n


@kernel
def _layer_top(lay, start, n, topk, pos, dep):
    """The newest layer's (candidates start .. n - 1) top-``topk`` by (value, depth,
    generation order) into ``lay[:kk]`` in that order, the expansion order; returns kk."""
    m = n - start
    for j in range(m):
        lay[j] = start + j
    kk = min(topk, m)
    if kk < m:
        select(lay, 0, m, kk, pos, dep)
    for a in range(1, kk):
        v = lay[a]
        b = a - 1
        while b >= 0 and before(pos, dep, v, lay[b]):
            lay[b + 1] = lay[b]
            b -= 1
        lay[b + 1] = v
    return kk


@kernel
def _dynamic_tree(law, roots, col, depth, topk, cand, lay, rows):
    """All candidates (``cand``, :class:`EagleCands`) of the EAGLE layers below root ``col``
    of ``roots``, in generation order; returns their count. ``lay`` holds a layer's top.

    Every expanded node keeps its own level row of ``rows`` (:class:`EagleRows`; its
    context stays readable by its children): row 0 is the root, rows 1.. the expanded
    nodes in expansion order.
    """
    pos, dep, onpath, ckey, crank, crow = cand
    lf, li, head = rows
    rkey = roots.keys[col]
    li[0, CTX_I] = roots.ci[col]
    lf[0, CTX_F] = roots.cf[col]
    _init_node(law, rkey, 0, lf, li, head, roots.mode, 0)
    n = _expand(law, rkey, 0, 0.0, np.int64(0), np.int64(1), unit(purpose_key(rkey, PATH), 0),
                topk, cand, 0, rows)
    start = 0
    row = 1
    for _layer in range(1, depth):
        kk = _layer_top(lay, start, n, topk, pos, dep)
        if kk == 0:
            break
        start = n
        for j in range(kk):
            v = lay[j]
            _init_node(law, ckey[v], row, lf, li, head, crow[v], crank[v])
            on = np.int64(onpath[v])
            u = unit(purpose_key(ckey[v], PATH), 0) if on == 1 else 0.0
            n = _expand(law, ckey[v], row, pos[v], np.int64(dep[v]), on, u, topk, cand, n, rows)
            row += 1
    return n


@njit_cached
def dynamic_chunk(law, head_cap, roots, depth, topk, budgets, out):
    """EAGLE-2/3 trees below the roots ``roots.keys`` (see :func:`static_chunk`), scored.

    The tree of budget P is the first P candidates by (path value, depth, generation
    order); ``budgets`` is non-decreasing, already capped at the policy's ``total``.
    """
    rkeys, rhead = roots.keys, roots.head
    acc_out, exp_out, dep_out = out
    cap = topk + (depth - 1) * topk * topk
    pos = np.empty(cap)
    dep = np.empty(cap, np.int32)
    onpath = np.empty(cap, np.int8)
    ckey = np.empty(cap, np.uint64)
    crank = np.empty(cap, np.int64)
    crow = np.empty(cap, np.int64)
    order = np.empty(cap, np.int32)
    lay = np.empty(topk * topk, np.int32)
    n_rows = 1 + (depth - 1) * topk
    lf = np.empty((n_rows, LEVEL_F))
    li = np.empty((n_rows, LEVEL_I), np.int64)
    head = np.empty((n_rows, max(head_cap, 1)))
    cand = EagleCands(pos, dep, onpath, ckey, crank, crow)
    rows = EagleRows(lf, li, head)
    bc = np.empty_like(budgets)
    for col in range(rkeys.shape[0]):
        _preset_row(rhead, col, head)
        n = _dynamic_tree(law, roots, col, depth, topk, cand, lay, rows)
        for b in range(budgets.shape[0]):
            bc[b] = min(budgets[b], n)
        select_nested(n, pos, dep, onpath, order, bc, acc_out, exp_out, dep_out, col)


# ---------------------------------------------------------------------------------------
# Noisy drafter

@kernel
def _noisy_level(law, key, d, prow, rank, on, noise, lev):
    """Set up level ``d`` of ``lev`` (:class:`NoisyLevels`) for the node ``key``, child of
    rank ``rank`` of level ``prow`` (path state ``on``): true head ranks, the drafter's
    (``noise``, :class:`Noise`) estimates, the path state.

    Buffers ranks 0..kh (the head plus the first tail rank) in ``lqb[d]``; ``leb[d, r]``
    is the estimated log q of head rank r, ``z_lev[d]`` the constant that turns a tail
    rank's beta * log q into its estimate, ``h_lev[d]`` the largest head estimate. The
    children are at depth d + 1, so their noise scale is ``sigma1 * (d + 1) ** gamma``
    (exactly ``sigma1``, the noise's ``sigma``, when ``gamma == 0``).
    """
    fpar, ipar, data = law.fpar, law.ipar, law.data
    sigma1, gamma, beta, exact, kh = noise
    on_lev, u_lev, c_lev, p_lev = lev.on_lev, lev.u_lev, lev.c_lev, lev.p_lev
    g_lev, z_lev, h_lev, lqb, leb = lev.g_lev, lev.z_lev, lev.h_lev, lev.lqb, lev.leb
    lf, li, head = lev.lf, lev.li, lev.head
    sigma = sigma1 if gamma == 0.0 else sigma1 * (d + 1.0) ** gamma
    _init_node(law, key, d, lf, li, head, prow, rank)
    g = 0
    while g <= kh:
        lq = _next_logq(fpar, ipar, data, key, d, lf, li, head)
        if not lq > NEG_INF:
            break
        lqb[d, g] = lq
        g += 1
    g_lev[d] = g
    if on == 1:
        u = unit(purpose_key(key, PATH), 0)
        c = 0.0
        for r in range(g):
            c += math.exp(lqb[d, r])
            if u <= c:
                on = 2
                p_lev[d] = r
                break
        u_lev[d] = u
        c_lev[d] = c
    on_lev[d] = on
    nh = min(g, kh)
    if exact:
        for r in range(nh):
            leb[d, r] = lqb[d, r]
        z_lev[d] = 0.0
        h_lev[d] = lqb[d, 0] if g > 0 else NEG_INF
        return
    mx = NEG_INF
    for r in range(nh):
        a = beta * lqb[d, r]
        if sigma > 0.0:
            a += sigma * normal(purpose_key(child_key(key, r), NOISE), 0)
        leb[d, r] = a
        if a > mx:
            mx = a
    tot = 0.0
    mass = 0.0
    for r in range(nh):
        tot += math.exp(leb[d, r] - mx)
        mass += math.exp(lqb[d, r])
    log_z = mx + math.log(tot) if nh > 0 else NEG_INF
    half_var = 0.5 * sigma * sigma
    # true mass m outside the scored head, in the normaliser with its tempered mass times
    # E[exp(sigma Z)]: a tail of ranks >= K as if flat at the first tail rank's q_K
    # (m * q_K**(beta - 1)); mass missing from a short vocabulary as one token (m**beta)
    m = 1.0 - mass
    lt = NEG_INF
    if g > kh:
        lq_k = lqb[d, kh]
        # below the rounding level of the head sum, m is unknown: at least token K
        m_log = math.log(m) if m > _MASS_EPS else lq_k
        lt = max(m_log, lq_k) + (beta - 1.0) * lq_k + half_var
    elif m > _MASS_EPS:
        lt = beta * math.log(m) + half_var
    if lt > NEG_INF:
        hi = max(log_z, lt)
        log_z = hi + math.log(math.exp(log_z - hi) + math.exp(lt - hi))
    hm = NEG_INF
    for r in range(nh):
        e = min(leb[d, r] - log_z, 0.0)
        leb[d, r] = e
        if e > hm:
            hm = e
    z_lev[d] = half_var - log_z
    h_lev[d] = hm


@kernel
def _noisy_collect(law, roots, col, noise, t, cap, dmax, found, lev):
    """Nodes below root ``col`` of ``roots`` with estimated position <= tie_cut(t), in
    pre-order (children in rank order), by the drafter ``noise`` (:class:`Noise`).

    Writes the estimated position (``est``), the true one (``pos``), depth and path flag of
    each into ``found`` (:class:`Collected`, at most ``cap`` nodes), walking the levels of
    ``lev`` (:class:`NoisyLevels`); returns the count, ``ABORT`` or ``TOO_DEEP`` as
    ``collect.collect``. Head ranks are unsorted under noise and all scanned; tail ranks
    are monotone and stop the scan. Nodes deeper than ``dmax`` (the largest budget) are
    skipped: no tree of that many nodes holds them, and a drafter whose estimate rounds to
    1 along a path (an infinite set of nodes at one estimated position) stays finite.
    """
    fpar, ipar, data = law.fpar, law.ipar, law.data
    beta, exact, kh = noise.beta, noise.exact, noise.kh
    est, pos, dep, onpath = found
    (keys, s_lev, t_lev, on_lev, u_lev, c_lev, p_lev, r_lev, g_lev, z_lev, h_lev, lqb, leb,
     lf, li, head) = lev
    rkey = roots.keys[col]
    n_levels = keys.shape[0]
    t = tie_cut(t)                     # collect past every estimate tied with one <= t
    keys[0] = rkey
    s_lev[0] = 0.0
    t_lev[0] = 0.0
    li[0, CTX_I] = roots.ci[col]
    lf[0, CTX_F] = roots.cf[col]
    _noisy_level(law, rkey, 0, roots.mode, 0, 1, noise, lev)
    r_lev[0] = 0 if -h_lev[0] <= t else min(g_lev[0], kh)
    n = 0
    d = 0
    while d >= 0:
        if d >= dmax:                   # no tree of <= dmax nodes reaches deeper
            d -= 1
            continue
        r = r_lev[d]
        r_lev[d] = r + 1
        g = g_lev[d]
        if r < min(g, kh):
            lq = lqb[d, r]
            sc = s_lev[d] - leb[d, r]
            if not sc <= t:
                if exact:               # sorted head: the rest is above t too
                    d -= 1
                continue
        else:
            if r < g:
                lq = lqb[d, r]
            elif g <= kh:               # the vocabulary ended inside the buffer
                d -= 1
                continue
            else:
                lq = _next_logq(fpar, ipar, data, keys[d], d, lf, li, head)
                if not lq > NEG_INF:
                    d -= 1
                    continue
                if on_lev[d] == 1:
                    c_lev[d] += math.exp(lq)
                    if u_lev[d] <= c_lev[d]:
                        on_lev[d] = 2
                        p_lev[d] = r
            sc = s_lev[d] - (lq if exact else min(beta * lq + z_lev[d], 0.0))
            if not sc <= t:
                d -= 1
                continue
        if n >= cap:
            return ABORT
        if d + 1 >= n_levels:
            return TOO_DEEP
        child_on = 1 if on_lev[d] == 2 and p_lev[d] == r else 0
        st = t_lev[d] - lq
        est[n] = sc
        pos[n] = st
        dep[n] = d + 1
        onpath[n] = child_on
        n += 1
        ck = child_key(keys[d], r)
        d += 1
        keys[d] = ck
        s_lev[d] = sc
        t_lev[d] = st
        _noisy_level(law, ck, d, d - 1, r, child_on, noise, lev)
        r_lev[d] = 0 if sc - h_lev[d] <= t else min(g_lev[d], kh)
    return n


@njit_cached
def _noisy_levels(n_levels, head_cap, kh):
    """The :class:`NoisyLevels` of ``n_levels`` levels, for a head of ``kh`` ranks."""
    keys, s_lev, on_lev, u_lev, c_lev, lf, li, head = new_levels(n_levels, head_cap)
    return NoisyLevels(keys, s_lev, np.empty(n_levels), on_lev, u_lev, c_lev,
                       np.empty(n_levels, np.int64), np.empty(n_levels, np.int64),
                       np.empty(n_levels, np.int64), np.empty(n_levels), np.empty(n_levels),
                       np.empty((n_levels, kh + 1)), np.empty((n_levels, max(kh, 1))), lf, li,
                       head)


@njit_cached
def noisy_chunk(law, head_cap, roots, sigma, gamma, beta, kh, budgets, t_start, out):
    """Best-first trees by the drafter's estimate below the roots ``roots.keys`` (see
    :func:`static_chunk`).

    The noise of a node at depth d (>= 1, below its call's root) has scale
    ``sigma * d ** gamma``.

    ``sigma == 0 and beta == 1`` is the exact drafter: estimates are the true
    log-probabilities, unnormalised, so the trees are bit for bit the optimal ones. The
    threshold adapts as in ``tree.simulate_chunk``. Returns (nodes visited, threshold),
    visited = -1 when more than MAX_NODES nodes tie.
    """
    rkeys, rhead = roots.keys, roots.head
    acc_out, exp_out, dep_out = out
    exact = sigma == 0.0 and beta == 1.0
    noise = Noise(sigma, gamma, beta, exact, kh)
    p_max = budgets[budgets.shape[0] - 1]
    cap = 6 * p_max + 64
    est = np.empty(cap)
    pos = np.empty(cap)
    dep = np.empty(cap, np.int32)
    onpath = np.empty(cap, np.int8)
    order = np.empty(cap, np.int32)
    n_levels = first_levels(head_cap)
    lev = _noisy_levels(n_levels, head_cap, kh)
    t = t_start
    visited = 0
    unit_rate = np.ones(3)          # after_pass's flags: growth rate 1, not learnt
    for col in range(rkeys.shape[0]):
        search = new_search()
        while True:
            _preset_row(rhead, col, lev.head)
            n = _noisy_collect(law, roots, col, noise, t, cap, p_max,
                               Collected(est, pos, dep, onpath), lev)
            if n == TOO_DEEP:
                n_levels *= 2
                lev = _noisy_levels(n_levels, head_cap, kh)
                continue
            visited += cap if n == ABORT else n
            done, t, widen, search = after_pass(est, dep, order, n, cap, p_max, t, AIM_TIES,
                                                unit_rate, bracket_search(search, t))
            if widen:                   # a huge tie at one position: widen the buffers
                if 2 * cap > MAX_NODES:
                    return -1, t
                cap *= 2
                est = np.empty(cap)
                pos, dep, onpath, order = node_buffers(cap)
            if done:
                break
        select_by(n, est, dep, order, budgets)
        accumulate(order, pos, dep, onpath, budgets, acc_out, exp_out, dep_out, col)
        t = aim(n, p_max, t, AIM_TIES, 0.0, 1.0)
    return visited, t


# ---------------------------------------------------------------------------------------
# Sequoia's dynamic programme (static trees for a positional acceptance vector)

@njit_cached
def sequoia_dp(p, m_max, levels):
    """Sequoia's DP tables (``tree_search.py`` of Infini-AI-Lab/Sequoia, same recursion).

    ``p[b]`` (b = 1..B) is the acceptance of a node's b-th child (``p[0]`` unused, as in
    Sequoia's vector file). ``T[m, l, b]`` is the largest expected number of accepted
    nodes, root included, of a tree of exactly m nodes (root included) and at most l
    levels (root = level 1) whose root has the children 1..b (never child b without the
    children below it); -inf where no such tree exists. ``T[m, l, b] = max_y T[y, l, b-1]
    + p[b] * tmax[m - y, l - 1]`` with ``tmax[m, l] = max_b T[m, l, b]``; the first best
    y (``Y``) and the first best b (``arg``) are kept, as Sequoia keeps them.
    """
    nb = p.shape[0] - 1
    T = np.full((m_max + 1, levels + 1, nb + 1), NEG_INF)
    Y = np.zeros((m_max + 1, levels + 1, nb + 1), np.int32)
    tmax = np.full((m_max + 1, levels + 1), NEG_INF)
    arg = np.zeros((m_max + 1, levels + 1), np.int32)
    for l in range(1, levels + 1):
        T[1, l, 0] = 1.0
        tmax[1, l] = 1.0
    for m in range(2, m_max + 1):
        for l in range(2, levels + 1):
            if nb >= 1 and tmax[m - 1, l - 1] > NEG_INF:
                T[m, l, 1] = 1.0 + p[1] * tmax[m - 1, l - 1]
            for b in range(2, nb + 1):
                best = NEG_INF
                by = 0
                for y in range(1, m):
                    a = T[y, l, b - 1]
                    c = tmax[m - y, l - 1]
                    if a > NEG_INF and c > NEG_INF:
                        v = a + p[b] * c
                        if v > best:
                            best = v
                            by = y
                T[m, l, b] = best
                Y[m, l, b] = by
            bb = 0
            for b in range(1, nb + 1):
                if T[m, l, b] > T[m, l, bb]:
                    bb = b
            tmax[m, l] = T[m, l, bb]
            arg[m, l] = bb
    return T, Y, tmax, arg
