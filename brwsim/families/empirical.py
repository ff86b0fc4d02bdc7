"""Empirical: every node resamples a recorded top-k probability row."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from brwsim.bank.store import load_bank
from brwsim.errors import UserError
from brwsim.families.base import (
    Component,
    Family,
    Moments,
    log_or_minf,
    tempered_listed,
)
from brwsim.kernels import dist as K
from brwsim.kernels.closed import BANK_ROWS, BANK_WIDTH
from brwsim.lazy import xarray as xr
from brwsim.theory.laws import SpineSteps

__all__ = ['Empirical', 'validate_rows']


def validate_rows(rows: Any, what: str = "bank") -> np.ndarray:
    """Rows of probabilities as a 2-D array sorted descending per row, zero padded.

    Raises
    ------
    brwsim.errors.UserError
        On NaN, negative entries, a row summing above 1, or a degenerate bank.
    """
    if isinstance(rows, (list, tuple)) and rows and all(isinstance(r, (list, tuple, np.ndarray)) for r in rows):
        width = max(len(r) for r in rows)          # ragged rows: zero padded
        rows = [list(r) + [0.0] * (width - len(r)) for r in rows]
    try:
        q = np.asarray(rows, dtype=np.float64)
    except (TypeError, ValueError):
        raise UserError(f"{what} must be a 2-D array of probabilities (rows x k)") from None
    if q.ndim == 1:
        q = q[None, :]
    if q.ndim != 2 or q.size == 0:
        raise UserError(f"{what} must be a non-empty 2-D array of probabilities (rows x k)")
    if np.isnan(q).any():
        raise UserError(f"{what} has NaN probabilities (row {int(np.isnan(q).any(axis=1).argmax())})")
    if (q < 0).any() or np.isinf(q).any():
        raise UserError(f"{what} has negative or infinite probabilities "
                        f"(row {int(((q < 0) | np.isinf(q)).any(axis=1).argmax())})")
    sums = q.sum(axis=1)
    if (sums > 1.0 + 1e-6).any():
        bad = int((sums > 1.0 + 1e-6).argmax())
        raise UserError(f"{what} row {bad} sums to {sums[bad]:.9g} > 1")
    if (q.max(axis=1) <= 0).any():
        raise UserError(f"{what} row {int((q.max(axis=1) <= 0).argmax())} has no positive probability")
    q = -np.sort(-q, axis=1)
    if (q[:, 0] >= 1.0 - 1e-12).all():
        raise UserError(f"every row of {what} has a token of probability 1: every tree would be "
                        "a chain (X = P)")
    return q


class Empirical(Family):
    """Each node resamples one row of a bank of recorded top-k probability vectors.

    Parameters
    ----------
    bank : array-like, str, path or xarray.Dataset
        A (rows, k) array of probabilities (a row may sum below 1: the rest is tail
        mass outside any tree), or a bank written by ``brwsim import-logprobs`` (its
        file or Dataset).

    Moments are exact averages over the rows (listed tokens only).
    """

    name = "empirical"
    param_kinds = {"bank": "matrix"}
    example = "empirical(bank=[[0.5, 0.3], [0.9, 0.05, 0.01]])"

    def __init__(self, bank: Any = None, path: str | None = None) -> None:
        source = path if path is not None else bank
        if source is None:
            raise UserError("empirical needs a bank: an array of rows or path=<bank.nc>")
        self.path = None
        if isinstance(source, (str, Path, xr.Dataset)):
            self.path = None if isinstance(source, xr.Dataset) else str(source)
            probs, _tail = load_bank(source)
            if self.path is not None:
                self._record_input(self.path)
            source = probs
        self.rows = validate_rows(source)

    def params(self) -> dict[str, Any]:
        if self.path is not None:
            return {"path": self.path}
        return {"bank": self.rows.tolist()}

    def components(self, beta: float = 1.0) -> list[Component]:
        rows = np.array([tempered_listed(r, beta) for r in self.rows]) if beta != 1.0 else self.rows
        return [Component(K.BANK, ipar={BANK_ROWS: rows.shape[0], BANK_WIDTH: rows.shape[1]},
                          data=log_or_minf(rows))]

    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        row = self.rows[rng.integers(self.rows.shape[0])]
        return tempered_listed(row[row > 0], beta)

    def moments(self, n: int | None = None, seed: int = 0) -> Moments:
        q = self.rows
        lq = log_or_minf(np.where(q > 0, q, 1.0))
        h = -(q * lq).sum(axis=1)
        m2 = (q * lq * lq).sum(axis=1)
        return Moments(float(h.mean()), float(m2.mean()), h2=float((h * h).mean()))

    def spine_law(self):
        """Exact atoms: every listed probability q of every row, weight q / rows."""

        p = self.rows[self.rows > 0]
        return SpineSteps.atoms(-np.log(p), p / self.rows.shape[0])

    def top1_mean(self) -> float:
        return float(self.rows.max(axis=1).mean())

    def tempered_family(self, beta: float) -> "Empirical":
        if beta == 1.0:
            return self
        return Empirical(np.array([tempered_listed(r, beta) for r in self.rows]))
