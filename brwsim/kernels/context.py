"""Context programs: how a node's context follows from its parent's, and picks its component.

Context-dependent environments add a *context program* ``cprog`` (float64): how a node's
context follows from its parent's and how it selects the node's components. Every random
number still comes from the node's key (purpose REGIME), so the environment remains a
function of (seed, path):

* ``CTX_NONE``: ``[0]``; i.i.d. nodes.
* ``CTX_REGIME``: ``[1, K, T (K x K cumulative rows), pi (K cumulative), lo_0, hi_0, ...]``:
  a Markov regime; the root draws from pi, a child from its parent's row of T; the node's
  components are ``[lo_k, hi_k)``.
* ``CTX_DEPTH``: ``[2, D, lo_0, hi_0, ...]``: the node at depth d below the current root uses
  range ``min(d, D - 1)``.
* ``CTX_AR1``: ``[3, rho]``: a latent z, N(0, 1) at the root and rho z_parent +
  sqrt(1 - rho^2) N(0, 1) below; an ENTROPY component takes its value at quantile Phi(z).
* ``CTX_NGRAM``: ``[4, V, N - 1, n_pos, V**(N - 2) (0 if N = 1), code_0, ..., code_{n_pos-1}]``:
  the context is the node's last N - 1 tokens coded base V (most recent token most
  significant, see :mod:`brwsim.kernels.ngram`). A child appends the token of its rank,
  read from the parent's head (``head[pd, V + rank]``, written by an NGRAM component); a
  drawn root takes the context ``code_i`` of a uniform corpus position i.
* ``CTX_LSTM``: ``[5, V, W, n_roots, n_classes, class_0, ...]``: a recurrent state kept in
  the level's head row (see :mod:`brwsim.kernels.lstm`). A child's ``li[d, CTX_I]`` is the
  class of its rank, read from the parent's head (``head[pd, V + rank]``) and the LSTM
  component advances the parent's state by it; a drawn root takes the window
  ``class_i .. class_{i+W-1}`` of a uniform i < n_roots; a preset root keeps the state
  the caller wrote into its head row. The TRANSFORMER kind uses the same program (its
  classes are the token stream of the prompts, W the root window's length).
"""

from __future__ import annotations

import math

import numpy as np

from brwsim.kernels import kernel
from brwsim.kernels.kinds import CTX_F, CTX_I, LISTED, ROOT_DRAW
from brwsim.kernels.rng import REGIME, normal, purpose_key, unit

CTX_NONE, CTX_REGIME, CTX_DEPTH, CTX_AR1, CTX_NGRAM, CTX_LSTM = 0, 1, 2, 3, 4, 5


@kernel
def pick_component(cw, lo, hi, u):
    """Component in [lo, hi) with probability proportional to its weight (cw cumulative)."""
    base = cw[lo - 1] if lo > 0 else 0.0
    target = base + u * (cw[hi - 1] - base)
    c = lo
    while c < hi - 1 and target > cw[c]:
        c += 1
    return c


@kernel
def node_context(cprog, key, d, lf, li, head, pd, rank):
    """Write the node's context into level ``d``; return its component range and quantile.

    Returns (lo, hi, u_ctx): the node picks its component in [lo, hi) (hi = -1: all) and an
    ENTROPY component uses quantile u_ctx (-1: its own uniform).
    """
    kind = int(cprog[0])
    if kind == CTX_NONE:
        li[d, CTX_I] = 0                # i.i.d.: no context, but never leave it undefined
        lf[d, CTX_F] = 0.0
        return 0, -1, -1.0
    rk = purpose_key(key, REGIME)
    if kind == CTX_NGRAM:
        v = int(cprog[1])
        if pd >= 0:
            vpow = np.int64(cprog[4])
            if vpow > 0:
                tok = np.int64(head[pd, v + min(rank, v - 1)])
                li[d, CTX_I] = tok * vpow + li[pd, CTX_I] // v
            else:
                li[d, CTX_I] = 0
        elif pd == ROOT_DRAW:
            n_pos = int(cprog[3])
            li[d, CTX_I] = np.int64(cprog[5 + min(int(unit(rk, 0) * n_pos), n_pos - 1)])
        lf[d, CTX_F] = 0.0              # no latent value (keeps generation records clean)
        return 0, -1, -1.0
    if kind == CTX_LSTM:
        v = int(cprog[1])
        if pd >= 0:
            li[d, CTX_I] = np.int64(head[pd, v + max(min(rank, li[pd, LISTED] - 1), 0)])
        elif pd == ROOT_DRAW:
            n_roots = int(cprog[3])
            li[d, CTX_I] = min(int(unit(rk, 0) * n_roots), n_roots - 1)
        lf[d, CTX_F] = 0.0
        return 0, -1, -1.0
    if kind == CTX_AR1:
        if pd >= 0:
            rho = cprog[1]
            z = rho * lf[pd, CTX_F] + math.sqrt(1.0 - rho * rho) * normal(rk, 0)
        elif pd == ROOT_DRAW:
            z = normal(rk, 0)
        else:
            z = lf[d, CTX_F]
        lf[d, CTX_F] = z
        li[d, CTX_I] = 0
        return 0, -1, 0.5 * math.erfc(-z / math.sqrt(2.0))
    n = int(cprog[1])
    lf[d, CTX_F] = 0.0
    if kind == CTX_DEPTH:
        if pd >= 0:
            li[d, CTX_I] = li[pd, CTX_I] + 1
        elif pd == ROOT_DRAW:
            li[d, CTX_I] = 0
        k = min(li[d, CTX_I], n - 1)
        return int(cprog[2 + 2 * k]), int(cprog[3 + 2 * k]), -1.0
    # CTX_REGIME: transition rows at 2.., stationary at 2 + n*n.., ranges after
    if pd >= 0 or pd == ROOT_DRAW:
        row = 2 + n * n if pd == ROOT_DRAW else 2 + n * li[pd, CTX_I]
        u = unit(rk, 0) * cprog[row + n - 1]
        k = 0
        while k < n - 1 and u > cprog[row + k]:
            k += 1
        li[d, CTX_I] = k
    k = li[d, CTX_I]
    base = 2 + n * n + n
    return int(cprog[base + 2 * k]), int(cprog[base + 2 * k + 1]), -1.0
