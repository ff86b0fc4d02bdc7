"""One shard file: its contents in memory, its digest, its atomic write and its checked read.

A shard is a small netCDF-4 file (:mod:`brwsim.sweep.shards` says what it holds). It is
written and read with ``netCDF4`` directly: a sweep writes one per task and its merge reads
each again, and going through xarray cost several times the file's own input and output
(and imported dask with it). The files are plain netCDF, so ``xarray.open_dataset`` reads
them too.

Integrity: every array variable carries a Fletcher-32 checksum (HDF5 verifies it on read),
and the global attribute ``checksum_sha256`` holds :func:`digest`: a SHA-256 of every
variable's values (scalars too), every coordinate and every other global attribute, so an
element edited through netCDF (which recomputes the Fletcher-32) is caught as well.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from brwsim.interrupt import check_interrupted
from brwsim.io import atomic_netcdf

__all__ = ["Variable", "Shard", "ShardWriter", "digest", "seal", "write_shard", "read_shard_file",
           "DIGEST"]

#: The global attribute holding :func:`digest`.
DIGEST = "checksum_sha256"


@dataclass
class Variable:
    """A data variable: its dimension names, its values and its attributes."""

    dims: tuple[str, ...]
    values: np.ndarray
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Shard:
    """A shard's contents.

    Attributes
    ----------
    variables : dict of str to Variable
        The data variables (0-d for scalars such as ``mu``).
    coords : dict of str to numpy.ndarray
        The dimension coordinates: 1-d, each named after its dimension (``budget``,
        ``iteration``). A dimension without one (``accepted_value``) has none.
    attrs : dict
        The global attributes.
    """

    variables: dict[str, Variable]
    coords: dict[str, np.ndarray]
    attrs: dict[str, Any]

    def __getitem__(self, name: str) -> np.ndarray:
        """The values of a data variable or a coordinate."""
        var = self.variables.get(name)
        return var.values if var is not None else self.coords[name]

    def __contains__(self, name: object) -> bool:
        return name in self.variables or name in self.coords

    def var_attrs(self, name: str) -> dict[str, Any]:
        """The attributes of a data variable."""
        return self.variables[name].attrs


def _norm(v: Any) -> Any:
    """An attribute or scalar as JSON: floats exact (``float.hex``), numpy scalars as Python."""
    v = v.item() if isinstance(v, np.generic) else v
    if isinstance(v, np.ndarray):
        return [_norm(x) for x in v.tolist()]
    return float(v).hex() if isinstance(v, float) else v if isinstance(v, (int, str)) else repr(v)


def digest(shard: Shard) -> str:
    """SHA-256 of the shard's variables, coordinates and attributes (all but the digest).

    Scalars and attributes enter as JSON with floats as ``float.hex`` (exact); arrays
    (variables and coordinates) as their name, shape and bytes in a canonical dtype
    (int64 for integers, float64 for floats, little-endian), so any changed element is
    detected, whatever netCDF recomputed.
    """
    h = hashlib.sha256()
    scalars = {name: _norm(np.asarray(var.values).item())
               for name, var in sorted(shard.variables.items()) if np.ndim(var.values) == 0}
    attrs = {k: _norm(v) for k, v in sorted(shard.attrs.items()) if k != DIGEST}
    h.update(json.dumps({"scalars": scalars, "attrs": attrs}, sort_keys=True).encode())
    arrays = {**{n: v.values for n, v in shard.variables.items() if np.ndim(v.values) > 0},
              **{f"coord:{n}": c for n, c in shard.coords.items()}}
    for name in sorted(arrays):
        values = np.asarray(arrays[name])
        kind = "<i8" if values.dtype.kind in "iub" else "<f8" if values.dtype.kind == "f" else None
        h.update(f"|{name}|{values.shape}|".encode())
        h.update(np.ascontiguousarray(values, dtype=kind).tobytes() if kind
                 else repr(values.tolist()).encode())
    return h.hexdigest()


def seal(shard: Shard) -> Shard:
    """Record :func:`digest` in the shard's attributes; returns the shard."""
    shard.attrs[DIGEST] = digest(shard)
    return shard


def write_shard(shard: Shard, path: str | os.PathLike[str]) -> None:
    """Write a sealed shard to ``path`` atomically (a temporary file beside it, then a rename).

    Raises
    ------
    brwsim.errors.UserError
        When the file system is full or the write fails; nothing is left at ``path``.
    """
    import netCDF4

    dest = Path(path)
    sizes = {name: np.size(values) for name, values in shard.coords.items()}
    for var in shard.variables.values():
        sizes.update((d, n) for d, n in zip(var.dims, np.shape(var.values)) if d not in sizes)
    with atomic_netcdf(dest, clean=False) as tmp, \
            netCDF4.Dataset(tmp, "w", format="NETCDF4") as nc:
        nc.setncatts(shard.attrs)
        for name, n in sizes.items():
            nc.createDimension(name, n)
        for name, dims, values, attrs in (
                *((n, (n,), c, {}) for n, c in shard.coords.items()),
                *((n, v.dims, v.values, v.attrs) for n, v in shard.variables.items())):
            values = np.asarray(values)
            out = nc.createVariable(name, values.dtype, dims, fill_value=False,
                                    fletcher32=values.ndim > 0)
            if attrs:
                out.setncatts(attrs)
            if values.ndim:
                out[:] = values
            else:
                out.assignValue(values)


def read_shard_file(path: str | os.PathLike[str]) -> Shard:
    """Read a shard file completely (HDF5 verifies every Fletcher-32 checksum on the way).

    Raises
    ------
    Exception
        Whatever netCDF, HDF5 or the file system raise for a file that cannot be read;
        the caller treats any of them as a corrupt shard.
    """
    import netCDF4

    with netCDF4.Dataset(path, "r") as nc:
        nc.set_auto_mask(False)
        attrs = {k: nc.getncattr(k) for k in nc.ncattrs()}
        coords: dict[str, np.ndarray] = {}
        variables: dict[str, Variable] = {}
        for name, var in nc.variables.items():
            values = np.asarray(var[...])
            if var.dimensions == (name,):
                coords[name] = values
            else:
                variables[name] = Variable(var.dimensions, values,
                                           {k: var.getncattr(k) for k in var.ncattrs()
                                            if not k.startswith("_")})
    check_interrupted()            # a Ctrl-C that netCDF4 caught while reading
    return Shard(variables, coords, attrs)


class ShardWriter:
    """Writes shards in one thread beside the caller's kernel calls (which release the
    GIL), in the order given, each through :func:`write_shard`.

    Used as a context manager: leaving it writes every shard still queued, on an error
    too (they are finished work a resumed sweep reuses; after Ctrl-C in the command none
    is renamed into place, :func:`brwsim.interrupt.check_interrupted`), and then raises the
    first failed write's error (a full disk's :class:`brwsim.errors.UserError`). Once a
    write has failed, the later ones are skipped and :meth:`put` raises that error. Only
    this thread touches netCDF while the writer is open.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Shard, str] | None] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._write_all, name="brwsim-shard-writer",
                                        daemon=True)

    def __enter__(self) -> "ShardWriter":
        self._thread.start()
        return self

    def put(self, shard: Shard, path: str | os.PathLike[str]) -> None:
        """Queue ``shard`` to be written to ``path``."""
        if self._error is not None:
            raise self._error
        self._queue.put((shard, os.fspath(path)))

    def _write_all(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._error is None:
                try:
                    write_shard(*item)
                except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                    self._error = exc

    def __exit__(self, *exc: Any) -> None:
        self._queue.put(None)
        self._thread.join()
        if self._error is not None and exc[0] is None:
            raise self._error
