"""The state of one import: pending positions, validated rows, issues and sequence numbers.

Every input source (:mod:`brwsim.bank.openai_json`, :mod:`brwsim.bank.llamacpp`,
:mod:`brwsim.bank.npz`) feeds a :class:`Collector`: JSON readers queue one position at a
time with :meth:`Collector.add`, the npz reader hands whole blocks to
:meth:`Collector.add_block`. Rows are checked by :func:`brwsim.bank.rows.rows_from_logprobs`
and their bounds computed by :func:`brwsim.bank.bounds.entropy_bounds` a block at a time, so
the pending Python objects stay bounded whatever the file size.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import numpy as np

from brwsim.bank.bounds import entropy_bounds
from brwsim.bank.rows import rows_from_logprobs
from brwsim.errors import UserError

__all__ = ["BadInputWarning", "Collector", "Rows", "Sequences"]

#: Positions gathered before they are converted to arrays (bounds the pending Python objects).
BLOCK_POSITIONS = 4096


class BadInputWarning(UserWarning):
    """Bad positions, lines or files were skipped because ``skip_bad`` was set."""


@dataclass
class Rows:
    """Bank rows computed from one block of positions."""

    probs: np.ndarray
    tail: np.ndarray
    rank: np.ndarray
    sequence: np.ndarray
    bounds: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass
class _Pending:
    """Positions of one file waiting to be converted to arrays."""

    logprobs: list[list[float]] = field(default_factory=list)
    sampled_col: list[int] = field(default_factory=list)
    line: list[int] = field(default_factory=list)
    sequence: list[int] = field(default_factory=list)
    appended: list[bool] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.line)


class Collector:
    """Accumulates the validated rows of one :func:`brwsim.bank.import_logprobs` call.

    Parameters
    ----------
    skip_bad : bool
        Count bad positions and lines instead of raising on the first one.
    top_k, vocab : int or None
        As for :func:`brwsim.bank.import_logprobs`.
    """

    def __init__(self, *, skip_bad: bool, top_k: int | None, vocab: int | None) -> None:
        self.skip_bad = skip_bad
        self.top_k = top_k
        self.vocab = vocab
        self.rows: list[Rows] = []
        self.pending = _Pending()
        self.path = ""
        self.bad_positions = 0
        self.bad_lines = 0
        self.first_issue = ""
        self.formats: set[str] = set()
        self.next_sequence = 0

    def bad(self, where: str, message: str, *, line_level: bool) -> None:
        """Report a bad position or line: raise :class:`UserError`, or count it when skipping."""
        text = f"{where}: {message}"
        if not self.skip_bad:
            self.flush()
            raise UserError(text)
        if line_level:
            self.bad_lines += 1
        else:
            self.bad_positions += 1
        self.first_issue = self.first_issue or text

    def add(self, logprobs: list[float], sampled_col: int, line: int, sequence: int, *,
            appended: bool = True) -> None:
        """Queue one position read from a JSON line.

        ``sampled_col`` is the sampled token's index in ``logprobs`` (-1 when unknown);
        ``appended`` says that the server may have added the sampled token to the list
        (see :mod:`brwsim.bank.rows`), False for exact top-k lists.
        """
        pend = self.pending
        pend.logprobs.append(logprobs)
        pend.sampled_col.append(sampled_col)
        pend.line.append(line)
        pend.sequence.append(sequence)
        pend.appended.append(appended)
        if len(pend) >= BLOCK_POSITIONS:
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
                       sampled_rank=None,
                       drop_appended=np.asarray(pend.appended, dtype=bool),
                       where=lambda i, path=self.path, lines=pend.line: f"{path}:{lines[i]}",
                       sequence=np.asarray(pend.sequence, dtype=np.int64))

    def add_block(self, lp: np.ndarray, *, sampled_col: np.ndarray | None,
                  sampled_rank: np.ndarray | None, drop_appended: bool | np.ndarray,
                  where: Callable[[int], str], sequence: np.ndarray) -> None:
        """Validate a block of positions (rows of log-probabilities) and keep its valid rows."""
        ps, tail, rank, issues = rows_from_logprobs(
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
        self.rows.append(Rows(ps, tail, rank[good], sequence[good],
                              entropy_bounds(ps, tail, self.vocab)))

    def new_sequence(self) -> int:
        """A fresh sequence number."""
        self.next_sequence += 1
        return self.next_sequence - 1


class Sequences:
    """Sequence numbers of the generations in one file, keyed by stream.

    Every record that continues a generation (a stream chunk of the same response id and
    choice index, a llama.cpp stream chunk of the same task index) carries the same key and
    so gets the same number, however chunks of different choices interleave. A key is
    closed when its generation ends (a finish reason, llama.cpp's ``stop: true``); records
    without a key are generations of their own.
    """

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.open: dict[Hashable, int] = {}
        self.closed: set[Hashable] = set()
        #: Positions queued so far under each open key (kept by readers that need it).
        self.positions: dict[Hashable, int] = {}

    def get(self, key: Hashable | None) -> int:
        """The sequence number of ``key`` (a fresh one for None or a new key)."""
        if key is None:
            return self.collector.new_sequence()
        if key not in self.open:
            self.open[key] = self.collector.new_sequence()
        return self.open[key]

    def is_open(self, key: Hashable | None) -> bool:
        """Whether ``key`` has a generation in progress."""
        return key is not None and key in self.open

    def was_seen(self, key: Hashable | None) -> bool:
        """Whether ``key`` has had positions in this file (open or since closed)."""
        return key is not None and (key in self.open or key in self.closed)

    def close(self, key: Hashable | None) -> None:
        """End the generation of ``key``: its next record starts a new sequence."""
        if key is not None and key in self.open:
            del self.open[key]
            self.positions.pop(key, None)
            self.closed.add(key)
