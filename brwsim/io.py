"""netCDF output: CF-style attributes, provenance and atomic writes.

Every file brwsim writes goes through :func:`atomic_path` (datasets through
:func:`write_netcdf_atomic` or :func:`atomic_netcdf`): it is written to a temporary name in
the destination folder and renamed into place, so a crash or a bad input never leaves a
half-written file under the final name.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import os
import platform
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from brwsim.errors import UserError
from brwsim.gitcommit import running_commit
from brwsim.interrupt import check_interrupted
from brwsim.lazy import xarray as xr
from brwsim.validate import available_memory, check_input_file, check_regular_or_absent, format_bytes
from brwsim.version import __version__

__all__ = ["provenance_attrs", "code_attrs", "atomic_path", "atomic_netcdf", "remove_stale_temporaries", "write_netcdf_atomic", "write_error",
           "open_dataset", "check_netcdf_size"]

CONVENTIONS = "CF-1.10"


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 (hex) of a file's bytes, read in 1 MiB blocks."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def code_attrs() -> dict[str, str]:
    """The attributes naming the brwsim code that runs: ``brwsim_version`` and
    ``git_commit`` (:func:`brwsim.gitcommit.running_commit`), as every file and every sweep
    shard records them.

    Returns
    -------
    dict of str to str
    """
    return {"brwsim_version": __version__, "git_commit": running_commit()}


def provenance_attrs(title: str, config: dict[str, Any], seed: int,
                     command: str = "") -> dict[str, str]:
    """Global attributes recording what produced a dataset.

    Parameters
    ----------
    title : str
        Human-readable title of the dataset.
    config : dict
        The run's configuration; stored as JSON in ``config_json``.
    seed : int
        Root seed; stored as a decimal string (it may exceed 64 bits).
    command : str, optional
        Command line or call that produced the data, for ``history``.

    Returns
    -------
    dict of str to str
    """
    import importlib.metadata

    import numba

    now = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()
    return {
        "Conventions": CONVENTIONS,
        "title": title,
        "source": f"brwsim {__version__}",
        "history": f"{now} {command or 'brwsim'}",
        "config_json": json.dumps(config, sort_keys=True),
        "seed_entropy": str(int(seed)),
        "log_base": "natural logarithms (nats) everywhere",
        **code_attrs(),
        "numpy_version": np.__version__,
        "numba_version": numba.__version__,
        "xarray_version": importlib.metadata.version("xarray"),   # without importing it
        "python_version": platform.python_version(),
        "date_created": now,
    }


def _umask() -> int:
    """The process umask (read by setting it and restoring it at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _owner_tag() -> str:
    """``<host>-<pid>``: the host (8 hex digits of its name's SHA-256) and the process that
    writes a temporary file, in its name, so a later run can tell a dead writer's file."""
    import hashlib
    import socket

    host = hashlib.sha256(socket.gethostname().encode("utf-8", "replace")).hexdigest()[:8]
    return f"{host}-{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):     # another user's, or not a pid
        return True
    return True


def remove_stale_temporaries(dest: Path) -> None:
    """Delete the temporary files of earlier writes of ``dest`` whose writer is dead.

    Only files named by :func:`atomic_path` (``.<name>.<host>-<pid>-<random><suffix>``)
    on this host by a process that no longer exists are removed (a SIGKILL during a write
    leaves one): a live writer's file, another host's, and every other file are kept.
    """
    import re

    host, _ = _owner_tag().split("-")
    pattern = re.compile(re.escape(f".{dest.name}.") + r"([0-9a-f]{8})-(\d{1,10})-[A-Za-z0-9_]+\.tmp\Z")
    try:
        names = [n for n in os.listdir(dest.parent) if n.startswith(f".{dest.name}.")]
    except OSError:
        return
    for name in names:
        m = pattern.match(name)
        if m and m.group(1) == host and int(m.group(2)) != os.getpid() and not _alive(int(m.group(2))):
            with contextlib.suppress(OSError):
                (dest.parent / name).unlink()


@contextmanager
def atomic_path(path: str | os.PathLike[str], suffix: str = ".tmp",
                clean: bool = True) -> Iterator[Path]:
    """A temporary path beside ``path``, renamed onto it when the block succeeds.

    The temporary name is ``.<name>.<host>-<pid>-<random><suffix>`` in the destination
    folder (created if missing); on any exception it is deleted and ``path`` is left
    untouched. Temporary files of earlier writes of ``path`` by dead processes of this
    host are removed first (:func:`remove_stale_temporaries`; not with ``clean`` False, for
    a sweep's shards, whose folder the sweep cleans once under its lock instead of listing
    it at every shard). The final file gets the
    permissions of a normally created one (``0o666`` minus the umask), not the private
    ``0o600`` of a temporary file, so that shared sweep folders stay readable.

    Only a regular file is ever replaced: a device, named pipe, socket, folder or symbolic
    link at ``path`` (or a path ending in ``/``, or an empty one) is refused with a
    :class:`UserError` before anything is created
    (:func:`brwsim.validate.check_regular_or_absent`), and a folder that cannot be written
    is reported under ``path``, not under the temporary name.
    """
    dest = check_regular_or_absent(path)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        if clean:
            remove_stale_temporaries(dest)
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.{_owner_tag()}-", suffix=suffix,
                                   dir=dest.parent)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise UserError(f"{dest}: disk full: free some space or write elsewhere") from None
        raise UserError(f"{dest}: cannot write in {dest.parent} ({exc.strerror or exc})") from None
    os.close(fd)
    try:
        yield Path(tmp)
        check_interrupted()            # a Ctrl-C that a library swallowed: no result
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_netcdf_atomic(ds: xr.Dataset, path: str | os.PathLike[str], clean: bool = True) -> Path:
    """Write ``ds`` to ``path`` atomically (temporary file in the same folder, then rename).

    Parameters
    ----------
    ds : xarray.Dataset
        Dataset to write.
    path : path-like
        Destination; its folder is created if missing.
    clean : bool, default True
        Remove dead writers' temporary files of ``path`` first (:func:`atomic_path`).

    Returns
    -------
    pathlib.Path
        The destination path.

    Raises
    ------
    brwsim.errors.UserError
        When the file system is full or the write fails ("NetCDF: HDF error" says neither);
        nothing is left under ``path`` or beside it.
    """
    with atomic_netcdf(path, clean=clean, nbytes=ds.nbytes) as tmp:
        ds.to_netcdf(tmp, engine="netcdf4")
    return Path(path)


@contextmanager
def atomic_netcdf(path: str | os.PathLike[str], clean: bool = True,
                  nbytes: float = 0) -> Iterator[Path]:
    """:func:`atomic_path` for a netCDF write: the block writes the temporary path it is
    given (with xarray or ``netCDF4``), and a failure there (netCDF's and HDF5's
    ``RuntimeError``, an ``OSError``) becomes :func:`write_error`'s one line, ``nbytes``
    being what the write needed. Nothing is left under ``path`` or beside it."""
    dest = Path(path)
    with atomic_path(dest, clean=clean) as tmp:
        try:
            yield tmp
        except (RuntimeError, OSError) as exc:
            raise write_error(dest, exc, nbytes) from None


def write_error(path: Path, exc: BaseException, nbytes: float = 0) -> Exception:
    """The one-line error of a failed write: "disk full" when the file system has no room.

    netCDF and HDF5 report a full disk as ``RuntimeError: NetCDF: HDF error``; the free
    space of the destination's file system tells the cases apart. Other errors are
    returned unchanged (a programming error must still show its traceback).
    """

    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        free = None
    full = getattr(exc, "errno", None) == errno.ENOSPC or (
        free is not None and free < max(float(nbytes), 1 << 20))
    if full:
        room = f" ({format_bytes(free)} free)" if free is not None else ""
        return UserError(f"{path}: disk full{room}: free some space or write elsewhere")
    if isinstance(exc, OSError) or "NetCDF" in str(exc) or "HDF" in str(exc):
        return UserError(f"{path}: cannot write the file ({exc})")
    return exc


def check_netcdf_size(path: str | os.PathLike[str]) -> None:
    """Refuse a netCDF file whose variables declare more bytes than the memory available
    (:func:`brwsim.validate.available_memory`), from its header, before any is read.

    A file of a few KiB may declare a dimension of 2**34 (unwritten chunks take no room);
    loading it would allocate all of it. Files netCDF cannot open are left to the reader,
    which reports them.
    """
    import netCDF4

    try:
        nc = netCDF4.Dataset(path, "r")
    except (OSError, ValueError, RuntimeError):
        return
    total, largest = 0.0, ("", 0)
    try:
        stack = [nc]
        while stack:
            group = stack.pop()
            stack.extend(group.groups.values())
            for name, dim in group.dimensions.items():
                if len(dim) > largest[1]:
                    largest = (name, len(dim))
            for var in group.variables.values():
                width = var.dtype.itemsize if isinstance(var.dtype, np.dtype) else 8
                total += float(np.prod([float(n) for n in var.shape])) * width
    finally:
        nc.close()
    avail = available_memory()
    if total > avail:
        raise UserError(f"{path}: declares {format_bytes(total)} of variables (dimension "
                        f"'{largest[0]}' of length {largest[1]}), more than the "
                        f"{format_bytes(avail)} of memory available: not read")


def open_dataset(path: str | os.PathLike[str]) -> xr.Dataset:
    """Open a brwsim netCDF file fully into memory, with a clear error for a bad file.

    Raises
    ------
    brwsim.errors.UserError
        When the file is missing or is not a readable netCDF file.
    """

    p = check_input_file(path, "netCDF file")
    check_netcdf_size(p)
    try:
        with xr.open_dataset(p, engine="netcdf4") as ds:
            return ds.load()
    except (OSError, ValueError) as exc:
        raise UserError(f"{p}: not a readable netCDF file ({exc})") from None
    except RuntimeError as exc:       # HDF5: a Fletcher-32 checksum failed, a chunk is bad
        raise UserError(f"{p}: corrupt netCDF file ({exc}: a checksum failed or the data "
                        "are damaged)") from None
