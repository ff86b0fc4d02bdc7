""".npz input files: arrays of top-k log-probabilities, read a block of rows at a time.

An archive holds a ``logprobs`` array of shape (positions, k), sorted or not, float of any
width; ``-inf`` marks a masked entry (probability 0). Optional 1-D arrays of length
positions: ``sampled_rank`` (rank of the sampled token in the full distribution sorted in
descending order, 0 = most likely, negative = unknown), ``sampled_logprob`` (used to find
the sampled token among the top-k entries when ``sampled_rank`` is absent) and ``sequence``
(which generation a row belongs to). The arrays are taken as exact top-k rows (no
appended sampled token). The file is read in blocks of rows straight from the archive, so
memory does not grow with its size.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from brwsim.bank.collect import Collector
from brwsim.validate import check_work_size

__all__ = ["SUFFIXES", "read_npz_file"]

SUFFIXES = (".npz",)
#: Array elements read from an .npz file at a time.
BLOCK_ELEMENTS = 1 << 19


class _NpyRows:
    """Read rows of an .npy member of a zip archive a block at a time."""

    def __init__(self, zf: zipfile.ZipFile, name: str) -> None:
        self.fh = zf.open(name)
        version = np.lib.format.read_magic(self.fh)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(self.fh)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(self.fh)
        else:
            raise ValueError(f"unsupported .npy format version {version}")
        if dtype.hasobject:
            raise ValueError("object arrays are not supported")
        self.shape: tuple[int, ...] = tuple(shape)
        self.dtype = dtype
        self.row_size = int(np.prod(self.shape[1:], dtype=np.int64)) if self.shape else 1
        self.whole: np.ndarray | None = None
        if fortran and len(self.shape) > 1:
            self.whole = np.lib.format.read_array(zf.open(name))
        self.done = 0

    def read(self, nrows: int) -> np.ndarray:
        """The next ``nrows`` rows (fewer at the end of the array)."""
        nrows = min(nrows, self.shape[0] - self.done)
        if self.whole is not None:
            out = self.whole[self.done:self.done + nrows]
        else:
            nbytes = nrows * self.row_size * self.dtype.itemsize
            data = self.fh.read(nbytes)
            if len(data) != nbytes:
                raise ValueError("truncated array data")
            out = np.frombuffer(data, dtype=self.dtype).reshape((nrows,) + self.shape[1:])
        self.done += nrows
        return out


def _open_npz_members(zf: zipfile.ZipFile, path: Path) -> dict[str, _NpyRows]:
    """Open the arrays of an .npz file; raise ValueError with a reason when unusable."""
    names = {n[:-4]: n for n in zf.namelist() if n.endswith(".npy")}
    if "logprobs" not in names:
        found = ", ".join(sorted(names)) or "none"
        raise ValueError(f"no 'logprobs' array (arrays found: {found})")
    members = {key: _NpyRows(zf, names[key])
               for key in ("logprobs", "sampled_rank", "sampled_logprob", "sequence")
               if key in names}
    lp = members["logprobs"]
    if len(lp.shape) != 2:
        raise ValueError(f"'logprobs' must have shape (positions, k), got {lp.shape}")
    # the bank keeps every position's probabilities (float64) in memory: refuse up front
    check_work_size(float(lp.shape[0]) * lp.shape[1] * 8, f"'logprobs' of shape {lp.shape}")
    if lp.dtype.kind != "f":
        raise ValueError(f"'logprobs' must be a float array, got {lp.dtype}")
    for key in ("sampled_rank", "sampled_logprob", "sequence"):
        if key in members and members[key].shape != (lp.shape[0],):
            raise ValueError(f"'{key}' has shape {members[key].shape}, expected "
                             f"({lp.shape[0]},) to match 'logprobs'")
    for key in ("sampled_rank", "sequence"):
        if key in members and members[key].dtype.kind not in "iu":
            raise ValueError(f"'{key}' must be an integer array, got {members[key].dtype}")
    return members


def _sampled_col_from_logprob(lp: np.ndarray, sampled: np.ndarray) -> np.ndarray:
    """Column of the entry equal (within 1e-5) to the sampled log-probability, or -1."""
    with np.errstate(invalid="ignore"):
        close = np.abs(lp - sampled[:, None]) <= 1e-5 * np.maximum(1.0, np.abs(sampled[:, None]))
    return np.where(close.any(axis=1), close.argmax(axis=1), -1)


def read_npz_file(col: Collector, path: Path) -> bool:
    """Read one .npz file; return False when it has no rows."""
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        col.bad(str(path), f"not a readable .npz file ({exc})", line_level=True)
        return True
    with zf:
        try:
            members = _open_npz_members(zf, path)
        except (ValueError, OSError, zipfile.BadZipFile) as exc:
            col.bad(str(path), str(exc), line_level=True)
            return True
        n, k = members["logprobs"].shape
        if n == 0 or k == 0:
            return False
        col.formats.add("npz")
        block = max(1, BLOCK_ELEMENTS // k)
        offset = col.next_sequence
        top_sequence = offset
        for start in range(0, n, block):
            try:
                chunk = {key: m.read(block) for key, m in members.items()}
            except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
                col.bad(f"{path}: row {start}", f"cannot read array data ({exc})",
                        line_level=True)
                break
            lp = chunk["logprobs"].astype(np.float64)
            rows = lp.shape[0]
            seq = (offset + chunk["sequence"].astype(np.int64) if "sequence" in chunk
                   else np.full(rows, offset, dtype=np.int64))
            top_sequence = max(top_sequence, int(seq.max()) + 1)
            sampled_col = rank = None
            if "sampled_rank" in chunk:
                rank = chunk["sampled_rank"].astype(np.int64)
            elif "sampled_logprob" in chunk:
                sampled_col = _sampled_col_from_logprob(lp,
                                                        chunk["sampled_logprob"].astype(float))
            col.add_block(lp, sampled_col=sampled_col, sampled_rank=rank, drop_appended=False,
                          where=lambda i, start=start: f"{path}: row {start + i}",
                          sequence=seq)
        col.next_sequence = top_sequence
    return True

