"""JSON input files: JSON Lines, server-sent-event captures and pretty-printed documents.

A line holds one response, one stream chunk or a JSON array of them, OpenAI-compatible
(:mod:`brwsim.bank.openai_json`) or llama.cpp native (:mod:`brwsim.bank.llamacpp`), in a
batch wrapper or not. Blank lines and server-sent-event framing (``data: `` prefixes,
``data: [DONE]``, ``event:``, ``id:``, ``retry:`` and ``:`` comment lines) are accepted. A
``.json`` file whose first line is not a complete JSON value is read as one (pretty-printed)
JSON document holding a response or an array of responses; such a document is parsed whole,
so use JSON Lines for large inputs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from brwsim.bank import llamacpp, openai_json
from brwsim.bank.collect import Collector, Sequences
from brwsim.errors import UserError
from brwsim.validate import check_json_depth

__all__ = ["SUFFIXES", "read_json_file"]

SUFFIXES = (".jsonl", ".ndjson", ".json")
_SSE_SKIP_PREFIXES = ("event:", "id:", "retry:", ":")


def _json_payload(raw: str) -> str | None:
    """The JSON text of a line, or None for a blank or framing line."""
    text = raw.strip()
    if not text or text in ("data: [DONE]", "[DONE]"):
        return None
    if text.startswith("data:"):
        text = text[5:].strip()
        return None if text in ("", "[DONE]") else text
    if text.startswith(_SSE_SKIP_PREFIXES):
        return None
    return text


def _read_record(col: Collector, record: Any, loc: str, line: int, seqs: Sequences) -> None:
    """Queue the positions of one parsed JSON value (a response or an array of them)."""
    for obj in (record if isinstance(record, list) else [record]):
        response, reason = openai_json.unwrap(obj, llamacpp.is_native)
        if response is None:
            col.bad(loc, reason, line_level=True)
        elif llamacpp.is_native(response):
            llamacpp.read_response(col, response, loc, line, seqs)
        else:
            openai_json.read_response(col, response, loc, line, seqs)


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


def read_json_file(col: Collector, path: Path) -> bool:
    """Read one JSON Lines (or JSON document) file into ``col``; False when it is empty."""
    seqs = Sequences(col)
    if path.suffix.lower() == ".json" and not _looks_like_json_lines(path):
        return _read_json_document(col, path, seqs)
    nonblank = False
    bar = _progress(path)
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line, raw in enumerate(fh, start=1):
            if bar is not None:
                bar.update(len(raw))
            payload = _json_payload(raw)
            if payload is None:
                continue
            nonblank = True
            loc = f"{path}:{line}"
            try:
                check_json_depth(payload, loc)
                record = json.loads(payload)
            except UserError as exc:
                col.bad(loc, str(exc).removeprefix(f"{loc}: "), line_level=True)
                continue
            except json.JSONDecodeError as exc:
                col.bad(loc, f"malformed JSON: {exc.msg} (column {exc.colno})",
                        line_level=True)
                continue
            _read_record(col, record, loc, line, seqs)
    if bar is not None:
        bar.close()
    col.flush()
    return nonblank


#: Files at least this large show a progress bar while read (on stderr, when a terminal).
PROGRESS_BYTES = 8 << 20


def _progress(path: Path) -> Any:
    """A tqdm bar in characters read (about bytes) for a large file, or None: only when
    stderr is a terminal and the file holds at least :data:`PROGRESS_BYTES`."""
    import sys

    try:
        size = path.stat().st_size
    except OSError:
        return None
    if size < PROGRESS_BYTES or not sys.stderr.isatty():
        return None
    from tqdm.auto import tqdm

    return tqdm(total=size, unit="B", unit_scale=True, desc=f"import {path.name}"[:40],
                file=sys.stderr, leave=False)


def _read_json_document(col: Collector, path: Path, seqs: Sequences) -> bool:
    """Read a .json file holding one pretty-printed document (parsed whole)."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        try:
            text = fh.read()
            check_json_depth(text, str(path))
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            col.bad(f"{path}:{exc.lineno}", f"malformed JSON: {exc.msg} (column "
                                            f"{exc.colno})", line_level=True)
            return True
    for i, obj in enumerate(doc if isinstance(doc, list) else [doc]):
        _read_record(col, obj, f"{path}:1: response {i}", 1, seqs)
    col.flush()
    return True
