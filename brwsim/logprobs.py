"""Import next-token log-probabilities of a real model into a *bank* of top-k distributions.

A bank is a netCDF file (an :class:`xarray.Dataset`) with one row per generated position:
the top-k probabilities sorted in descending order, the tail mass outside them, the rank of
the token the model actually sampled, and lower/upper bounds of the entropy and of the second
log-moment of the full next-token distribution. The empirical families read it through
:func:`load_bank`.

Inputs
------
The format is chosen by the file extension.

``.jsonl``, ``.ndjson``, ``.json``: JSON Lines of OpenAI-compatible responses, as returned by
vLLM, SGLang, llama.cpp's server and the OpenAI API when log-probabilities are requested
(``logprobs=true, top_logprobs=K`` for chat, ``logprobs=K`` for completions). A line holds
one of:

* a chat completion (or a streamed ``chat.completion.chunk``):
  ``choices[].logprobs.content[]`` items with the sampled ``token``/``logprob`` and a
  ``top_logprobs`` list of ``{"token", "logprob"}`` entries;
* a legacy completion (or a streamed chunk): ``choices[].logprobs`` with ``top_logprobs``
  (one ``{token: logprob}`` dict per position) and the sampled ``tokens`` (``token_logprobs``
  is not needed);
* a llama.cpp ``/completion`` response whose ``completion_probabilities`` items have the chat
  item shape (``token``, ``logprob``, ``top_logprobs``);
* any of these wrapped as batch APIs write them: ``{"response": {"status_code": 200,
  "body": {...}}}`` (OpenAI Batch API and vLLM ``run_batch`` output), ``{"response": {...}}``
  or ``{"body": {...}}``; a record whose ``status_code`` is not 200 or whose ``response`` is
  null is a bad line;
* a JSON array of such objects on one line.

Blank lines, server-sent-event framing (``data: `` prefixes, ``data: [DONE]``, ``event:``,
``id:``, ``retry:`` and ``:`` comment lines) are accepted. A ``.json`` file whose first line is
not a complete JSON value is read as one (pretty-printed) JSON document holding a response
or an array of responses; such a document is parsed whole, so use JSON Lines for large inputs.

``.npz``: a ``logprobs`` array of shape (positions, k), sorted or not, float of any width;
``-inf`` marks a masked entry (probability 0). Optional 1-D arrays of length positions:
``sampled_rank`` (rank of the sampled token in the full distribution sorted in descending
order, 0 = most likely, negative = unknown), ``sampled_logprob`` (used to find the sampled
token among the top-k entries when ``sampled_rank`` is absent) and ``sequence`` (which
generation a row belongs to). The file is read in blocks of rows straight from the archive.

Conventions
-----------
* Entries whose probability underflows to 0 (``-inf``, or the ``-9999`` that OpenAI and vLLM
  report for very unlikely tokens) are dropped: they carry no probability, and a position
  keeps its positive entries only. Log-probabilities in (0, 1e-6] are rounding and are
  clipped to 0; larger ones are errors.
* Some servers (vLLM) add the sampled token to the top list even when it is outside the
  top-k, so the listed tokens are then not the k most likely ones. For JSON inputs, when the
  sampled token is the least likely of two or more listed entries it is therefore moved to
  the tail and its rank stored as unknown (-1); the remaining entries are a true top of the
  distribution. ``.npz`` inputs are taken as exact top-k arrays.
* ``tail_mass`` = 1 - sum of the stored probabilities, with rounding negatives clipped to 0;
  a sum above 1 + 1e-6 is an error.
* A position's ``k`` is its number of positive entries; positions with fewer than the bank's
  k (the maximum over positions, or ``top_k``) are padded with zeros.

Bounds
------
For a position with stored probabilities ``p_1 >= ... >= p_k > 0``, tail mass ``r`` and
``q = p_k``, every token outside the stored ones has probability in ``[0, q]`` and these
probabilities sum to ``r``. With ``f(t) = -t log t`` and ``g(t) = t (log t)^2``,
``H = sum_i f(p_i) + sum_tail f(t)`` and ``mu2 = sum_i g(p_i) + sum_tail g(t)``; only the tail
sums are unknown. Let ``n = floor(r / q)``, ``rho = r - n q`` and ``m = vocab - k`` (the number
of tokens outside the stored ones; unbounded when ``vocab`` is None).

* Entropy, lower: ``n f(q) + f(rho)``. ``f`` is concave, so its sum over the polytope
  {0 <= t_j <= q, sum t_j = r} is smallest at a vertex: the tail as concentrated as allowed,
  ``n`` tokens of probability ``q`` and one remainder ``rho``. Exact (attained).
* Entropy, upper: ``r log(m / r)``, the tail spread evenly over the ``m`` tokens (Jensen; exact
  and attained). It requires ``r <= m q`` (else the position is inconsistent with ``vocab``)
  and is ``+inf`` when ``vocab`` is None and ``r > 0``: ``r log(m / r)`` grows without bound
  in ``m``.
* Second log-moment, lower: when ``q <= 1/e``, ``g`` is concave on [0, q] and the bound is the
  vertex value ``n g(q) + g(rho)`` (exact, attained). When ``q > 1/e`` (only possible for
  k <= 2), ``g(t) / t = (log t)^2`` decreases in t, so ``sum g(t) >= r (log q)^2``, a valid
  (attained when ``r / q`` is an integer) bound.
* Second log-moment, upper: ``m G(r / m)`` with ``G`` the least concave majorant of ``g`` on
  [0, q]. When ``q <= 1/e``, ``G = g`` and the bound is ``r (log(r / m))^2`` (exact, attained by
  the even spread). When ``q > 1/e``, ``g`` is concave on [0, 1/e] and convex beyond, ``G``
  follows ``g`` up to the point ``a`` where the tangent of ``g`` passes through ``(q, g(q))``
  and is that tangent line beyond; the bound is still ``r (log(r / m))^2`` when ``r / m <= a``.
  ``+inf`` when ``vocab`` is None and ``r > 0`` (``(log t)^2`` is unbounded as t -> 0).

When ``r = 0``, or ``m = 0`` (the stored entries are the whole vocabulary, so ``r`` is
rounding), both tail terms are 0. To absorb rounding, each upper bound is finally raised to
at least its lower bound.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import warnings
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
from scipy.optimize import brentq
from scipy.special import entr

from brwsim.errors import UserError
from brwsim.io import open_dataset, provenance_attrs, write_netcdf_atomic
from brwsim.validate import check_int, check_json_depth, check_output_path, check_work_size

__all__ = [
    "BadInputWarning",
    "bank_bounds",
    "bank_entropies",
    "describe_bank",
    "entropy_bounds",
    "import_logprobs",
    "load_bank",
    "register",
    "run",
]

JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
NPZ_SUFFIXES = (".npz",)
#: Tolerance for positive log-probabilities and for top-k sums above 1 (rounding).
ROUNDING_TOL = 1e-6
#: Positions gathered before they are converted to arrays (bounds the pending Python objects).
_BLOCK_POSITIONS = 4096
#: Array elements read from an .npz file at a time.
_NPZ_BLOCK_ELEMENTS = 1 << 19
_INV_E = math.exp(-1.0)
_SSE_SKIP_PREFIXES = ("event:", "id:", "retry:", ":")


class BadInputWarning(UserWarning):
    """Bad positions, lines or files were skipped because ``skip_bad`` was set."""


# ---------------------------------------------------------------------------------------
# Bounds of the entropy and of the second log-moment
# ---------------------------------------------------------------------------------------


def _g(t: np.ndarray) -> np.ndarray:
    """``t (log t)^2`` with ``g(0) = 0``."""
    t = np.asarray(t, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = t * np.log(t) ** 2
    return np.where(t > 0, out, 0.0)


def _tangent_point(q: float) -> float:
    """Point ``a`` in (0, 1/e] where the tangent of ``g`` passes through ``(q, g(q))``, q > 1/e."""
    gq = float(_g(np.array(q)))

    def gap(a: float) -> float:
        la = math.log(a)
        return a * la * la + la * (la + 2.0) * (q - a) - gq

    if gap(_INV_E) >= 0.0:  # q == 1/e up to rounding
        return _INV_E
    return brentq(gap, 1e-300, _INV_E, xtol=1e-15, rtol=1e-12)


def _g_majorant(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Least concave majorant of ``g`` on [0, q], evaluated at ``x`` (0 <= x <= q)."""
    out = _g(x)
    for i in np.flatnonzero(q > _INV_E):
        a = _tangent_point(float(q[i]))
        if x[i] > a:
            ga, gq = float(_g(np.array(a))), float(_g(np.array(q[i])))
            out[i] = ga + (x[i] - a) * (gq - ga) / (q[i] - a)
    return out


def entropy_bounds(probs: np.ndarray, tail_mass: np.ndarray,
                   vocab: int | None = None) -> tuple[np.ndarray, np.ndarray,
                                                      np.ndarray, np.ndarray]:
    """Bounds of the entropy and of the second log-moment from top-k probabilities.

    The formulas are in the module docstring (:mod:`brwsim.logprobs`, section *Bounds*).

    Parameters
    ----------
    probs : numpy.ndarray
        Shape (positions, k): top probabilities sorted in descending order, zero padded;
        every row has at least one positive entry.
    tail_mass : numpy.ndarray
        Shape (positions,): probability outside the stored entries, in [0, 1].
    vocab : int, optional
        Vocabulary size. Without it the upper bounds are ``inf`` wherever the tail mass is
        positive.

    Returns
    -------
    entropy_lower, entropy_upper, mu2_lower, mu2_upper : numpy.ndarray
        Shape (positions,), in nats and nats squared.
    """
    p = np.asarray(probs, dtype=float)
    r = np.asarray(tail_mass, dtype=float)
    count = (p > 0).sum(axis=1)
    q = p[np.arange(p.shape[0]), np.maximum(count - 1, 0)]
    h_top = entr(p).sum(axis=1)
    m_top = _g(p).sum(axis=1)
    if vocab is not None:
        m = (int(vocab) - count).astype(float)
        r = np.where(m > 0, r, 0.0)
    else:
        m = np.full(r.shape, np.inf)
    n = np.floor(r / q)
    rho = np.clip(r - n * q, 0.0, None)
    h_lo = h_top + n * entr(q) + entr(rho)
    m_lo = m_top + np.where(q <= _INV_E, n * _g(q) + _g(rho), r * np.log(q) ** 2)
    if vocab is None:
        h_hi = np.where(r > 0, np.inf, h_top)
        m_hi = np.where(r > 0, np.inf, m_top)
    else:
        safe_m = np.where(m > 0, m, 1.0)
        x = np.minimum(r / safe_m, q)
        h_hi = h_top + safe_m * entr(x)
        m_hi = m_top + safe_m * _g_majorant(x, q)
    return h_lo, np.maximum(h_hi, h_lo), m_lo, np.maximum(m_hi, m_lo)


# ---------------------------------------------------------------------------------------
# Turning blocks of raw log-probabilities into bank rows
# ---------------------------------------------------------------------------------------


@dataclass
class _Rows:
    """Bank rows computed from one block of positions."""

    probs: np.ndarray
    tail: np.ndarray
    rank: np.ndarray
    sequence: np.ndarray
    bounds: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _first_issue(checks: Sequence[tuple[np.ndarray, Any]], n: int) -> list[str | None]:
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


def _rows_from_logprobs(lp: np.ndarray, *, sampled_col: np.ndarray | None,
                        sampled_rank: np.ndarray | None, drop_appended: bool,
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
        if drop_appended:
            drop = np.flatnonzero((rank >= 1) & (rank == count - 1))
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
        checks.extend(_vocab_checks(count, tail, q, vocab))
    return ps, tail, rank.astype(np.int64), _first_issue(checks, n)


def _vocab_checks(count: np.ndarray, tail: np.ndarray, q: np.ndarray,
                  vocab: int) -> list[tuple[np.ndarray, Any]]:
    """Checks that positions with ``count`` entries, smallest ``q``, fit a vocabulary."""
    m = vocab - count
    return [(m < 0, lambda i: f"{count[i]} entries but --vocab is {vocab}"),
            (tail > np.maximum(m, 0) * q * (1 + 1e-9) + ROUNDING_TOL,
             lambda i: f"tail mass {tail[i]:.6g} cannot be spread over the "
                       f"{m[i]} tokens outside the top-k with probability <= "
                       f"{q[i]:.6g} each (is --vocab {vocab} right?)")]


# ---------------------------------------------------------------------------------------
# The importer: pending positions, issues and accumulated rows
# ---------------------------------------------------------------------------------------


@dataclass
class _Pending:
    """Positions of one file waiting to be converted to arrays."""

    logprobs: list[list[float]] = field(default_factory=list)
    sampled_col: list[int] = field(default_factory=list)
    line: list[int] = field(default_factory=list)
    sequence: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.line)


class _Importer:
    """State of one :func:`import_logprobs` call."""

    def __init__(self, *, skip_bad: bool, top_k: int | None, vocab: int | None) -> None:
        self.skip_bad = skip_bad
        self.top_k = top_k
        self.vocab = vocab
        self.rows: list[_Rows] = []
        self.pending = _Pending()
        self.path = ""
        self.bad_positions = 0
        self.bad_lines = 0
        self.first_issue = ""
        self.formats: set[str] = set()
        self.next_sequence = 0

    # -- issues ------------------------------------------------------------------------
    def bad(self, where: str, message: str, *, line_level: bool) -> None:
        """Report a bad position or line: raise, or count it when skipping."""
        text = f"{where}: {message}"
        if not self.skip_bad:
            self.flush()
            raise UserError(text)
        if line_level:
            self.bad_lines += 1
        else:
            self.bad_positions += 1
        self.first_issue = self.first_issue or text

    # -- positions ---------------------------------------------------------------------
    def add(self, logprobs: list[float], sampled_col: int, line: int, sequence: int) -> None:
        """Queue one position read from a JSON line."""
        pend = self.pending
        pend.logprobs.append(logprobs)
        pend.sampled_col.append(sampled_col)
        pend.line.append(line)
        pend.sequence.append(sequence)
        if len(pend) >= _BLOCK_POSITIONS:
            self.flush()

    def flush(self) -> None:
        """Convert the pending JSON positions to bank rows."""
        pend, self.pending = self.pending, _Pending()
        if not len(pend):
            return
        width = max(len(row) for row in pend.logprobs)
        lp = np.full((len(pend), width), -np.inf)
        for i, row in enumerate(pend.logprobs):
            lp[i, :len(row)] = row
        self.add_block(lp, sampled_col=np.asarray(pend.sampled_col, dtype=np.int64),
                       sampled_rank=None, drop_appended=True,
                       where=lambda i, path=self.path, lines=pend.line: f"{path}:{lines[i]}",
                       sequence=np.asarray(pend.sequence, dtype=np.int64))

    def add_block(self, lp: np.ndarray, *, sampled_col: np.ndarray | None,
                  sampled_rank: np.ndarray | None, drop_appended: bool,
                  where: Callable[[int], str], sequence: np.ndarray) -> None:
        """Validate a block of positions and keep its valid rows."""
        ps, tail, rank, issues = _rows_from_logprobs(
            lp, sampled_col=sampled_col, sampled_rank=sampled_rank,
            drop_appended=drop_appended, top_k=self.top_k, vocab=self.vocab)
        good = np.array([msg is None for msg in issues], dtype=bool)
        for i in np.flatnonzero(~good):
            self.bad(where(i), str(issues[i]), line_level=False)
        if not good.any():
            return
        ps, tail = ps[good], tail[good]
        width = int((ps > 0).sum(axis=1).max())
        ps = np.ascontiguousarray(ps[:, :width])
        self.rows.append(_Rows(ps, tail, rank[good], sequence[good],
                               entropy_bounds(ps, tail, self.vocab)))

    def new_sequence(self) -> int:
        """A fresh sequence number."""
        self.next_sequence += 1
        return self.next_sequence - 1

    @property
    def n_positions(self) -> int:
        """Valid positions kept so far (flushed ones)."""
        return sum(len(r.tail) for r in self.rows)


# ---------------------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _unwrap(record: Any) -> tuple[dict[str, Any] | None, str]:
    """The response object inside a line, or (None, reason)."""
    obj = record
    for _ in range(4):
        if not isinstance(obj, dict):
            return None, f"expected a JSON object, got {type(obj).__name__}"
        if "choices" in obj or "completion_probabilities" in obj:
            return obj, ""
        if "response" in obj:
            inner = obj["response"]
            if inner is None:
                err = obj.get("error")
                return None, f"request failed (response is null; error: {json.dumps(err)})"
            if isinstance(inner, dict) and "status_code" in inner:
                status = inner.get("status_code")
                if status != 200:
                    return None, f"request failed with status_code {status}"
                obj = inner.get("body", inner)
            else:
                obj = inner
        elif "body" in obj:
            obj = obj["body"]
        elif obj.get("error") is not None:
            return None, f"request failed (error: {json.dumps(obj['error'])})"
        else:
            return None, ("no 'choices' field: not an OpenAI-compatible response "
                          "(nor a {'response': ...} or {'body': ...} wrapper)")
    return None, "too deeply nested wrapper"


def _top_entries_chat(item: Any, where: str,
                      ) -> tuple[list[float] | None, int, str]:
    """Log-probabilities and sampled column of one chat/llama.cpp item."""
    if not isinstance(item, dict):
        return None, -1, f"{where}: expected an object"
    top = item.get("top_logprobs")
    if top is None:
        return None, -1, f"{where}: missing 'top_logprobs' (request top_logprobs >= 1)"
    if not isinstance(top, list):
        return None, -1, f"{where}.top_logprobs: expected a list"
    values: list[float] = []
    for j, entry in enumerate(top):
        lp = entry.get("logprob") if isinstance(entry, dict) else None
        if lp is None:
            return None, -1, f"{where}.top_logprobs[{j}]: missing 'logprob'"
        if not _is_number(lp):
            return None, -1, f"{where}.top_logprobs[{j}]: logprob is not a number: {lp!r}"
        values.append(float(lp))
    token, sampled_lp = item.get("token"), item.get("logprob")
    col, best = -1, math.inf
    if token is not None:
        for j, entry in enumerate(top):
            if entry.get("token") == token:
                gap = abs(values[j] - sampled_lp) if _is_number(sampled_lp) else 0.0
                if gap < best:
                    col, best = j, gap
    return values, col, ""


def _top_entries_legacy(top: Any, tokens: Any, i: int, where: str,
                        ) -> tuple[list[float] | None, int, str]:
    """Log-probabilities and sampled column of one legacy-completions position."""
    if top is None:
        return None, -1, f"{where}: is null (no top log-probabilities at this position)"
    if not isinstance(top, dict):
        return None, -1, f"{where}: expected a {{token: logprob}} object"
    values: list[float] = []
    for token, lp in top.items():
        if lp is None:
            return None, -1, f"{where}[{token!r}]: missing logprob"
        if not _is_number(lp):
            return None, -1, f"{where}[{token!r}]: logprob is not a number: {lp!r}"
        values.append(float(lp))
    sampled = tokens[i] if isinstance(tokens, list) and i < len(tokens) else None
    col = next((j for j, tok in enumerate(top) if tok == sampled), -1)
    return values, col, ""


class _SequenceTracker:
    """Sequence numbers for choices; consecutive stream chunks of one choice share one."""

    def __init__(self, imp: _Importer) -> None:
        self.imp = imp
        self.last_key: tuple[Any, ...] | None = None
        self.last_seq = -1

    def get(self, response: dict[str, Any], choice: dict[str, Any], c: int) -> int:
        streamed = str(response.get("object", "")).endswith("chunk") or "delta" in choice
        key = (response.get("id"), choice.get("index", c))
        if streamed and key == self.last_key:
            return self.last_seq
        self.last_key = key if streamed else None
        self.last_seq = self.imp.new_sequence()
        return self.last_seq


def _read_response(imp: _Importer, response: dict[str, Any], loc: str, line: int,
                   seqs: _SequenceTracker) -> None:
    """Queue the positions of one response object."""
    if "completion_probabilities" in response:
        items = response["completion_probabilities"]
        if not isinstance(items, list):
            imp.bad(loc, "completion_probabilities: expected a list", line_level=True)
            return
        imp.formats.add("llama.cpp-completion")
        seq = imp.new_sequence()
        for j, item in enumerate(items):
            values, col, err = _top_entries_chat(item, f"completion_probabilities[{j}]")
            _queue(imp, values, col, err, loc, line, seq)
        return
    choices = response.get("choices")
    if not isinstance(choices, list):
        imp.bad(loc, "'choices' is not a list", line_level=True)
        return
    streamed = str(response.get("object", "")).endswith("chunk")
    for c, choice in enumerate(choices):
        where = f"choices[{c}]"
        if not isinstance(choice, dict):
            imp.bad(loc, f"{where}: expected an object", line_level=True)
            continue
        logprobs = choice.get("logprobs")
        if logprobs is None:
            if not (streamed or "delta" in choice):
                imp.bad(loc, f"{where}: no 'logprobs' (request logprobs=true and "
                             "top_logprobs=K, or logprobs=K for completions)", line_level=True)
            continue
        if not isinstance(logprobs, dict):
            imp.bad(loc, f"{where}.logprobs: expected an object", line_level=True)
            continue
        seq = seqs.get(response, choice, c)
        if "content" in logprobs:
            _read_chat(imp, logprobs["content"], f"{where}.logprobs.content", loc, line, seq)
        elif "top_logprobs" in logprobs:
            _read_legacy(imp, logprobs, f"{where}.logprobs", loc, line, seq)
        else:
            imp.bad(loc, f"{where}.logprobs: neither 'content' (chat) nor 'top_logprobs' "
                         "(completions)", line_level=True)


def _read_chat(imp: _Importer, content: Any, where: str, loc: str, line: int,
               seq: int) -> None:
    if content is None:
        return
    if not isinstance(content, list):
        imp.bad(loc, f"{where}: expected a list", line_level=True)
        return
    imp.formats.add("openai-chat")
    for j, item in enumerate(content):
        values, col, err = _top_entries_chat(item, f"{where}[{j}]")
        _queue(imp, values, col, err, loc, line, seq)


def _read_legacy(imp: _Importer, logprobs: dict[str, Any], where: str, loc: str,
                 line: int, seq: int) -> None:
    top = logprobs["top_logprobs"]
    if top is None:
        imp.bad(loc, f"{where}.top_logprobs is null (request logprobs=K with K >= 1)",
                line_level=True)
        return
    if not isinstance(top, list):
        imp.bad(loc, f"{where}.top_logprobs: expected a list", line_level=True)
        return
    imp.formats.add("openai-completions")
    tokens = logprobs.get("tokens")
    for i, entry in enumerate(top):
        values, col, err = _top_entries_legacy(entry, tokens, i, f"{where}.top_logprobs[{i}]")
        _queue(imp, values, col, err, loc, line, seq)


def _queue(imp: _Importer, values: list[float] | None, col: int, err: str, loc: str,
           line: int, seq: int) -> None:
    if values is None:
        imp.bad(loc, err, line_level=False)
    else:
        imp.add(values, col, line, seq)


def _json_payload(raw: str) -> str | None:
    """The JSON text of a line, or None for a blank or framing line."""
    text = raw.strip()
    if not text or text == "data: [DONE]" or text == "[DONE]":
        return None
    if text.startswith("data:"):
        text = text[5:].strip()
        return None if text in ("", "[DONE]") else text
    if text.startswith(_SSE_SKIP_PREFIXES):
        return None
    return text


def _read_record(imp: _Importer, record: Any, loc: str, line: int,
                 seqs: _SequenceTracker) -> None:
    for obj in (record if isinstance(record, list) else [record]):
        response, reason = _unwrap(obj)
        if response is None:
            imp.bad(loc, reason, line_level=True)
        else:
            _read_response(imp, response, loc, line, seqs)


def _looks_like_json_lines(path: Path) -> bool:
    """Whether the first non-blank line of a .json file is a complete JSON value."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for raw in fh:
            payload = _json_payload(raw)
            if payload is None:
                continue
            try:
                check_json_depth(payload, str(path))
                json.loads(payload)
            except (json.JSONDecodeError, UserError):
                return False
            return True
    return True


def _read_json_file(imp: _Importer, path: Path) -> bool:
    """Read one JSON Lines (or JSON document) file; return False when it is empty."""
    seqs = _SequenceTracker(imp)
    if path.suffix.lower() == ".json" and not _looks_like_json_lines(path):
        return _read_json_document(imp, path, seqs)
    nonblank = False
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line, raw in enumerate(fh, start=1):
            payload = _json_payload(raw)
            if payload is None:
                continue
            nonblank = True
            loc = f"{path}:{line}"
            try:
                check_json_depth(payload, loc)
                record = json.loads(payload)
            except UserError as exc:
                imp.bad(loc, str(exc).removeprefix(f"{loc}: "), line_level=True)
                continue
            except json.JSONDecodeError as exc:
                imp.bad(loc, f"malformed JSON: {exc.msg} (column {exc.colno})",
                        line_level=True)
                continue
            _read_record(imp, record, loc, line, seqs)
    imp.flush()
    return nonblank


def _read_json_document(imp: _Importer, path: Path, seqs: _SequenceTracker) -> bool:
    """Read a .json file holding one pretty-printed document (parsed whole)."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        try:
            text = fh.read()
            check_json_depth(text, str(path))
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            imp.bad(f"{path}:{exc.lineno}", f"malformed JSON: {exc.msg} (column "
                                            f"{exc.colno})", line_level=True)
            return True
    for i, obj in enumerate(doc if isinstance(doc, list) else [doc]):
        _read_record(imp, obj, f"{path}:1: response {i}", 1, seqs)
    imp.flush()
    return True


# ---------------------------------------------------------------------------------------
# npz
# ---------------------------------------------------------------------------------------


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


def _read_npz_file(imp: _Importer, path: Path) -> bool:
    """Read one .npz file; return False when it has no rows."""
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        imp.bad(str(path), f"not a readable .npz file ({exc})", line_level=True)
        return True
    with zf:
        try:
            members = _open_npz_members(zf, path)
        except (ValueError, OSError, zipfile.BadZipFile) as exc:
            imp.bad(str(path), str(exc), line_level=True)
            return True
        n, k = members["logprobs"].shape
        if n == 0 or k == 0:
            return False
        imp.formats.add("npz")
        block = max(1, _NPZ_BLOCK_ELEMENTS // k)
        offset = imp.next_sequence
        top_sequence = offset
        for start in range(0, n, block):
            try:
                chunk = {key: m.read(block) for key, m in members.items()}
            except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
                imp.bad(f"{path}: row {start}", f"cannot read array data ({exc})",
                        line_level=True)
                break
            lp = chunk["logprobs"].astype(np.float64)
            rows = lp.shape[0]
            seq = (offset + chunk["sequence"].astype(np.int64) if "sequence" in chunk
                   else np.full(rows, offset, dtype=np.int64))
            top_sequence = max(top_sequence, int(seq.max()) + 1)
            col = rank = None
            if "sampled_rank" in chunk:
                rank = chunk["sampled_rank"].astype(np.int64)
            elif "sampled_logprob" in chunk:
                col = _sampled_col_from_logprob(lp, chunk["sampled_logprob"].astype(float))
            imp.add_block(lp, sampled_col=col, sampled_rank=rank, drop_appended=False,
                          where=lambda i, start=start: f"{path}: row {start + i}",
                          sequence=seq)
        imp.next_sequence = top_sequence
    return True


# ---------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------


def _check_paths(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = [Path(p) for p in paths]
    if not out:
        raise UserError("import-logprobs: no input files given")
    for p in out:
        if not p.is_file():
            raise UserError(f"{p}: no such file")
        if p.suffix.lower() not in JSON_SUFFIXES + NPZ_SUFFIXES:
            raise UserError(f"{p}: unknown format '{p.suffix}' (expected one of "
                            f"{', '.join(JSON_SUFFIXES + NPZ_SUFFIXES)})")
    return out


def _check_positive_int(value: int | None, name: str) -> int | None:
    if value is None:
        return None
    return check_int(name, value, 1)


def _assemble(imp: _Importer) -> dict[str, np.ndarray]:
    """Concatenate the accumulated rows, zero padded to a common k."""
    k = max(r.probs.shape[1] for r in imp.rows)
    n = sum(len(r.tail) for r in imp.rows)
    probs = np.zeros((n, k))
    start = 0
    for r in imp.rows:
        probs[start:start + len(r.tail), :r.probs.shape[1]] = r.probs
        start += len(r.tail)

    def cat(getter: Any) -> np.ndarray:
        return np.concatenate([getter(r) for r in imp.rows])

    return {
        "probs": probs, "tail_mass": cat(lambda r: r.tail),
        "sampled_rank": cat(lambda r: r.rank), "sequence": cat(lambda r: r.sequence),
        "entropy_lower": cat(lambda r: r.bounds[0]), "entropy_upper": cat(lambda r: r.bounds[1]),
        "mu2_lower": cat(lambda r: r.bounds[2]), "mu2_upper": cat(lambda r: r.bounds[3]),
    }


_VARIABLES: dict[str, tuple[tuple[str, ...], str, str]] = {
    "probs": (("position", "rank"), "top-k next-token probabilities, sorted in descending "
              "order, zero padded", "1"),
    "tail_mass": (("position",), "probability outside the stored top-k entries", "1"),
    "sampled_rank": (("position",), "rank of the sampled token (0 = most likely; -1 = "
                     "unknown or outside the top-k)", "1"),
    "sequence": (("position",), "index of the generation (response choice or npz "
                 "sequence) the position belongs to", "1"),
    "entropy_lower": (("position",), "lower bound of the next-token entropy "
                      "-sum q log q", "nat"),
    "entropy_upper": (("position",), "upper bound of the next-token entropy "
                      "-sum q log q (inf: unbounded without a vocabulary size)", "nat"),
    "mu2_lower": (("position",), "lower bound of the second log-moment "
                  "sum q (log q)^2", "nat2"),
    "mu2_upper": (("position",), "upper bound of the second log-moment sum q (log q)^2 "
                  "(inf: unbounded without a vocabulary size)", "nat2"),
}


def _dataset(arrays: dict[str, np.ndarray], imp: _Importer, files: list[Path],
             command: str) -> xr.Dataset:
    data_vars = {
        name: xr.Variable(dims, arrays[name], attrs={"long_name": long_name, "units": units})
        for name, (dims, long_name, units) in _VARIABLES.items()
    }
    config = {"files": [str(f) for f in files], "top_k": imp.top_k, "vocab": imp.vocab,
              "skip_bad": imp.skip_bad}
    attrs: dict[str, Any] = provenance_attrs("brwsim logprob bank", config, 0, command)
    attrs.update({
        "source_files": json.dumps([str(f) for f in files]),
        "format": ", ".join(sorted(imp.formats)),
        "vocab": str(imp.vocab) if imp.vocab is not None else "unknown",
        "skipped_positions": imp.bad_positions,
        "skipped_lines": imp.bad_lines,
        "bounds_method": ("tail of mass r spread over tokens of probability <= the smallest "
                          "stored one: lower = most concentrated tail, upper = even spread "
                          "over vocab - k tokens (inf without vocab); see brwsim.logprobs"),
    })
    return xr.Dataset(data_vars, attrs=attrs)


def import_logprobs(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
                    out: str | os.PathLike[str] | None = None, *, skip_bad: bool = False,
                    top_k: int | None = None, vocab: int | None = None,
                    command: str = "") -> xr.Dataset:
    """Read next-token log-probabilities and build a bank Dataset.

    Inputs, conventions and the bounds are described in the module docstring
    (:mod:`brwsim.logprobs`).

    Parameters
    ----------
    paths : path-like or sequence of path-like
        ``.jsonl``/``.ndjson``/``.json`` files of OpenAI-compatible responses, or ``.npz``
        files with a ``logprobs`` array; read in order, streaming.
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
        Dims ``position`` and ``rank``; variables ``probs``, ``tail_mass``,
        ``sampled_rank``, ``sequence``, ``entropy_lower``, ``entropy_upper``,
        ``mu2_lower``, ``mu2_upper``.

    Raises
    ------
    brwsim.errors.UserError
        On the first bad position, line or file (``file:line: problem``; ``file: row i``
        for .npz) unless ``skip_bad``; when no valid position remains; for unknown
        extensions, missing files or bad parameters. Nothing is written then.
    """
    files = _check_paths(paths)
    imp = _Importer(skip_bad=skip_bad, top_k=_check_positive_int(top_k, "top_k"),
                    vocab=_check_positive_int(vocab, "vocab"))
    if out is not None:          # writable, before reading the inputs (not after)
        check_output_path(out, "--out")
    for path in files:
        imp.path = str(path)
        is_npz = path.suffix.lower() in NPZ_SUFFIXES
        nonempty = _read_npz_file(imp, path) if is_npz else _read_json_file(imp, path)
        if not nonempty:
            where = f"{path}: row 0" if is_npz else f"{path}:1"
            imp.bad(where, "empty file (no positions)", line_level=True)
    if not imp.rows:
        names = ", ".join(str(f) for f in files)
        raise UserError(f"{names}: no valid positions"
                        + (f" (first problem: {imp.first_issue})" if imp.first_issue else ""))
    if imp.bad_positions or imp.bad_lines:
        warnings.warn(f"skipped {imp.bad_positions} bad positions and {imp.bad_lines} bad "
                      f"lines or files; first: {imp.first_issue}", BadInputWarning,
                      stacklevel=2)
    ds = _dataset(_assemble(imp), imp, files,
                  command or f"brwsim.logprobs.import_logprobs({[str(f) for f in files]})")
    if out is not None:
        write_netcdf_atomic(ds, out)
    return ds


def load_bank(path_or_dataset: str | os.PathLike[str] | xr.Dataset,
              ) -> tuple[np.ndarray, np.ndarray]:
    """Read and validate a bank.

    Parameters
    ----------
    path_or_dataset : path-like or xarray.Dataset
        A bank written by :func:`import_logprobs` (or a Dataset with the same variables).

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
    _ds, _name, probs, tail = _read_bank(path_or_dataset)
    return probs, tail


def _read_bank(path_or_dataset: str | os.PathLike[str] | xr.Dataset,
               ) -> tuple[xr.Dataset, str, np.ndarray, np.ndarray]:
    """The bank Dataset, its name for messages and its validated probabilities and tails."""
    if isinstance(path_or_dataset, xr.Dataset):
        ds, name = path_or_dataset, "bank dataset"
    else:
        ds, name = open_dataset(path_or_dataset), str(path_or_dataset)
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
    _validate_bank_rows(name, probs, tail)
    return ds, name, probs, tail


_BOUND_NAMES = ("entropy_lower", "entropy_upper", "mu2_lower", "mu2_upper")


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
    ds, name, probs, tail = _read_bank(path_or_dataset)
    bounds, _vocab = _bounds_of(ds, name, probs, tail, vocab)
    return probs, tail, bounds


def _bank_vocab(ds: xr.Dataset) -> int | None:
    """The ``vocab`` attribute of a bank as an int (None when unknown)."""
    text = str(ds.attrs.get("vocab", ""))
    return int(text) if text.isdigit() and int(text) > 0 else None


def _bounds_of(ds: xr.Dataset, name: str, probs: np.ndarray, tail: np.ndarray,
               vocab: int | None) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray,
                                                 np.ndarray], int | None]:
    """Bounds of an opened bank (see :func:`bank_bounds`) and the vocabulary behind them."""
    vocab = _check_positive_int(vocab, "vocab")
    if vocab is None and all(v in ds.variables for v in _BOUND_NAMES):
        bounds = tuple(np.asarray(ds[v].values, dtype=np.float64) for v in _BOUND_NAMES)
        _validate_bounds(name, probs.shape[0], bounds)
        return bounds, _bank_vocab(ds)  # type: ignore[return-value]
    if vocab is None:
        vocab = _bank_vocab(ds)
    if vocab is not None:
        count = (probs > 0).sum(axis=1)
        q = probs[np.arange(probs.shape[0]), count - 1]
        for i, msg in enumerate(_first_issue(_vocab_checks(count, tail, q, vocab),
                                             probs.shape[0])):
            if msg is not None:
                raise UserError(f"{name}: position {i}: {msg}")
    return entropy_bounds(probs, tail, vocab), vocab


def _validate_bounds(name: str, n: int, bounds: Sequence[np.ndarray]) -> None:
    """Raise UserError naming the first bad stored bound of a bank."""
    for var, values in zip(_BOUND_NAMES, bounds):
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
    for i, msg in enumerate(_first_issue(checks, n)):
        if msg is not None:
            raise UserError(f"{name}: position {i}: {msg}")


def bank_entropies(path_or_dataset: str | os.PathLike[str] | xr.Dataset) -> np.ndarray:
    """One entropy value per bank position, from its bounds (nats).

    ``entropy_lower`` where ``entropy_upper`` is infinite (no vocabulary size: the lower
    bound, the tail as concentrated as allowed, is then the only finite value), otherwise
    the midpoint ``(entropy_lower + entropy_upper) / 2``. Bounds are those of
    :func:`bank_bounds` (stored, or recomputed when the bank lacks them).
    """
    _probs, _tail, (lower, upper, _m_lo, _m_hi) = bank_bounds(path_or_dataset)
    return np.where(np.isfinite(upper), 0.5 * (lower + upper), lower)


def _validate_bank_rows(name: str, probs: np.ndarray, tail: np.ndarray) -> None:
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
    issues = _first_issue(checks, probs.shape[0])
    for i, msg in enumerate(issues):
        if msg is not None:
            raise UserError(f"{name}: position {i}: {msg}")


# ---------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``import-logprobs`` subcommand to an argparse subparsers object.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        From ``parser.add_subparsers()``.

    Returns
    -------
    argparse.ArgumentParser
        The subcommand's parser (its ``func`` default is :func:`run`).
    """
    parser = subparsers.add_parser(
        "import-logprobs",
        help="turn next-token log-probabilities (JSON Lines, .npz) into a bank file",
        description="Read OpenAI-compatible responses with logprobs/top_logprobs (.jsonl, "
                    ".ndjson, .json) or .npz files with a 'logprobs' array of shape "
                    "(positions, k) and write a bank: sorted top-k probabilities, tail mass, "
                    "sampled rank and bounds of the entropy and second log-moment (nats).")
    parser.add_argument("files", nargs="+", metavar="FILE", help="input files")
    parser.add_argument("--out", required=True, metavar="BANK.nc", help="output netCDF file")
    parser.add_argument("--skip-bad", action="store_true",
                        help="skip bad positions and lines (with a warning) instead of failing")
    parser.add_argument("--top-k", type=int, default=None, metavar="K",
                        help="keep at most K entries per position")
    parser.add_argument("--vocab", type=int, default=None, metavar="V",
                        help="vocabulary size (makes the upper bounds finite)")
    parser.set_defaults(func=run)
    return parser


def _mean_text(values: np.ndarray) -> str:
    finite = np.isfinite(values)
    return f"{values.mean():.4g}" if finite.all() else "inf"


def describe_bank(ds: xr.Dataset, out: str | os.PathLike[str]) -> str:
    """One-paragraph description of a bank, as printed by ``brwsim import-logprobs``."""
    probs = ds["probs"].values
    counts = (probs > 0).sum(axis=1)
    n, k = probs.shape
    files = json.loads(ds.attrs.get("source_files", "[]"))
    rank = ds["sampled_rank"].values
    infinite = int((~np.isfinite(ds["entropy_upper"].values)).sum())
    text = (f"Wrote {out}: {n} positions from {len(files)} file(s) "
            f"({ds.attrs.get('format', 'unknown format')}), "
            f"k = {k}" + (f" (varies {counts.min()}..{counts.max()})"
                          if counts.min() != counts.max() else "")
            + f", mean tail mass {ds['tail_mass'].values.mean():.4g}, sampled rank known at "
            f"{(rank >= 0).sum()} positions. Mean entropy in "
            f"[{ds['entropy_lower'].values.mean():.4g}, {_mean_text(ds['entropy_upper'].values)}]"
            f" nat, mean second log-moment in [{ds['mu2_lower'].values.mean():.4g}, "
            f"{_mean_text(ds['mu2_upper'].values)}] nat^2.")
    if infinite:
        text += (f" Upper bounds are infinite at {infinite} positions with tail mass: "
                 "pass --vocab to bound them.")
    skipped = int(ds.attrs.get("skipped_positions", 0)) + int(ds.attrs.get("skipped_lines", 0))
    if skipped:
        text += (f" Skipped {ds.attrs['skipped_positions']} bad positions and "
                 f"{ds.attrs['skipped_lines']} bad lines or files.")
    return text


def run(args: argparse.Namespace) -> int:
    """Run ``brwsim import-logprobs`` with parsed arguments; print a summary.

    Returns
    -------
    int
        0 on success (errors raise :class:`~brwsim.errors.UserError`).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", BadInputWarning)
        ds = import_logprobs(args.files, args.out, skip_bad=args.skip_bad, top_k=args.top_k,
                             vocab=args.vocab, command=" ".join(["brwsim"] + sys.argv[1:]))
    for w in caught:
        print(f"brwsim: warning: {w.message}", file=sys.stderr)
    print(describe_bank(ds, args.out))
    return 0
