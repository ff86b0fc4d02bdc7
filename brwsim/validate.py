"""Input validation shared by every module: numbers, vectors, sizes, nesting and output paths.

Every check raises :class:`brwsim.errors.UserError` with one line naming the parameter
and echoing at most :data:`MAX_ECHO` characters of the offending value (:func:`echo`).

Documented limits:

* :data:`MAX_NESTING` levels of brackets and calls in a family or policy string, and of
  arrays and objects in one JSON line of ``import-logprobs``;
* :func:`check_work_size`: work whose arrays would not fit in the memory available now is
  refused before allocating, with the amount it would need;
* :func:`check_output_path` / :func:`check_output_dir`: an output is checked to be writable
  (and the file system to have room) before the work that produces it starts; an output
  path that exists must be a regular file (a device, a named pipe, a socket or a folder is
  refused, never replaced), and a path ending in ``/`` names a folder, so it is refused as
  a file name (give ``newdir/out.nc``);
* :func:`check_input_file`: an input (cost table, bank, JSON Lines, corpus, configuration)
  must be an existing regular file; a named pipe or a device is refused before it is
  opened (opening a pipe blocks until a writer comes);
* :func:`check_input_file` with ``max_bytes``: an input read whole (a corpus or prompts
  file: :data:`MAX_TEXT_BYTES`) is refused by its size before it is read;
* :func:`check_range`: one numeric-range check (finite, inside documented bounds,
  integral where an integer is meant) for every parameter of the API and the CLI.
"""

from __future__ import annotations

import math
import numbers
import os
import shutil
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from brwsim.errors import UserError

__all__ = ["MAX_ECHO", "MAX_NESTING", "MAX_TEXT_BYTES", "echo", "check_int", "check_positive", "check_finite",
           "check_vector", "check_probabilities", "available_memory", "format_bytes",
           "check_work_size", "json_depth", "check_json_depth", "check_output_path",
           "check_output_dir", "check_input_file", "check_range", "check_regular_or_absent"]

#: Longest echo of user input in an error message (longer ones are cut, with "...").
MAX_ECHO = 120
#: Deepest nesting accepted in family/policy strings and in one JSON line.
MAX_NESTING = 32
#: Largest draft budget the kernels support.
MAX_BUDGET = 1 << 26
#: Most distinct budgets of one run or sweep.
MAX_BUDGETS = 1 << 16
#: Largest text input read whole (corpus, prompts file): a bigger one is refused by its size.
MAX_TEXT_BYTES = 1 << 26
#: Largest vocabulary a family accepts (2**40 tokens: ranks and counts stay exact in float64).
MAX_VOCAB = 1 << 40


def echo(value: Any, limit: int = MAX_ECHO) -> str:
    """``repr(value)`` cut to ``limit`` characters (ending in ``...``) for error messages."""
    try:
        text = repr(value)
    except RecursionError:
        text = f"<{type(value).__name__} nested too deeply to print>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def check_int(name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    """``value`` as an int in ``[minimum, maximum]``, or a :class:`UserError` naming ``name``.

    Integral floats (``4.0``) are accepted; booleans, strings and fractions are not. The
    message reads "must be a positive integer" (minimum 1), "a non-negative integer"
    (minimum 0) or "an integer >= m".
    """
    if maximum is not None:
        rule = f"an integer in [{minimum}, {maximum}]"
    else:
        rule = {0: "a non-negative integer", 1: "a positive integer"}.get(minimum, f"an integer >= {minimum}")
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
            value = int(value)
        else:
            raise UserError(f"{name} must be {rule}, got {echo(value)}")
    if value < minimum or (maximum is not None and value > maximum):
        raise UserError(f"{name} must be {rule}, got {echo(value)}")
    return int(value)


def check_positive(name: str, value: Any, *, allow_zero: bool = False) -> float:
    """``value`` as a finite float > 0 (>= 0 with ``allow_zero``), or a :class:`UserError`.

    Strings are refused (``"0.05"`` is not a number), as booleans are.
    """
    v = check_finite(name, value)
    if v < 0 or (v == 0 and not allow_zero):
        rule = "a finite non-negative number" if allow_zero else "a finite number > 0"
        raise UserError(f"{name} must be {rule}, got {echo(value)}")
    return v


def check_finite(name: str, value: Any) -> float:
    """``value`` as a finite float (a real number, not a string), or a :class:`UserError`."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise UserError(f"{name} must be a number, got {echo(value)}")
    try:
        v = float(value)
    except OverflowError:
        v = math.inf
    if not math.isfinite(v):
        raise UserError(f"{name} must be a finite number, got {echo(value)}")
    return v


def check_range(name: str, value: Any, low: float | None = None, high: float | None = None,
                *, integer: bool = False, low_open: bool = False, why: str = "") -> float | int:
    """``value`` as a finite number in ``[low, high]`` (``(low, high]`` with ``low_open``).

    The one numeric-range check of the API and the CLI: booleans, strings, NaN and the
    infinities are refused, and so is a value outside the documented range (``why`` says
    why it is bounded, e.g. ``"the step time would overflow"``); with ``integer`` the value
    must be integral (``4.0`` is accepted) and an ``int`` is returned, checked exactly
    (no float rounding of ``10**20``).

    Raises
    ------
    brwsim.errors.UserError
        One line naming ``name``, the range and the value.
    """
    if integer:
        lo = -(1 << 63) if low is None else math.ceil(low) + (1 if low_open and low == math.ceil(low) else 0)
        hi = None if high is None else math.floor(high)
        try:
            return check_int(name, value, lo, hi)
        except UserError as exc:
            if not why:
                raise
            raise UserError(f"{exc} ({why})") from None
    v = check_finite(name, value)
    below = low is not None and (v <= low if low_open else v < low)
    above = high is not None and v > high
    if below or above:
        left = "(" if low_open else "["
        rng = (f"in {left}{low:g}, {high:g}]" if low is not None and high is not None
               else f">{'' if low_open else '='} {low:g}" if low is not None else f"<= {high:g}")
        more = f" ({why})" if why else ""
        raise UserError(f"{name} must be a number {rng}{more}, got {echo(value)}")
    return v


def check_vector(name: str, values: Any) -> np.ndarray:
    """A flat list of finite non-negative real numbers as a float64 array.

    Refuses strings, mappings, nested lists and non-numeric entries with one line naming
    the first bad entry (``probs[1]``).
    """
    if isinstance(values, np.ndarray) and values.ndim == 1 and values.dtype.kind in "iuf":
        items: Sequence[Any] = values.tolist()
    elif isinstance(values, (list, tuple)):
        items = values
    else:
        raise UserError(f"{name} must be a list of numbers, got {echo(values)}")
    if not items:
        raise UserError(f"{name} must be a non-empty list of numbers, got {echo(values)}")
    out = np.empty(len(items))
    for i, v in enumerate(items):
        out[i] = check_positive(f"{name}[{i}]", v, allow_zero=True)
    return out


def check_probabilities(name: str, values: Any, *, total: float | None = 1.0) -> np.ndarray:
    """:func:`check_vector`, with a positive entry and a sum of at most ``total`` (1e-9 slack)."""
    q = check_vector(name, values)
    if not (q > 0).any():
        raise UserError(f"{name} must contain a positive number")
    if total is not None:
        s = math.fsum(q.tolist())
        if s > total + 1e-9:
            raise UserError(f"{name} must sum to at most {total:g}, got {s:.12g}")
    return q


def available_memory() -> int:
    """Bytes of memory available now (``MemAvailable``, or 2**63 when unknown), at most
    the process's address-space limit (``RLIMIT_AS``) where one is set."""
    avail = _mem_available()
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            avail = min(avail, soft)
    except (ImportError, OSError, ValueError):  # pragma: no cover - not POSIX
        pass
    return avail


def _mem_available() -> int:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 63


def format_bytes(n: float) -> str:
    """``n`` bytes in the largest binary unit below it: ``'8 TiB'``, ``'1.5 GiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if abs(n) < 1024 or unit == "EiB":
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} EiB"  # pragma: no cover


def check_work_size(nbytes: float, what: str, hint: str = "") -> None:
    """Refuse work whose arrays (``nbytes``) exceed the memory available now.

    Parameters
    ----------
    nbytes : float
        Memory the work needs (a float: it may exceed 2**63).
    what : str
        What would be allocated, for the message (``"simulate: 2 budgets x 10**12 iterations"``).
    hint : str, optional
        What to change, appended to the message.
    """
    avail = available_memory()
    if nbytes > avail:
        more = f"; {hint}" if hint else ""
        raise UserError(f"{what} would need {format_bytes(nbytes)} of memory, "
                        f"{format_bytes(avail)} available{more}")


def json_depth(text: str) -> int:
    """Deepest nesting of arrays and objects in a JSON text (brackets inside strings ignored)."""
    if text.count("[") + text.count("{") == 0:
        return 0
    plain = text.replace("\\\\", "").replace('\\"', "")
    b = np.frombuffer(plain.encode("utf-8", "replace"), np.uint8)
    inside = (np.cumsum(b == ord('"')) & 1).astype(bool)
    step = (((b == ord("[")) | (b == ord("{"))).astype(np.int64)
            - ((b == ord("]")) | (b == ord("}"))).astype(np.int64))
    step[inside] = 0
    return int(np.cumsum(step).max(initial=0))


def check_json_depth(text: str, where: str, limit: int = MAX_NESTING) -> None:
    """Refuse JSON text nested deeper than ``limit`` levels (before ``json.loads`` recurses)."""
    if text.count("[") + text.count("{") > limit and json_depth(text) > limit:
        raise UserError(f"{where}: JSON nested deeper than {limit} levels")


def _nearest_existing(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _probe_writable(folder: Path, what: str) -> None:
    """Create and delete a file in ``folder`` (works for every user, root included)."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".brwsim-probe.", dir=folder)
    except OSError as exc:
        raise UserError(f"{what}: cannot write in {folder} ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(tmp)


def _check_room(folder: Path, nbytes: float, what: str) -> None:
    if nbytes <= 0:
        return
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return
    if nbytes > free:
        raise UserError(f"{what}: needs about {format_bytes(nbytes)} but {folder} has "
                        f"{format_bytes(free)} free (disk full)")


def _kind(mode: int) -> str:
    """What a file of this ``st_mode`` is, for messages (``"a named pipe"``)."""
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _check_path_type(path: Any, what: str) -> None:
    if not isinstance(path, (str, os.PathLike)):
        raise UserError(f"{what} must be a file path (str or os.PathLike), got {echo(path)}")


def check_regular_or_absent(path: str | os.PathLike[str], what: str = "output") -> Path:
    """Refuse an output path that exists and is not a regular file, or is a symbolic link.

    A device (``/dev/null``), a named pipe, a socket, a folder or a symbolic link at
    ``path`` would be replaced by the rename of an atomic write (or block the writer):
    refused with one line. A path ending in ``/`` names a folder and is refused as a file
    name; an empty path is refused.
    """
    _check_path_type(path, what)
    text = os.fspath(path)
    if text == "":
        raise UserError(f"{what}: empty path (give a file name)")
    dest = Path(text)
    if text.endswith(("/", os.sep)):
        raise UserError(f"{what} {text}: ends in '/', so it names a folder, not a file "
                        f"(give a file name such as {text}out.nc)")
    if os.path.islink(dest):
        raise UserError(f"{what} {dest}: is a symbolic link (to {echo(os.readlink(dest), 80)}); "
                        "brwsim would replace the link, not write through it: give the "
                        "target's own path or remove the link")
    try:
        st = os.stat(dest)
    except (FileNotFoundError, NotADirectoryError):   # the parent check says what is wrong
        return dest
    except OSError as exc:
        raise UserError(f"{what} {dest}: cannot check it ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise UserError(f"{what} {dest}: is an existing folder, not a file name")
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{what} {dest}: is {_kind(st.st_mode)}, not a regular file "
                        "(brwsim writes only regular files; it would be replaced)")
    return dest


def check_input_file(path: str | os.PathLike[str], what: str = "input",
                     max_bytes: float | None = None) -> Path:
    """``path`` as an existing regular file, checked (``stat``) before it is opened.

    A missing path, a folder, a named pipe (opening one blocks until a writer comes) and a
    device are refused with one line naming ``what`` and the path; so is (with
    ``max_bytes``) a file larger than ``max_bytes``, a sparse file included, by its
    declared size and before any byte is read.
    """
    _check_path_type(path, what)
    p = Path(path)
    if os.fspath(path) == "":
        raise UserError(f"{what}: empty path")
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise UserError(f"{what} {p}: no such file") from None
    except OSError as exc:
        raise UserError(f"{what} {p}: cannot read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{what} {p}: is {_kind(st.st_mode)}, not a regular file")
    if max_bytes is not None and st.st_size > max_bytes:
        raise UserError(f"{what} {p}: is {format_bytes(st.st_size)}, above the "
                        f"{format_bytes(max_bytes)} this input may have")
    return p


def check_output_path(path: str | os.PathLike[str], what: str = "output",
                      nbytes: float = 0) -> Path:
    """Check that a file can be written at ``path`` before the work producing it starts.

    Refuses an existing folder, device, named pipe or socket at ``path`` (only a regular
    file is replaced; :func:`check_regular_or_absent`), a path ending in ``/``, a regular
    file where a parent folder should be, a folder that cannot be written, and (with
    ``nbytes``) a file system without room for about ``nbytes``. Nothing is left behind:
    missing parent folders are not created.

    Returns
    -------
    pathlib.Path
    """
    _check_path_type(path, what)
    if str(path) == "":
        raise UserError(f"{what}: empty path")
    dest = check_regular_or_absent(path, what)
    label = f"{what} {dest}"
    base = _nearest_existing(dest.parent)
    if not base.is_dir():
        raise UserError(f"{label}: {base} is a file, not a folder")
    _probe_writable(base, label)
    _check_room(base, nbytes, label)
    return dest


def check_output_dir(path: str | os.PathLike[str], what: str = "output folder",
                     nbytes: float = 0) -> Path:
    """Like :func:`check_output_path` for a folder (which may exist; a file there is refused)."""
    _check_path_type(path, what)
    dest = Path(path)
    label = f"{what} {dest}"
    if str(path) == "":
        raise UserError(f"{what}: empty path")
    if dest.exists() and not dest.is_dir():
        raise UserError(f"{label}: exists and is not a folder")
    base = _nearest_existing(dest)
    if not base.is_dir():
        raise UserError(f"{label}: {base} is a file, not a folder")
    _probe_writable(base, label)
    _check_room(base, nbytes, label)
    return dest
