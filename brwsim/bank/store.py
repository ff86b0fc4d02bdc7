"""The bank file: its variables, writing it and reading it back with every check.

A bank is a netCDF file (an :class:`xarray.Dataset`) with one row per generated position:
the top-k probabilities sorted in descending order, the tail mass outside them, the rank of
the token the model actually sampled, the generation (sequence) the position belongs to,
and lower/upper bounds of the entropy and of the second log-moment of the full next-token
distribution (:mod:`brwsim.bank.bounds`). It is written by
:func:`brwsim.bank.import_logprobs` and read by :func:`load_bank` (the Empirical families)
and :func:`bank_bounds` (``brwsim bank-stats``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from brwsim.bank.bounds import entropy_bounds
from brwsim.bank.rows import (
    BOUND_NAMES,
    first_issue,
    validate_bank_rows,
    validate_bounds,
    vocab_checks,
)
from brwsim.errors import UserError
from brwsim.io import open_dataset, provenance_attrs
from brwsim.lazy import xarray as xr
from brwsim.schema import VARIABLES
from brwsim.validate import check_int

__all__ = ["BANK_VARIABLES", "BANK_DIGEST", "arrays_sha256", "bank_bounds", "bank_dataset", "bank_entropies", "load_bank",
           "read_bank"]

#: Variable name -> (dims, long_name, units) of every bank variable (from the schema catalogue).
BANK_VARIABLES: dict[str, tuple[tuple[str, ...], str, str]] = {
    name: (VARIABLES[name].dims, VARIABLES[name].long_name, VARIABLES[name].units)
    for name in ("probs", "tail_mass", "sampled_rank", "sequence", "entropy_lower",
                 "entropy_upper", "mu2_lower", "mu2_upper")
}


def bank_dataset(arrays: dict[str, np.ndarray], *, files: Sequence[str], formats: Sequence[str],
                 top_k: int | None, vocab: int | None, skip_bad: bool, skipped_positions: int,
                 skipped_lines: int, command: str) -> xr.Dataset:
    """The bank Dataset of assembled rows, with CF attributes and provenance.

    Parameters
    ----------
    arrays : dict of numpy.ndarray
        One array per name of :data:`BANK_VARIABLES`.
    files, formats : sequence of str
        The input files and the formats found in them.
    top_k, vocab, skip_bad : optional
        The import's parameters (recorded in ``config_json``).
    skipped_positions, skipped_lines : int
        Bad input skipped with ``skip_bad``.
    command : str
        Recorded in the ``history`` attribute.
    """
    data_vars = {
        name: xr.Variable(dims, arrays[name], attrs={"long_name": long_name, "units": units})
        for name, (dims, long_name, units) in BANK_VARIABLES.items()
    }
    config = {"files": list(files), "top_k": top_k, "vocab": vocab, "skip_bad": skip_bad}
    attrs: dict[str, Any] = provenance_attrs("brwsim logprob bank", config, 0, command)
    del attrs["seed_entropy"]                   # an import draws no random numbers
    attrs.update({
        "source_files": json.dumps(list(files)),
        "format": ", ".join(sorted(formats)),
        "vocab": str(vocab) if vocab is not None else "unknown",
        "skipped_positions": skipped_positions,
        "skipped_lines": skipped_lines,
        "bounds_method": ("tail of mass r spread over tokens of probability <= the smallest "
                          "stored one: lower = most concentrated tail, upper = even spread "
                          "over vocab - k tokens (inf without vocab); see brwsim.bank.bounds"),
    })
    ds = xr.Dataset(data_vars, attrs=attrs)
    for var in ds.variables.values():
        var.encoding["fletcher32"] = True       # HDF5 checks every chunk as it reads it
    ds.attrs[BANK_DIGEST] = arrays_sha256(ds)
    return ds


#: Attribute holding the SHA-256 of a bank's arrays (:func:`arrays_sha256`).
BANK_DIGEST = "arrays_sha256"


def arrays_sha256(ds: xr.Dataset) -> str:
    """SHA-256 of a bank's arrays: each variable of :data:`BANK_VARIABLES` present, by
    name, dims, shape and values in a canonical dtype (little-endian int64 or float64), so
    a value changed in the file (even through netCDF, which recomputes its own Fletcher-32
    checksums) no longer matches the digest recorded when the bank was written."""
    import hashlib

    h = hashlib.sha256()
    for name in sorted(n for n in BANK_VARIABLES if n in ds.variables):
        values = np.asarray(ds[name].values)
        kind = "<i8" if values.dtype.kind in "iub" else "<f8"
        h.update(f"|{name}|{ds[name].dims}|{values.shape}|".encode())
        h.update(np.ascontiguousarray(values, dtype=kind).tobytes())
    return h.hexdigest()


def load_bank(path_or_dataset: str | os.PathLike[str] | xr.Dataset,
              ) -> tuple[np.ndarray, np.ndarray]:
    """Read and validate a bank.

    Parameters
    ----------
    path_or_dataset : path-like or xarray.Dataset
        A bank written by :func:`brwsim.bank.import_logprobs` (or a Dataset with the same variables).

    Returns
    -------
    probs : numpy.ndarray
        Shape (positions, k), float64, each row sorted in descending order, zero padded.
    tail_mass : numpy.ndarray
        Shape (positions,), float64.

    Raises
    ------
    brwsim.errors.UserError
        When a variable is missing or misshapen, or holds NaN, negative values, unsorted
        rows, rows without a positive entry, or rows whose probabilities plus tail mass
        differ from 1 by more than 1e-6.
    """
    _ds, _name, probs, tail = read_bank(path_or_dataset)
    return probs, tail


def read_bank(path_or_dataset: str | os.PathLike[str] | xr.Dataset,
               ) -> tuple[xr.Dataset, str, np.ndarray, np.ndarray]:
    """The bank Dataset, its name for messages and its validated probabilities and tails."""
    if isinstance(path_or_dataset, xr.Dataset):
        ds, name = path_or_dataset, "bank dataset"
    else:
        ds, name = open_dataset(path_or_dataset), str(path_or_dataset)
        recorded = ds.attrs.get(BANK_DIGEST)     # banks written before the digest have none
        if recorded is not None and str(recorded) != arrays_sha256(ds):
            raise UserError(f"{name}: the bank's arrays do not match their recorded SHA-256 "
                            f"({BANK_DIGEST}): the file was altered or corrupted; capture or "
                            "import it again")
    for var, ndim in (("probs", 2), ("tail_mass", 1)):
        if var not in ds.variables:
            raise UserError(f"{name}: not a logprob bank: missing variable '{var}'")
        if ds[var].ndim != ndim:
            raise UserError(f"{name}: '{var}' must have {ndim} dimension(s), "
                            f"got {ds[var].dims}")
    probs_var = ds["probs"]
    if set(probs_var.dims) == {"position", "rank"}:
        probs_var = probs_var.transpose("position", "rank")
    probs = np.asarray(probs_var.values, dtype=np.float64)
    tail = np.asarray(ds["tail_mass"].values, dtype=np.float64)
    if probs.shape[0] != tail.shape[0]:
        raise UserError(f"{name}: 'probs' has {probs.shape[0]} positions but 'tail_mass' "
                        f"has {tail.shape[0]}")
    if probs.shape[0] == 0 or probs.shape[1] == 0:
        raise UserError(f"{name}: empty bank (shape {probs.shape})")
    validate_bank_rows(name, probs, tail)
    return ds, name, probs, tail


def bank_bounds(path_or_dataset: str | os.PathLike[str] | xr.Dataset, vocab: int | None = None,
                ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray,
                                                         np.ndarray, np.ndarray]]:
    """A bank's rows and per-position bounds of the entropy and second log-moment.

    Parameters
    ----------
    path_or_dataset : path-like or xarray.Dataset
        A bank (see :func:`load_bank`).
    vocab : int, optional
        Vocabulary size. When given, or when the bank lacks one of the bound variables, the
        bounds are recomputed from the rows by :func:`entropy_bounds` (with ``vocab``, else
        the bank's ``vocab`` attribute when it is a number); otherwise the stored bounds are
        returned.

    Returns
    -------
    probs, tail_mass : numpy.ndarray
        As :func:`load_bank`.
    bounds : tuple of numpy.ndarray
        ``entropy_lower, entropy_upper, mu2_lower, mu2_upper``, shape (positions,).

    Raises
    ------
    brwsim.errors.UserError
        As :func:`load_bank`; when a position does not fit ``vocab`` (more entries than
        ``vocab``, or more tail mass than ``vocab - k`` tokens of probability at most the
        smallest stored one can hold); when stored bounds are misshapen, NaN, negative,
        have an infinite lower bound or an upper bound below the lower one.
    """
    ds, name, probs, tail = read_bank(path_or_dataset)
    bounds, _vocab = bounds_of(ds, name, probs, tail, vocab)
    return probs, tail, bounds


def _bank_vocab(ds: xr.Dataset) -> int | None:
    """The ``vocab`` attribute of a bank as an int (None when unknown)."""
    text = str(ds.attrs.get("vocab", ""))
    return int(text) if text.isdigit() and int(text) > 0 else None


def bounds_of(ds: xr.Dataset, name: str, probs: np.ndarray, tail: np.ndarray,
               vocab: int | None) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray,
                                                 np.ndarray], int | None]:
    """Bounds of an opened bank (see :func:`bank_bounds`) and the vocabulary behind them."""
    vocab = None if vocab is None else check_int("vocab", vocab, 1)
    if vocab is None and all(v in ds.variables for v in BOUND_NAMES):
        bounds = tuple(np.asarray(ds[v].values, dtype=np.float64) for v in BOUND_NAMES)
        validate_bounds(name, probs.shape[0], bounds)
        return bounds, _bank_vocab(ds)  # type: ignore[return-value]
    if vocab is None:
        vocab = _bank_vocab(ds)
    if vocab is not None:
        count = (probs > 0).sum(axis=1)
        q = probs[np.arange(probs.shape[0]), count - 1]
        for i, msg in enumerate(first_issue(vocab_checks(count, tail, q, vocab),
                                             probs.shape[0])):
            if msg is not None:
                raise UserError(f"{name}: position {i}: {msg}")
    return entropy_bounds(probs, tail, vocab), vocab


def bank_entropies(path_or_dataset: str | os.PathLike[str] | xr.Dataset) -> np.ndarray:
    """One entropy value per bank position, from its bounds (nats).

    ``entropy_lower`` where ``entropy_upper`` is infinite (no vocabulary size: the lower
    bound, the tail as concentrated as allowed, is then the only finite value), otherwise
    the midpoint ``(entropy_lower + entropy_upper) / 2``. Bounds are those of
    :func:`bank_bounds` (stored, or recomputed when the bank lacks them).
    """
    _probs, _tail, (lower, upper, _m_lo, _m_hi) = bank_bounds(path_or_dataset)
    return np.where(np.isfinite(upper), 0.5 * (lower + upper), lower)
