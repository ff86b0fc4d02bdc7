"""The level-synchronous threshold pass of i.i.d. Zipf families with a spread of exponents.

:func:`brwsim.kernels.collect.collect` walks a tree depth first: every node's set-up (its
key's hashes, its exponent, its normaliser's spline) waits on the branch that decided
to descend into it, and every node's list of children ends in a branch the processor
cannot predict. For a family whose nodes are i.i.d. Zipf laws with a spread of
exponents (``zipf(s, vocab, spread > 0)``, one component) :func:`level_pass` collects
the same nodes level by level, in loops without data-dependent branches:

1. **Counts.** A set-up node at position S with exponent s and log-normaliser L has, at
   cut-off t, exactly the children of rank r < R with S - (-s log(r + 1) - L) <= t (the
   tree pass's own expression, so the same bits). The test runs on its first 8 ranks at
   once (a vector compare); a node with more starts from exp((t - S - L) / s) and
   corrects it by the exact test at its ends.
2. **Children.** The level's counts' prefix sums give every child's slot; each slot's
   owner comes from a running maximum, and one flat loop writes the positions, depths
   and path flags and, without a branch, appends the children that may have children of
   their own (rank 0's -log q at least the lowest floor: ``top``, as in
   ``collect.walk_pass``) to the next level's candidates.
3. **Set-up.** The candidates' keys and uniforms are hashed in a loop of their own (which
   LLVM vectorises), their exponents' spline intervals read in another, and the
   candidates whose interval floor keeps them below t are kept, without a branch, as the
   next level's nodes; only those evaluate their normaliser.

The target's sampled path is followed through one node per level (its children in rank
order until their probabilities pass its uniform), as ``collect.walk_pass`` does. The pass
collects exactly the nodes of ``collect.collect`` at the same cut-off, with the same positions, depths
and path flags, but not in pre-order: where pre-order breaks a tie at a budget's cut,
the caller collects the root again depth first (:func:`brwsim.kernels.tree.grow_tree`).
A short pass is repeated at a higher cut-off, not continued.

Its timings against the depth-first pass are in ``benchmarks/README.md``.
"""

from __future__ import annotations

import math

import numpy as np

from brwsim.kernels import inline_kernel, kernel, njit_cached
from brwsim.kernels.collect import ABORT
from brwsim.kernels.closed import ZIPF_INV_H, ZIPF_N_INT, ZIPF_S_HI, ZIPF_S_LO, ZIPF_VOCAB, log_int
from brwsim.kernels.kinds import DATA_OFF, ZIPF
from brwsim.kernels.rng import DIST, PATH, child_key, purpose_key, unit
from brwsim.kernels.special import exp_neg, spline_index, spline_poly

_EXP_CAP = 11.8      # exp of more than this exceeds every vocabulary (MAX_VOCAB < e**11.8)
_FIRST = 8           # ranks a node's count tests at once
# log(r + 1) of those ranks, by the libm log the kernels call (dist.log_int's bits)
_LOG_FIRST = np.array([math.log(float(r + 1)) for r in range(_FIRST)])
#: The smallest largest budget passed level by level: below it the continued depth-first
#: passes are faster (``benchmarks/README.md``).
LEVEL_MIN_P = 256


@kernel
def level_family(kinds, fpar, closed, p_max):
    """True for the runs :func:`level_pass` serves: i.i.d. nodes (``closed``) of one Zipf
    component with a spread of exponents (without one, positions tie exactly and the
    depth-first pass, whose pre-order breaks the ties, is the faster), largest budget
    ``p_max`` at least :data:`LEVEL_MIN_P`."""
    return (closed and p_max >= LEVEL_MIN_P and kinds.shape[0] == 1 and kinds[0] == ZIPF
            and fpar[0, ZIPF_S_HI] > fpar[0, ZIPF_S_LO])


@njit_cached
def level_buffers(cap):
    """Scratch of :func:`level_pass` for passes of up to ``cap`` nodes: a level's nodes
    (key, position, exponent, log-normaliser, children's offsets), its children's owners,
    the next level's candidates (owner, rank, position, key, uniform) and their spline
    intervals. Only the largest level's part is ever touched (untouched pages cost no
    memory)."""
    m = cap + 2
    return (np.empty(m, np.uint64), np.empty(m), np.empty(m), np.empty(m), np.empty(m, np.int64),
            np.empty(m, np.int64), np.empty(m, np.int64), np.empty(m, np.int64), np.empty(m),
            np.empty(m, np.uint64), np.empty(m), np.empty(m, np.int64))


@inline_kernel
def _child_count(S, s, L, t, vocab):
    """Number of ranks r < vocab with S - ((-s) * log(r + 1) - L) <= t (a prefix: the
    expression is non-decreasing in r): exp's estimate, then the exact test at its ends."""
    x = (t - S - L) / s
    est = 0
    if x > 0.0:
        est = vocab if x > _EXP_CAP else min(int(exp_neg(x)), vocab)
    while est < vocab and S - ((-s) * log_int(est + 1) - L) <= t:
        est += 1
    while est > 0 and not S - ((-s) * log_int(est) - L) <= t:
        est -= 1
    return est


@inline_kernel
def _interval(u, s_lo, s_w, inv_h, n_int):
    """The spline interval of the exponent drawn with uniform ``u`` in (0, 1]
    (:func:`brwsim.kernels.special.spline_index` without its branches: s >= s_lo)."""
    return min(int((s_lo + u * s_w - s_lo) * inv_h), n_int - 1)


@inline_kernel
def _zipf_setup(data, off, n_int, s_lo, s_w, inv_h, dk):
    """(exponent, log-normaliser) of a node whose distribution key is ``dk``: the same bits
    as :func:`brwsim.kernels.closed.closed_level_init`."""
    s = s_lo + unit(dk, 1) * s_w
    j = spline_index(n_int, s_lo, inv_h, s)
    return s, spline_poly(data, off + 4 * j, s - data[off + 4 * n_int + j])


@kernel
def level_pass(fpar, ipar, data, rkey, t, cap, cut, top, pos, dep, onpath, lv):
    """Every node with S <= ``t`` (a tie cut-off) below the root ``rkey``, level by level.

    Parameters
    ----------
    fpar, ipar, data : numpy.ndarray
        The family's spec arrays (one Zipf component, :func:`level_family`).
    rkey : numpy.uint64
        The root's key (its distribution is drawn, as ``ROOT_DRAW``).
    t : float
        The cut-off, already widened by the tie rule (``select.tie_cut``).
    cap, cut : int
        At most ``cap`` nodes (else ``ABORT``), none deeper than ``cut``.
    top : float
        An upper bound on every node's rank-0 log-probability (``collect.top_bound``).
    pos, dep, onpath : numpy.ndarray
        Receive the nodes' positions, depths and path flags (1: on the target's path).
    lv : tuple
        :func:`level_buffers`.

    Returns
    -------
    int
        The number of nodes, or ``ABORT``.
    """
    ekey, eS, es, eL, eoff, owner, gp, grk, gS, tkey, tu, tj = lv
    s_lo = fpar[0, ZIPF_S_LO]
    s_w = fpar[0, ZIPF_S_HI] - s_lo
    inv_h = fpar[0, ZIPF_INV_H]
    off = ipar[0, DATA_OFF]
    vocab = ipar[0, ZIPF_VOCAB]
    n_int = ipar[0, ZIPF_N_INT]
    ekey[0] = rkey
    eS[0] = 0.0
    es[0], eL[0] = _zipf_setup(data, off, n_int, s_lo, s_w, inv_h, purpose_key(rkey, DIST))
    ne = 1
    pe = 0                               # this level's node on the target's path (-1: none)
    pu = unit(purpose_key(rkey, PATH), 0)
    n = 0
    d = 0
    while ne > 0:
        tot = _counts(eS, es, eL, ne, t, vocab, eoff)
        if n + tot > cap:
            return ABORT
        d += 1
        m = _children(lv, ne, tot, n, d, d < cut, t, top, pos, dep, onpath)
        pm = -1                          # the path node's sampled child among the candidates
        if pe >= 0:
            pm = _path_child(eS[pe], es[pe], eL[pe], pu, eoff[pe], eoff[pe + 1] - eoff[pe], pe, n,
                             onpath, gp, grk, m)
        n += tot
        ne, pe = _set_up((data, off, n_int, s_lo, s_w, inv_h), t, lv, m, pm)
        if pe >= 0:
            pu = unit(purpose_key(ekey[pe], PATH), 0)
    return n


@kernel
def _counts(eS, es, eL, ne, t, vocab, eoff):
    """Each of a level's ``ne`` nodes' children at or below t, as offsets into ``eoff``: the
    exact test of its first ``_FIRST`` ranks at once (a vector compare), and
    :func:`_child_count` for a node with more (about one in ten at P = 65536)."""
    tot = 0
    for e in range(ne):
        S = eS[e]
        s = es[e]
        L = eL[e]
        c = 0
        for r in range(_FIRST):
            c += 1 if (r < vocab and S - ((-s) * _LOG_FIRST[r] - L) <= t) else 0
        if c == _FIRST:
            c = _child_count(S, s, L, t, vocab)
        eoff[e] = tot
        tot += c
    eoff[ne] = tot
    return tot


@kernel
def _children(lv, ne, tot, n, d, deep, t, top, pos, dep, onpath):
    """The level's ``tot`` children at pos[n:], depth ``d``, with their owners (a running
    maximum over the owners' first slots); those that may have children of their own
    (``deep`` and rank 0 not beyond t by ``top``) are appended, in owner then rank order,
    to the candidates (gp, grk, gS of ``lv``, :func:`level_buffers`): returns their number."""
    _, eS, es, eL, eoff, owner, gp, grk, gS, _, _, _ = lv
    for k in range(tot + 1):
        owner[k] = -1
    for e in range(ne):
        owner[eoff[e]] = e
    o = 0
    for k in range(tot):
        if owner[k] > o:
            o = owner[k]
        owner[k] = o
    m = 0
    for k in range(tot):
        o = owner[k]
        r = k - eoff[o]
        sc = eS[o] - ((-es[o]) * log_int(r + 1) - eL[o])
        pos[n + k] = sc
        dep[n + k] = d
        onpath[n + k] = 0
        gp[m] = o
        grk[m] = r
        gS[m] = sc
        m += 1 if (sc - top <= t and deep) else 0
    return m


@kernel
def _path_child(S, s, L, u, first, count, e, n, onpath, gp, grk, m):
    """Mark the sampled child of the path node ``e`` (children's probabilities in rank order
    until they pass its uniform ``u``, as ``collect.walk_pass``); returns its index among the
    ``m`` candidates, or -1 (not among its ``count`` children, or not a candidate)."""
    c = 0.0
    for r in range(count):
        c += math.exp((-s) * log_int(r + 1) - L)
        if u <= c:
            onpath[n + first + r] = 1
            for k in range(m):
                if gp[k] == e and grk[k] == r:
                    return k
            return -1
    return -1


@kernel
def _set_up(zipf, t, lv, m, pm):
    """The next level: the ``m`` candidates' keys and uniforms (a loop LLVM vectorises), their
    exponents' intervals, and those whose interval floor keeps rank 0 at or below t kept,
    with their normalisers. ``zipf`` = (data, off, n_int, s_lo, s_w, inv_h): the family's
    exponent range and normaliser spline. Returns (its nodes, the index of candidate ``pm``
    among them or -1)."""
    data, off, n_int, s_lo, s_w, inv_h = zipf
    ekey, eS, es, eL, _, _, gp, grk, gS, tkey, tu, tj = lv
    for k in range(m):
        tkey[k] = ekey[gp[k]]
    for k in range(m):
        ck = child_key(tkey[k], grk[k])
        tkey[k] = ck
        tu[k] = unit(purpose_key(ck, DIST), 1)
    pe = -1
    ne = 0
    floors = off + 5 * n_int
    for k in range(m):
        s = s_lo + tu[k] * s_w
        j = _interval(tu[k], s_lo, s_w, inv_h, n_int)
        ekey[ne] = tkey[k]
        eS[ne] = gS[k]
        es[ne] = s
        tj[ne] = j
        ne += 1 if gS[k] + data[floors + j] <= t else 0
    if pm >= 0 and gS[pm] + data[floors + _interval(tu[pm], s_lo, s_w, inv_h, n_int)] <= t:
        pe = 0                           # its index among the kept: those kept before it
        for k in range(pm):
            pe += 1 if gS[k] + data[floors + _interval(tu[k], s_lo, s_w, inv_h, n_int)] <= t else 0
    for e in range(ne):
        j = tj[e]
        eL[e] = spline_poly(data, off + 4 * j, es[e] - data[off + 4 * n_int + j])
    return ne, pe
