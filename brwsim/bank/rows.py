"""Row checks: turn blocks of raw top-k log-probabilities into validated bank rows.

Shared by every input source (:mod:`brwsim.bank.openai_json`, :mod:`brwsim.bank.llamacpp`,
:mod:`brwsim.bank.npz`) and by the bank store (:mod:`brwsim.bank.store`), which checks rows
and stored bounds again when a bank is read.

Conventions
-----------
* Entries whose probability underflows to 0 (``-inf``, the ``-9999`` that OpenAI and vLLM
  report for very unlikely tokens, or the lowest float that llama.cpp writes for a zero
  probability) are dropped: they carry no probability, and a position keeps its positive
  entries only. Log-probabilities in (0, 1e-6] are rounding and are clipped to 0; larger
  ones are errors.
* ``tail_mass`` = 1 - sum of the stored probabilities, with rounding negatives clipped to 0;
  a sum above 1 + 1e-6 is an error.
* When ``drop_appended`` is set for a position (OpenAI-compatible JSON) and the sampled
  token is the least likely of two or more listed entries, it is moved to the tail and its
  rank stored as unknown (-1): some servers (vLLM) add the sampled token to the top list
  even when it is outside the top-k, so the remaining entries are then a true top of the
  distribution. llama.cpp's native lists and ``.npz`` arrays are exact top-k rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from brwsim.errors import UserError

__all__ = ["ROUNDING_TOL", "first_issue", "rows_from_logprobs", "vocab_checks",
           "validate_bank_rows", "validate_bounds", "BOUND_NAMES"]

#: Tolerance for positive log-probabilities and for top-k sums above 1 (rounding).
ROUNDING_TOL = 1e-6
#: The per-position bound variables of a bank, in the order of :func:`entropy_bounds`.
BOUND_NAMES = ("entropy_lower", "entropy_upper", "mu2_lower", "mu2_upper")


def first_issue(checks: Sequence[tuple[np.ndarray, Any]], n: int) -> list[str | None]:
    """Per row, the message of its first failing check (or None)."""
    out: list[str | None] = [None] * n
    for mask, message in checks:
        for i in np.flatnonzero(mask):
            if out[i] is None:
                out[i] = message(i) if callable(message) else message
    return out


def _sampled_rank_from_column(order: np.ndarray, col: np.ndarray,
                              count: np.ndarray) -> np.ndarray:
    """Rank after sorting of the entry in column ``col`` (-1 when unknown or zero)."""
    n, w = order.shape
    if w == 0:
        return np.full(n, -1, dtype=np.int64)
    inv = np.empty_like(order)
    np.put_along_axis(inv, order, np.broadcast_to(np.arange(w), (n, w)), axis=1)
    rank = inv[np.arange(n), np.clip(col, 0, w - 1)]
    return np.where((col >= 0) & (rank < count), rank, -1).astype(np.int64)


def rows_from_logprobs(lp: np.ndarray, *, sampled_col: np.ndarray | None,
                        sampled_rank: np.ndarray | None,
                       drop_appended: bool | np.ndarray,
                        top_k: int | None, vocab: int | None,
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str | None]]:
    """Sort, validate and truncate a block of log-probabilities.

    Returns the sorted probabilities, tail masses, sampled ranks and one message per row
    (None for a valid row).
    """
    n = lp.shape[0]
    nan = np.isnan(lp)
    lp = np.where(nan, -np.inf, lp)
    biggest = lp.max(axis=1, initial=-np.inf)
    lp = np.minimum(lp, 0.0)
    p = np.exp(lp)
    order = np.argsort(-p, axis=1, kind="stable")
    ps = np.take_along_axis(p, order, axis=1)
    count = (ps > 0).sum(axis=1)
    if sampled_col is not None:
        rank = _sampled_rank_from_column(order, sampled_col, count)
        appended = np.broadcast_to(np.asarray(drop_appended, dtype=bool), (n,))
        if appended.any():
            drop = np.flatnonzero((rank >= 1) & (rank == count - 1) & appended)
            ps[drop, count[drop] - 1] = 0.0
            count[drop] -= 1
            rank[drop] = -1
    elif sampled_rank is not None:
        rank = np.where((sampled_rank >= 0) & (sampled_rank < count), sampled_rank, -1)
    else:
        rank = np.full(n, -1, dtype=np.int64)
    if top_k is not None:
        ps = ps[:, :top_k]
        count = np.minimum(count, top_k)
        rank = np.where(rank >= top_k, -1, rank)
    total = ps.sum(axis=1)
    tail = np.clip(1.0 - total, 0.0, None)
    q = ps[np.arange(n), np.maximum(count - 1, 0)] if ps.shape[1] else np.zeros(n)
    checks: list[tuple[np.ndarray, Any]] = [
        (nan.any(axis=1), "logprob is NaN"),
        (biggest > ROUNDING_TOL,
         lambda i: f"positive logprob {biggest[i]:.6g} (log-probabilities must be <= 0)"),
        (count == 0, "no top log-probabilities with probability > 0 "
                     "(empty top list? request at least 1 top logprob)"),
        (total > 1.0 + ROUNDING_TOL,
         lambda i: f"top-k probabilities sum to {total[i]:.9g} > 1"),
    ]
    if vocab is not None:
        checks.extend(vocab_checks(count, tail, q, vocab))
    return ps, tail, rank.astype(np.int64), first_issue(checks, n)


def vocab_checks(count: np.ndarray, tail: np.ndarray, q: np.ndarray,
                  vocab: int) -> list[tuple[np.ndarray, Any]]:
    """Checks that positions with ``count`` entries, smallest ``q``, fit a vocabulary."""
    m = vocab - count
    return [(m < 0, lambda i: f"{count[i]} entries but --vocab is {vocab}"),
            (tail > np.maximum(m, 0) * q * (1 + 1e-9) + ROUNDING_TOL,
             lambda i: f"tail mass {tail[i]:.6g} cannot be spread over the "
                       f"{m[i]} tokens outside the top-k with probability <= "
                       f"{q[i]:.6g} each (is --vocab {vocab} right?)")]



def validate_bounds(name: str, n: int, bounds: Sequence[np.ndarray]) -> None:
    """Raise UserError naming the first bad stored bound of a bank."""
    for var, values in zip(BOUND_NAMES, bounds):
        if values.shape != (n,):
            raise UserError(f"{name}: '{var}' must have shape ({n},) like 'tail_mass', "
                            f"got {values.shape}")
    h_lo, h_hi, m_lo, m_hi = bounds
    tol = 1e-9
    checks: list[tuple[np.ndarray, Any]] = [
        (np.isnan(np.column_stack(bounds)).any(axis=1), "NaN bound"),
        (~np.isfinite(h_lo) | ~np.isfinite(m_lo), "infinite lower bound"),
        ((h_lo < -tol) | (m_lo < -tol), "negative lower bound"),
        ((h_hi < h_lo - tol) | (m_hi < m_lo - tol), "upper bound below the lower bound"),
    ]
    for i, msg in enumerate(first_issue(checks, n)):
        if msg is not None:
            raise UserError(f"{name}: position {i}: {msg}")



def validate_bank_rows(name: str, probs: np.ndarray, tail: np.ndarray) -> None:
    """Raise UserError naming the first bad position of a bank."""
    total = probs.sum(axis=1)
    checks: list[tuple[np.ndarray, Any]] = [
        (np.isnan(probs).any(axis=1) | np.isnan(tail), "NaN value"),
        ((probs < 0).any(axis=1) | (tail < 0), "negative probability or tail mass"),
        (np.diff(probs, axis=1).max(axis=1, initial=0.0) > 0, "probabilities not sorted "
                                                             "in descending order"),
        (probs[:, 0] <= 0, "no positive probability"),
        (total > 1.0 + ROUNDING_TOL, lambda i: f"probabilities sum to {total[i]:.9g} > 1"),
        (np.abs(total + tail - 1.0) > ROUNDING_TOL,
         lambda i: f"probabilities ({total[i]:.9g}) plus tail mass ({tail[i]:.9g}) "
                   "differ from 1"),
    ]
    issues = first_issue(checks, probs.shape[0])
    for i, msg in enumerate(issues):
        if msg is not None:
            raise UserError(f"{name}: position {i}: {msg}")

