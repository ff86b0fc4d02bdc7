"""Lazy sorted next-token distributions of one node: the dispatch over kernel kinds.

A family compiles to a flat *spec* of arrays (see :mod:`brwsim.kernels.spec`):

* ``kinds[c]``, ``cw[c]`` (cumulative mixture weight), ``fpar[c, :]``, ``ipar[c, :]`` for
  each component c, and one float64 ``data`` array that components index with
  ``ipar[c, DATA_OFF]`` (offset) and ``ipar[c, DATA_LEN]`` (length); every other slot is
  owned by the kind's sampler module, which names it.

A node's distribution lives in one *level* of the caller's state arrays
(``lf[d, :]`` floats, ``li[d, :]`` ints, ``head[d, :]`` a buffer of log-probabilities;
layout in :mod:`brwsim.kernels.kinds`). :func:`dist_init` sets the level up from the
node's key; each :func:`dist_next` returns the log-probability of the next rank (0 = most
likely), or ``-inf`` once the vocabulary is exhausted. Ranks come out in non-increasing
order, and no call costs O(vocab) unless the family is exact-by-construction at small
vocabularies. A context program (:mod:`brwsim.kernels.context`) makes a node's component
depend on its parent's context.

Kinds are told apart by the properties declared in :data:`brwsim.kernels.kinds.KIND_TABLE`
(:func:`is_closed`, :func:`is_contextual`, :func:`lists_in_head`), never by ranges of codes.
Each kind's sampler is a module of its own: :mod:`~brwsim.kernels.closed` (the closed forms,
Peaked, entropy targets), :mod:`~brwsim.kernels.orderstat`, :mod:`~brwsim.kernels.dirichlet`,
:mod:`~brwsim.kernels.ngram`, and the LSTM and transformer (:mod:`~brwsim.kernels.lstm`,
:mod:`~brwsim.kernels.transformer`, reached through :mod:`~brwsim.kernels.netinit`).
"""

from __future__ import annotations

import numpy as np

from numba import types
from numba.extending import overload

from brwsim.kernels import inline_kernel, kernel
from brwsim.kernels.closed import closed_level_init, closed_level_next, entropy_init
from brwsim.kernels.context import (CTX_AR1, CTX_DEPTH, CTX_LSTM, CTX_NGRAM, CTX_NONE,  # noqa: F401
                                    CTX_REGIME, node_context, pick_component)
from brwsim.kernels.dirichlet import dirichlet_init
from brwsim.kernels.kinds import (  # noqa: F401
    BANK, CLOSED_KINDS, COMP, CONTEXTUAL_KINDS, CTX_F, CTX_I, DATA_LEN, DATA_OFF, DIRICHLET, EMPTY,
    ENTROPY, GEOMETRIC, KIND_SLOT, KIND_TABLE, LEVEL_F, LEVEL_I, LISTED, LSTM, MIXED_KINDS,
    NEG_INF, NEURAL_KINDS, NF, NGRAM, NI, ORDERSTAT, PEAKED, PLAIN_KINDS, RANK, ROOT_DRAW,
    ROOT_PRESET, TABLE, TRANSFORMER, UNIFORM, ZIPF, is_closed, is_contextual, lists_in_head)
from brwsim.kernels.lstm import LSTM_BETA, LSTM_CARRY
from brwsim.kernels.netinit import net_init
from brwsim.kernels.ngram import NGRAM_BETA, ngram_init
from brwsim.kernels.orderstat import orderstat_level_init, orderstat_next
from brwsim.kernels.rng import DIST, purpose_key, unit
from brwsim.kernels.transformer import TF_BETA, TF_CARRY, TF_SLOTS, TF_WINDOW


@kernel
def closed_form(kinds, cprog):
    """True when nodes are i.i.d. (no context program) and every component is a closed
    form (:func:`is_closed`): the tree pass then calls ``closed_init`` and ``closed_next``
    (:mod:`brwsim.kernels.closed`) inline instead of :func:`dist_init` and :func:`dist_next`."""
    if int(cprog[0]) != CTX_NONE:
        return False
    for c in range(kinds.shape[0]):
        if not is_closed(kinds[c]):
            return False
    return True


@kernel
def dist_init(law, key, d, lf, li, head, min_logq, pd, rank):
    """Set up level ``d`` with the distribution of the node whose key is ``key``.

    ``law`` is the family's :class:`~brwsim.kernels.spec.Law`.
    ``pd`` is the parent's level (its context is the input of this node's), or ROOT_DRAW /
    ROOT_PRESET for a root; ``rank`` is the node's rank among its parent's children.
    ``min_logq`` is the caller's cut-off: ranks with a smaller log-probability will not
    be used, so a family may mark the level EMPTY once it proves none reaches it.
    """
    kinds, cw, fpar, ipar, data, cprog = law
    dk = purpose_key(key, DIST)
    if cprog[0] == CTX_NONE:            # i.i.d. nodes: node_context's first case, without a call
        li[d, CTX_I] = 0
        lf[d, CTX_F] = 0.0
        lo, hi, u_ctx = 0, -1, -1.0
    else:
        lo, hi, u_ctx = node_context(cprog, key, d, lf, li, head, pd, rank)
    if hi < 0:
        hi = kinds.shape[0]
    c = lo
    if hi - lo > 1:
        c = pick_component(cw, lo, hi, unit(dk, 0))
    kind = kinds[c]
    li[d, KIND_SLOT] = kind
    li[d, RANK] = 0
    li[d, COMP] = c
    if is_closed(kind):
        closed_level_init(fpar, ipar, data, kind, c, dk, d, lf, li, 0.0, np.inf)
    else:
        _lazy_init(law, kind, c, dk, d, lf, li, head, min_logq, pd, rank, u_ctx)


def _lazy_init(law, kind, c, dk, d, lf, li, head, min_logq, pd, rank, u_ctx):
    """Set up a level of a kind that is not a closed form; compiled (inline) only into the
    kernels of families that may have one: a closed-kinds family (``CLOSED_KINDS``) has
    none, and its kernels hold none of the order-statistics, Dirichlet, entropy or
    contextual set-up."""
    raise NotImplementedError("only called from numba kernels")


def _group(law) -> types.Type | None:
    """The numba dtype of a law's ``kinds`` (its kind group), or None for another type."""
    if isinstance(law, types.BaseTuple) and isinstance(law.types[0], types.Array):
        return law.types[0].dtype
    return None


@overload(_lazy_init, inline="always", jit_options={"_nrt": False})
def _lazy_init_impl(law, kind, c, dk, d, lf, li, head, min_logq, pd, rank, u_ctx):
    group = _group(law)
    if group == types.int16:            # CLOSED_KINDS
        def closed_only(law, kind, c, dk, d, lf, li, head, min_logq, pd, rank, u_ctx):
            li[d, LISTED] = 0             # unreachable: every component is closed
        return closed_only
    if group == types.int8:             # CONTEXTUAL_KINDS: the n-gram set-up only
        def ngram_only(law, kind, c, dk, d, lf, li, head, min_logq, pd, rank, u_ctx):
            _ngram_init(c, law.fpar, law.ipar, law.data, d, li, head, min_logq)
        return ngram_only
    if group == types.uint16:           # NEURAL_KINDS: no lazy kind's set-up
        def contextual_only(law, kind, c, dk, d, lf, li, head, min_logq, pd, rank, u_ctx):
            _contextual_init(kind, c, law.fpar, law.ipar, law.data, law.cprog, d, li, head,
                             min_logq, pd, rank)
        return contextual_only
    contextual = group == types.int32     # MIXED_KINDS (a constant: plain kernels hold no call)

    def lazy(law, kind, c, dk, d, lf, li, head, min_logq, pd, rank, u_ctx):
        fpar, ipar, data = law.fpar, law.ipar, law.data
        if kind == ORDERSTAT:
            orderstat_level_init(data, fpar, ipar, c, dk, d, lf, li, head, min_logq)
        elif kind == DIRICHLET:
            dirichlet_init(data, fpar, ipar, c, dk, d, li, head, min_logq)
        elif kind == ENTROPY:
            entropy_init(ipar, data, c, dk, d, lf, li, u_ctx)
        elif contextual and is_contextual(kind):
            # (the arrays one by one: passing the law tuple made this call slower)
            _contextual_init(kind, c, fpar, ipar, data, law.cprog, d, li, head, min_logq, pd,
                             rank)
    return lazy


def kinds_dtype(kinds) -> type:
    """The dtype of a family's ``kinds`` array, its kind group.

    A component is closed, contextual (``contextual`` in :data:`KIND_TABLE`: NGRAM, and the
    ``neural`` LSTM and TRANSFORMER) or lazy (any other: order statistics, Dirichlet,
    entropy targets, and a code outside the table). The group is :data:`CLOSED_KINDS`
    when every component is closed; with a contextual component and no lazy one,
    :data:`NEURAL_KINDS` when one is neural, else :data:`CONTEXTUAL_KINDS`; with a
    contextual and a lazy one :data:`MIXED_KINDS`; else :data:`PLAIN_KINDS`.

    The dtype selects, at compile time, what :func:`dist_init` contains (:func:`_lazy_init`):
    the lazy kinds' set-up only in the plain and mixed groups, the n-gram code only in the
    contextual, neural and mixed groups, the call of the LSTM and transformer set-up
    (:func:`_contextual_init`, :mod:`brwsim.kernels.netinit`) only in the neural and mixed
    groups: a family never compiles the code of kinds it cannot have.
    """
    rows = [KIND_TABLE.get(int(k)) for k in kinds]
    contextual = any(r is not None and r.contextual for r in rows)
    neural = any(r is not None and r.neural for r in rows)
    lazy = any(r is None or not (r.closed or r.contextual) for r in rows)
    if contextual:
        return MIXED_KINDS if lazy else (NEURAL_KINDS if neural else CONTEXTUAL_KINDS)
    return PLAIN_KINDS if lazy else CLOSED_KINDS


@kernel
def _contextual_init(kind, c, fpar, ipar, data, cprog, d, li, head, min_logq, pd, rank):
    """Set up an NGRAM, LSTM or TRANSFORMER level (compiled only into the kernels of the
    neural and mixed kind groups: see :func:`_lazy_init`)."""
    if kind == NGRAM:
        _ngram_init(c, fpar, ipar, data, d, li, head, min_logq)
    elif kind == LSTM:
        # ranks into head[d, :V], their classes into head[d, V:], the state after them
        n_list = li[pd, LISTED] if pd >= 0 else 0
        net = (data, ipar[c, DATA_OFF], fpar[c, LSTM_BETA], fpar[c, LSTM_CARRY], 0.0, 0)
        li[d, LISTED] = net_init(True, net, cprog, d, pd, pd == ROOT_DRAW, rank, n_list,
                                 min_logq, head, li[d, CTX_I])
    else:
        # TRANSFORMER: ranks and their tokens, the cache after them
        n_list = li[pd, LISTED] if pd >= 0 else 0
        net = (data, ipar[c, DATA_OFF], fpar[c, TF_BETA], fpar[c, TF_CARRY], fpar[c, TF_WINDOW],
               ipar[c, TF_SLOTS])
        li[d, LISTED] = net_init(False, net, cprog, d, pd, pd == ROOT_DRAW, rank, n_list,
                                 min_logq, head, li[d, CTX_I])


@inline_kernel
def _ngram_init(c, fpar, ipar, data, d, li, head, min_logq):
    """Set up an NGRAM level: its ranks sorted into head[d, :V], their tokens into
    head[d, V:]."""
    li[d, LISTED] = ngram_init(data, ipar[c, DATA_OFF], fpar[c, NGRAM_BETA], li[d, CTX_I],
                               min_logq, head, d)


@inline_kernel
def listed_next(fpar, ipar, data, key, d, lf, li, head):
    """:func:`dist_next`, with a DIRICHLET level's listed ranks read inline (the same
    number): a tree pass reads a rank per child and one more per node, and the call
    costs more than the read."""
    if li[d, KIND_SLOT] == DIRICHLET:
        r = li[d, RANK]
        li[d, RANK] = r + 1
        return head[d, r] if r < li[d, LISTED] else NEG_INF
    return dist_next(fpar, ipar, data, key, d, lf, li, head)


@kernel
def dist_next(fpar, ipar, data, key, d, lf, li, head):
    """Log-probability of the next rank of level ``d`` (``-inf`` when exhausted).

    One exit point: numba's reference-count pruning then removes every incref/decref
    of the array arguments. It stays a call in the tree pass (a function of its own in
    ``perf`` profiles), which reads DIRICHLET levels through :func:`listed_next`.
    """
    kind = li[d, KIND_SLOT]
    c = li[d, COMP]
    r = li[d, RANK]
    li[d, RANK] = r + 1
    out = NEG_INF
    if is_closed(kind):
        out = closed_level_next(fpar, ipar, data, kind, c, r, d, lf, li)
    elif kind == ORDERSTAT:
        out = orderstat_next(data, fpar, ipar, c, key, d, r, lf, li, head)
    elif lists_in_head(kind) and r < li[d, LISTED]:
        out = head[d, r]
    return out
