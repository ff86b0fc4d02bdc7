"""Kernel kinds: their codes, their declared properties, and the layouts every kind shares.

A family compiles to components (:mod:`brwsim.kernels.spec`), each of one *kind*: a code
that selects the sampler of its node distributions. :data:`KIND_TABLE` declares, for every
code, its name, the module holding its sampler (which owns the kind's ``fpar``/``ipar``
slots as named constants) and the properties every dispatch site reads:

* ``closed``: a closed form of a few parameters per node, read rank by rank without a head
  row (:mod:`brwsim.kernels.closed`); a family of such components and i.i.d. nodes is
  read through the inline helpers of the tree pass (:func:`brwsim.kernels.dist.closed_form`).
* ``contextual``: a node needs its parent's level (n-gram, LSTM, transformer); the
  ``kinds`` array of a family with one is int8 (:data:`CONTEXTUAL_KINDS`), uint16 with a
  neural one (:data:`NEURAL_KINDS`) or, beside a lazy kind, int32 (:data:`MIXED_KINDS`),
  which compiles the contextual set-up into the kernels.
* ``neural`` (contextual too): the node's distribution comes from a neural network (LSTM,
  transformer), set up through the compiled C function of :mod:`brwsim.kernels.netinit`,
  which only the neural and mixed groups' kernels call.
* ``lists_in_head``: the node's ranks above the caller's cut-off are listed, sorted, in
  its head row at set-up (``li[d, LISTED]`` of them); ``dist_next`` reads them off.

The property tests are bit masks (:func:`is_closed`, :func:`is_contextual`,
:func:`lists_in_head`), usable in Python and inside kernels (numba freezes the masks as
constants). A code outside the table has no property, so a new code that misses its row is
never taken for a closed form. ``docs/design.md`` ("Adding a kernel kind") lists the steps
of a new kind; ``tests/unit/test_kind_table.py`` checks each.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from brwsim.kernels import inline_kernel

UNIFORM = 0
TABLE = 1
GEOMETRIC = 2
ZIPF = 3
BANK = 4
ORDERSTAT = 5
PEAKED = 6
ENTROPY = 7
NGRAM = 8
LSTM = 9
TRANSFORMER = 10
DIRICHLET = 11


class KindRow(NamedTuple):
    """One kind's declared properties (see the module docstring)."""

    name: str
    module: str             # the kernel module of its sampler, under brwsim.kernels
    closed: bool
    contextual: bool
    lists_in_head: bool
    neural: bool = False    # set up by a neural network: the C function of kernels/netinit


#: Every kind code's row. A new kind adds its row here, and its code above.
KIND_TABLE: dict[int, KindRow] = {
    UNIFORM: KindRow("UNIFORM", "closed", True, False, False),
    TABLE: KindRow("TABLE", "closed", True, False, False),
    GEOMETRIC: KindRow("GEOMETRIC", "closed", True, False, False),
    ZIPF: KindRow("ZIPF", "closed", True, False, False),
    BANK: KindRow("BANK", "closed", True, False, False),
    ORDERSTAT: KindRow("ORDERSTAT", "orderstat", False, False, False),
    PEAKED: KindRow("PEAKED", "closed", True, False, False),
    ENTROPY: KindRow("ENTROPY", "closed", False, False, False),
    NGRAM: KindRow("NGRAM", "ngram", False, True, True),
    LSTM: KindRow("LSTM", "lstm", False, True, True, neural=True),
    TRANSFORMER: KindRow("TRANSFORMER", "transformer", False, True, True, neural=True),
    DIRICHLET: KindRow("DIRICHLET", "dirichlet", False, False, True),
}


def _mask(prop: str) -> int:
    return sum(1 << k for k, row in KIND_TABLE.items() if getattr(row, prop))


_MAX_KIND = 62                      # masks are int64 constants
assert max(KIND_TABLE) <= _MAX_KIND and min(KIND_TABLE) >= 0
CLOSED_MASK = _mask("closed")
CONTEXTUAL_MASK = _mask("contextual")
NEURAL_MASK = _mask("neural")
LISTED_MASK = _mask("lists_in_head")


@inline_kernel
def _has(mask, kind):
    return 0 <= kind <= _MAX_KIND and (mask >> kind) & 1 == 1


@inline_kernel
def is_closed(kind):
    """True when ``kind`` is a closed form (:mod:`brwsim.kernels.closed`)."""
    return _has(CLOSED_MASK, kind)


@inline_kernel
def is_contextual(kind):
    """True when a node of ``kind`` needs its parent's level (n-gram, LSTM, transformer)."""
    return _has(CONTEXTUAL_MASK, kind)


@inline_kernel
def lists_in_head(kind):
    """True when a level of ``kind`` lists its ranks, sorted, in its head row at set-up."""
    return _has(LISTED_MASK, kind)


# The dtype of a family's ``kinds`` array names its kind group (``dist.kinds_dtype``): the
# kernels are specialised per dtype, and each specialisation holds only its group's code.
# A *lazy* kind is one that is neither closed nor contextual (order statistics, Dirichlet,
# entropy targets): the set-up of each is large code.
#: dtype of ``kinds`` of a family with a lazy component and no contextual one.
PLAIN_KINDS = np.int64
#: dtype of ``kinds`` of a family with a contextual component (NGRAM), no neural one and
#: no lazy one: its kernels hold the n-gram set-up and no other kind's but the closed forms'.
CONTEXTUAL_KINDS = np.int8
#: dtype of ``kinds`` of a family with a neural component (LSTM, TRANSFORMER) and no lazy
#: one: its kernels hold the contextual set-up (and call the networks' C function).
NEURAL_KINDS = np.uint16
#: dtype of ``kinds`` of a family with a contextual component and a lazy one (every kind's
#: set-up compiled in).
MIXED_KINDS = np.int32
#: dtype of ``kinds`` of a family whose components are all closed forms.
CLOSED_KINDS = np.int16

# Component parameters: NF floats and NI ints per component. Every kind's ipar starts
# with its data block's offset and length (written by compile_spec); its own slots follow,
# named in its sampler's module.
NF = 8
NI = 6
DATA_OFF = 0        # ipar: offset of the component's block in ``data``
DATA_LEN = 1        # ipar: its length
FIRST_OWN = 2       # ipar: the first slot a kind owns

# Level layout: li[d, KIND_SLOT] effective kind, li[d, RANK] next rank, li[d, COMP]
# component, li[d, LISTED] kind-specific (ranks listed in the head row, a BANK row, ...),
# li[d, CTX_I] the node's context (regime, depth); lf[d, 0..5] kind-specific, lf[d, CTX_F]
# the node's latent context value.
LEVEL_F = 8         # float state per level
LEVEL_I = 6         # int state per level
KIND_SLOT = 0
RANK = 1
COMP = 2
LISTED = 3
CTX_F = 6           # lf slot of the latent context value
CTX_I = 4           # li slot of the context (regime, depth)

EMPTY = -1          # a level proven to have no rank above the caller's cut-off
ROOT_DRAW = -1      # ``pd`` of a root whose context is drawn from the stationary law
ROOT_PRESET = -2    # ``pd`` of a root whose context the caller has written into its level
NEG_INF = -np.inf

#: Relative margin of a caller's cut-off: a sampler that drops ranks below the cut-off
#: drops only those below it by this much, so it never drops a rank the caller would use.
CUT_MARGIN = 1e-9


@inline_kernel
def lowered_cut(min_logq):
    """The caller's cut-off ``min_logq`` lowered by :data:`CUT_MARGIN` (relative)."""
    return min_logq - CUT_MARGIN * (1.0 + abs(min_logq)) if min_logq > -np.inf else NEG_INF
