"""The importer: input files of any source -> one validated bank.

The format of each file is chosen by its extension: ``.jsonl``, ``.ndjson`` and ``.json``
are read by :mod:`brwsim.bank.jsonfile` (OpenAI-compatible responses and llama.cpp's native
ones), ``.npz`` by :mod:`brwsim.bank.npz`. Files are read in order and streamed; rows are
validated a block at a time (:mod:`brwsim.bank.rows`). A position's ``k`` is its number of
positive entries; positions with fewer than the bank's k (the maximum over positions, or
``top_k``) are padded with zeros.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from brwsim.bank import jsonfile, npz
from brwsim.bank.collect import BadInputWarning, Collector
from brwsim.bank.store import bank_dataset
from brwsim.errors import UserError
from brwsim.io import write_netcdf_atomic
from brwsim.lazy import xarray as xr
from brwsim.validate import MAX_VOCAB, check_input_file, check_int, check_output_path

__all__ = ["import_arrays", "import_logprobs", "READERS"]

#: File suffix -> reader(collector, path) returning False for an empty file.
READERS: dict[str, Callable[[Collector, Path], bool]] = {
    **{suffix: jsonfile.read_json_file for suffix in jsonfile.SUFFIXES},
    **{suffix: npz.read_npz_file for suffix in npz.SUFFIXES},
}


def _check_paths(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
                 ) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = [Path(p) for p in paths]
    if not out:
        raise UserError("import-logprobs: no input files given")
    for p in out:
        check_input_file(p, "input")
        if p.suffix.lower() not in READERS:
            raise UserError(f"{p}: unknown format '{p.suffix}' (expected one of "
                            f"{', '.join(READERS)})")
    return out


def _assemble(col: Collector) -> dict[str, np.ndarray]:
    """Concatenate the accumulated rows, zero padded to a common k."""
    k = max(r.probs.shape[1] for r in col.rows)
    n = sum(len(r.tail) for r in col.rows)
    probs = np.zeros((n, k))
    start = 0
    for r in col.rows:
        probs[start:start + len(r.tail), :r.probs.shape[1]] = r.probs
        start += len(r.tail)
    bounds = [np.concatenate([r.bounds[i] for r in col.rows]) for i in range(4)]
    return {
        "probs": probs,
        "tail_mass": np.concatenate([r.tail for r in col.rows]),
        "sampled_rank": np.concatenate([r.rank for r in col.rows]),
        "sequence": np.concatenate([r.sequence for r in col.rows]),
        "entropy_lower": bounds[0], "entropy_upper": bounds[1],
        "mu2_lower": bounds[2], "mu2_upper": bounds[3],
    }


def import_logprobs(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
                    out: str | os.PathLike[str] | None = None, *, skip_bad: bool = False,
                    top_k: int | None = None, vocab: int | None = None,
                    command: str = "") -> xr.Dataset:
    """Read next-token log-probabilities and build a bank Dataset.

    The input shapes are described in :mod:`brwsim.bank.openai_json`,
    :mod:`brwsim.bank.llamacpp` and :mod:`brwsim.bank.npz`, the row conventions in
    :mod:`brwsim.bank.rows`, the bounds in :mod:`brwsim.bank.bounds` and ``docs/banks.md``.

    Parameters
    ----------
    paths : path-like or sequence of path-like
        ``.jsonl``/``.ndjson``/``.json`` files of OpenAI-compatible or llama.cpp responses,
        or ``.npz`` files with a ``logprobs`` array; read in order, streaming.
    out : path-like, optional
        Write the bank there (atomically) when given.
    skip_bad : bool, default False
        Skip bad positions, lines and files with a :class:`BadInputWarning` giving their count,
        instead of raising on the first one.
    top_k : int, optional
        Keep at most this many entries per position (the rest joins the tail).
    vocab : int, optional
        Vocabulary size; makes the upper bounds finite.
    command : str, optional
        Recorded in the ``history`` attribute.

    Returns
    -------
    xarray.Dataset
        Dims ``position`` and ``rank``; the variables of
        :data:`brwsim.bank.store.BANK_VARIABLES` (``probs``, ``tail_mass``,
        ``sampled_rank``, ``sequence``, ``entropy_lower``, ``entropy_upper``,
        ``mu2_lower``, ``mu2_upper``).

    Raises
    ------
    brwsim.errors.UserError
        On the first bad position, line or file (``file:line: problem``; ``file: row i``
        for .npz) unless ``skip_bad``; when no valid position remains; for unknown
        extensions, missing files or bad parameters. Nothing is written then.
    """
    files = _check_paths(paths)
    col = Collector(skip_bad=skip_bad,
                    top_k=None if top_k is None else check_int("top_k", top_k, 1, MAX_VOCAB),
                    vocab=None if vocab is None else check_int("vocab", vocab, 1, MAX_VOCAB))
    if out is not None:          # writable, before reading the inputs (not after)
        check_output_path(out, "--out")
    for path in files:
        col.path = str(path)
        if not READERS[path.suffix.lower()](col, path):
            where = f"{path}: row 0" if path.suffix.lower() in npz.SUFFIXES else f"{path}:1"
            col.bad(where, "empty file (no positions)", line_level=True)
    if not col.rows:
        names = ", ".join(str(f) for f in files)
        raise UserError(f"{names}: no valid positions"
                        + (f" (first problem: {col.first_issue})" if col.first_issue else ""))
    if col.bad_positions or col.bad_lines:
        warnings.warn(f"skipped {col.bad_positions} bad positions and {col.bad_lines} bad "
                      f"lines or files; first: {col.first_issue}", BadInputWarning,
                      stacklevel=2)
    names = [str(f) for f in files]
    ds = bank_dataset(_assemble(col), files=names, formats=sorted(col.formats),
                      top_k=col.top_k, vocab=col.vocab, skip_bad=skip_bad,
                      skipped_positions=col.bad_positions, skipped_lines=col.bad_lines,
                      command=command or f"brwsim.bank.import_logprobs({names})")
    if out is not None:
        write_netcdf_atomic(ds, out)
    return ds


def import_arrays(logprobs: np.ndarray, sampled_rank: np.ndarray, sequence: np.ndarray, *,
                  source: str, fmt: str, vocab: int | None = None, top_k: int | None = None,
                  command: str = "") -> xr.Dataset:
    """A bank from in-memory arrays, with the checks and rows of :func:`import_logprobs`.

    The arrays are those of an ``.npz`` input (:mod:`brwsim.bank.npz`): exact top-k rows,
    no appended sampled token.

    Parameters
    ----------
    logprobs : numpy.ndarray
        Shape (positions, k): log-probabilities, ``-inf`` for masked entries.
    sampled_rank, sequence : numpy.ndarray
        Shape (positions,), integer: the sampled token's rank in the full distribution
        (negative: unknown) and the generation of each position.
    source, fmt : str
        Where the rows came from and their format (recorded as the bank's ``source_files``
        and ``format``; ``source`` prefixes error messages).
    vocab, top_k : int, optional
        As for :func:`import_logprobs`.
    command : str, optional
        Recorded in the ``history`` attribute.

    Raises
    ------
    brwsim.errors.UserError
        At the first bad row (``source: row i: problem``).
    """
    col = Collector(skip_bad=False,
                    top_k=None if top_k is None else check_int("top_k", top_k, 1, MAX_VOCAB),
                    vocab=None if vocab is None else check_int("vocab", vocab, 1, MAX_VOCAB))
    lp = np.asarray(logprobs, dtype=np.float64)
    if lp.ndim != 2 or lp.shape[0] == 0 or lp.shape[1] == 0:
        raise UserError(f"{source}: no positions (logprobs of shape {lp.shape})")
    col.formats.add(fmt)
    col.add_block(lp, sampled_col=None, sampled_rank=np.asarray(sampled_rank, dtype=np.int64),
                  drop_appended=False, where=lambda i: f"{source}: row {i}",
                  sequence=np.asarray(sequence, dtype=np.int64))
    return bank_dataset(_assemble(col), files=[source], formats=sorted(col.formats),
                        top_k=col.top_k, vocab=col.vocab, skip_bad=False, skipped_positions=0,
                        skipped_lines=0, command=command or f"brwsim.bank.import_arrays({source!r})")
