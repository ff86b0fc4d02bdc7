"""The kernels' data contract: a family compiled into the flat arrays every kernel takes.

A family's numba form is a list of :class:`Component` (one unless it is a mixture);
:func:`compile_spec` packs them, with a context program, into a :class:`Spec`, whose
fields are the leading arguments of every tree, policy and walk kernel. The layout of
``fpar``/``ipar``/``data`` per kind is owned by :mod:`brwsim.kernels.dist`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from brwsim.kernels.dist import NF, NI, kinds_dtype

__all__ = ["Component", "Spec", "compile_spec"]


@dataclass
class Component:
    """One numba component: a kind code, parameters and a data block."""

    kind: int
    fpar: list[float] = field(default_factory=list)
    ipar: list[int] = field(default_factory=list)
    data: np.ndarray = field(default_factory=lambda: np.zeros(0))
    weight: float = 1.0
    head_cap: int = 0


class Spec(NamedTuple):
    """Flat arrays of a compiled family, in the order the kernels take them."""

    kinds: np.ndarray
    cw: np.ndarray
    fpar: np.ndarray
    ipar: np.ndarray
    data: np.ndarray
    head_cap: int
    cprog: np.ndarray


def compile_spec(comps: list[Component], cprog: np.ndarray | None = None) -> Spec:
    """Pack components (and a context program) into a :class:`Spec`.

    ``ipar[:, 0:2]`` become (offset, length) of each component's data block; ``cprog``
    defaults to the i.i.d. program (see :mod:`brwsim.kernels.dist`). ``kinds`` is int32
    when a component is an n-gram or LSTM and int64 otherwise
    (:func:`brwsim.kernels.dist.kinds_dtype`): the kernels of other families are then
    compiled without the n-gram and LSTM code. ``cprog`` is copied into a writable array:
    families keep theirs read-only, and numba types a read-only array apart, so passing it
    as it is would compile every kernel a third time.
    """
    m = len(comps)
    fpar = np.zeros((m, NF))
    ipar = np.zeros((m, NI), np.int64)
    kinds = np.empty(m, np.int64)
    blocks = []
    off = 0
    for c, comp in enumerate(comps):
        kinds[c] = comp.kind
        fpar[c, :len(comp.fpar)] = comp.fpar
        ipar[c, 2:2 + len(comp.ipar)] = comp.ipar
        ipar[c, 0] = off
        ipar[c, 1] = comp.data.size
        blocks.append(np.ascontiguousarray(comp.data, dtype=np.float64).ravel())
        off += comp.data.size
    w = np.array([comp.weight for comp in comps], dtype=np.float64)
    data = np.concatenate(blocks) if blocks else np.zeros(0)
    kinds = kinds.astype(kinds_dtype(kinds))     # selects the kernels' contextual code or not
    return Spec(kinds, np.cumsum(w / w.sum()), fpar, ipar, data,
                max(comp.head_cap for comp in comps),
                np.zeros(1) if cprog is None else np.array(cprog, dtype=np.float64))
