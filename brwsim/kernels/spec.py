"""The kernels' data contract: a family compiled into the flat arrays every kernel takes.

A family's numba form is a list of :class:`Component` (one unless it is a mixture);
:func:`compile_spec` packs them, with a context program, into a :class:`Spec`, whose
:class:`Law` (:attr:`Spec.law`) is the first argument of every tree, policy and walk
kernel. Kernels take their other data as named tuples too: the roots of a chunk
(:class:`Roots`) and the per-(budget, root) outputs (:class:`Out`). The layout of
``fpar``/``ipar``/``data`` per kind is owned by the kind's sampler module (named slots, see
:data:`brwsim.kernels.kinds.KIND_TABLE`), and a family writes a component's parameters by
those names: ``fpar`` and ``ipar`` map slots to values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from brwsim.kernels.dist import kinds_dtype
from brwsim.kernels.kinds import DATA_LEN, DATA_OFF, FIRST_OWN, NF, NI, ROOT_DRAW, ROOT_PRESET
from brwsim.kernels.rng import root_key

__all__ = ["Component", "Law", "Out", "Roots", "Spec", "compile_spec"]


@dataclass
class Component:
    """One numba component: a kind code, parameters and a data block.

    ``fpar`` and ``ipar`` map the kind's named slots (constants of its sampler module) to
    values; ``ipar``'s slots below ``FIRST_OWN`` (the data block's offset and length) are
    written by :func:`compile_spec`.
    """

    kind: int
    fpar: Mapping[int, float] = field(default_factory=dict)
    ipar: Mapping[int, int] = field(default_factory=dict)
    data: np.ndarray = field(default_factory=lambda: np.zeros(0))
    weight: float = 1.0
    head_cap: int = 0


class Law(NamedTuple):
    """A compiled family's distribution law, the first argument of every kernel.

    ``kinds[c]``, ``cw[c]`` (cumulative mixture weight), ``fpar[c, :]`` and ``ipar[c, :]``
    of each component c, the ``data`` block the components index (``ipar[c, DATA_OFF]``,
    ``ipar[c, DATA_LEN]``) and the context program ``cprog``. ``kinds``'s dtype is the
    family's kind group (:func:`brwsim.kernels.dist.kinds_dtype`).
    """

    kinds: np.ndarray
    cw: np.ndarray
    fpar: np.ndarray
    ipar: np.ndarray
    data: np.ndarray
    cprog: np.ndarray


class Out(NamedTuple):
    """A chunk kernel's outputs, each (budgets, roots): accepted draft tokens on the
    sampled path (int32), E[X | T] (float64) and the tree's depth (int32)."""

    acc: np.ndarray
    exp: np.ndarray
    dep: np.ndarray

    @classmethod
    def new(cls, m: int, count: int) -> "Out":
        """Uninitialised outputs for ``m`` budgets and ``count`` roots."""
        return cls(np.empty((m, count), np.int32), np.empty((m, count)),
                   np.empty((m, count), np.int32))


class Roots(NamedTuple):
    """Roots of trees: keys, and how their context is set (see ``brwsim.kernels.dist``).

    ``mode`` is ROOT_DRAW (each root's context drawn from the stationary law; ``ci``/``cf``
    ignored) or ROOT_PRESET (context ``ci[i]``, latent ``cf[i]``: generation runs). ``head``
    holds one preset head row per root where the family keeps a recurrent state there
    (``charlstm``), or no rows.
    """

    keys: np.ndarray
    mode: int
    ci: np.ndarray
    cf: np.ndarray
    head: np.ndarray = np.empty((0, 1))

    @classmethod
    def stationary(cls, key: np.uint64, first: int, count: int) -> "Roots":
        """The roots of iterations first .. first + count - 1 of a seed key."""
        keys = np.array([root_key(np.uint64(key), np.uint64(first + i)) for i in range(count)],
                        dtype=np.uint64)
        return cls(keys, ROOT_DRAW, np.zeros(count, np.int64), np.zeros(count))

    @classmethod
    def preset(cls, key: int, ci: int, cf: float, head: np.ndarray | None = None) -> "Roots":
        """One root with a given context (the next call of a generation run).

        ``head``: the root's head row, where the family carries a recurrent state.
        """
        rows = np.empty((0, 1)) if head is None else np.ascontiguousarray(head, np.float64)[None, :]
        return cls(np.array([key], np.uint64), ROOT_PRESET, np.array([ci], np.int64),
                   np.array([cf], np.float64), rows)


class Spec(NamedTuple):
    """Flat arrays of a compiled family: its :class:`Law` and the width of a level's head."""

    kinds: np.ndarray
    cw: np.ndarray
    fpar: np.ndarray
    ipar: np.ndarray
    data: np.ndarray
    head_cap: int
    cprog: np.ndarray

    @property
    def law(self) -> Law:
        """The law the kernels take first."""
        return Law(self.kinds, self.cw, self.fpar, self.ipar, self.data, self.cprog)


def compile_spec(comps: list[Component], cprog: np.ndarray | None = None) -> Spec:
    """Pack components (and a context program) into a :class:`Spec`.

    ``ipar[:, DATA_OFF]`` and ``ipar[:, DATA_LEN]`` become the offset and length of each
    component's data block, the other slots are the components' own, by slot; ``cprog``
    defaults to the i.i.d. program (see :mod:`brwsim.kernels.context`). ``kinds``'s dtype
    names the family's kind group (:func:`brwsim.kernels.dist.kinds_dtype`: int8 with a
    contextual component, uint16 with a neural one, int32 with a contextual and a lazy
    one, int16 when every component is a closed form, int64 otherwise):
    each group's kernels are compiled without the other groups' code. ``cprog`` is copied
    into a writable array: families keep theirs read-only, and numba types a read-only
    array apart, so passing it as it is would compile every kernel once more.
    """
    m = len(comps)
    fpar = np.zeros((m, NF))
    ipar = np.zeros((m, NI), np.int64)
    kinds = np.empty(m, np.int64)
    blocks = []
    off = 0
    for c, comp in enumerate(comps):
        kinds[c] = comp.kind
        if not (isinstance(comp.fpar, Mapping) and isinstance(comp.ipar, Mapping)):
            raise TypeError("a Component's fpar and ipar map named slots to values")
        for slot, value in comp.fpar.items():
            fpar[c, slot] = value
        for slot, value in comp.ipar.items():
            if slot < FIRST_OWN:
                raise ValueError(f"ipar slot {slot} is the data block's (compile_spec writes it)")
            ipar[c, slot] = value
        ipar[c, DATA_OFF] = off
        ipar[c, DATA_LEN] = comp.data.size
        blocks.append(np.ascontiguousarray(comp.data, dtype=np.float64).ravel())
        off += comp.data.size
    w = np.array([comp.weight for comp in comps], dtype=np.float64)
    data = np.concatenate(blocks) if blocks else np.zeros(0)
    kinds = kinds.astype(kinds_dtype(kinds))     # the kind group: selects the kernels' code
    return Spec(kinds, np.cumsum(w / w.sum()), fpar, ipar, data,
                max(comp.head_cap for comp in comps),
                np.zeros(1) if cprog is None else np.array(cprog, dtype=np.float64))
