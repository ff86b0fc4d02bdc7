"""OpenAI-compatible responses: chat and legacy completions, streams, batch wrappers.

The shapes are those of the OpenAI API and of the servers that imitate it (vLLM, SGLang,
llama.cpp's ``/v1`` endpoints) when log-probabilities are requested
(``logprobs=true, top_logprobs=K`` for chat, ``logprobs=K`` for completions):

* chat (``chat.completion`` or a streamed ``chat.completion.chunk``):
  ``choices[].logprobs.content[]`` items, each with the sampled ``token``/``logprob`` and a
  ``top_logprobs`` list (see :mod:`brwsim.bank.entries` for the item forms);
* legacy completions (``text_completion``, streamed or not): ``choices[].logprobs`` with
  ``top_logprobs`` (one ``{token: logprob}`` object per position) and the sampled
  ``tokens``. With ``echo=true`` the prompt's positions come first; the first of them has
  no distribution (``null``) and is skipped. llama.cpp's ``/v1/completions`` writes
  chat-style ``logprobs.content`` items instead, which are read as chat items;
* either wrapped as batch APIs write them: ``{"response": {"status_code": 200, "body":
  {...}}}`` (OpenAI Batch API, vLLM ``run_batch``), ``{"response": {...}}`` or
  ``{"body": {...}}``; a record whose ``status_code`` is not 200 or whose ``response`` is
  null is a bad line.

Streams
-------
Every chunk of one choice (same response ``id`` and choice ``index``) belongs to one
generation and gets one sequence number, however the chunks of ``n > 1`` choices
interleave. A choice without ``logprobs`` is accepted in a stream (the role chunk, the final
chunk with its finish reason, which llama.cpp writes with ``"logprobs": null``) and is a bad
line otherwise.

The sampled token
-----------------
vLLM lists the sampled token first and keeps the first K entries, so with
``top_logprobs=K`` the list is the top K - 1 plus the sampled token whenever that token is
outside the top K - 1; the sampled token, then the least likely listed entry, is moved to
the tail (:mod:`brwsim.bank.rows`). With ``top_logprobs=1`` the lone entry is the sampled
token itself, whose rank is unknown: such a position is placed at rank 0 only when its
probability exceeds 1/2 and refused otherwise (request ``top_logprobs >= 2``).
"""

from __future__ import annotations

import json
from collections.abc import Hashable
from typing import Any

from brwsim.bank.collect import Collector, Sequences
from brwsim.bank.entries import is_number, item_entries, single_sampled_issue

__all__ = ["read_response", "unwrap"]


def unwrap(record: Any, is_native: Any) -> tuple[dict[str, Any] | None, str]:
    """The response object inside a batch wrapper, or (None, reason).

    Parameters
    ----------
    record : object
        One parsed JSON value.
    is_native : callable
        Recognises a non-OpenAI response (llama.cpp's native ``/completion``), which ends the
        unwrapping like an object with ``choices``.
    """
    obj = record
    for _ in range(4):
        if not isinstance(obj, dict):
            return None, f"expected a JSON object, got {type(obj).__name__}"
        if "choices" in obj or is_native(obj):
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


def _stream_key(response: dict[str, Any], choice: dict[str, Any], c: int,
                streamed: bool) -> Hashable | None:
    """The key that joins the chunks of one choice (None: a generation of its own)."""
    index = choice.get("index", c)
    rid = response.get("id")
    if rid is not None:
        return ("openai", str(rid), str(index))
    return ("openai-stream", str(index)) if streamed else None


def read_response(col: Collector, response: dict[str, Any], loc: str, line: int,
                  seqs: Sequences) -> None:
    """Queue the positions of one OpenAI-compatible response object (or stream chunk)."""
    choices = response.get("choices")
    if not isinstance(choices, list):
        col.bad(loc, "'choices' is not a list", line_level=True)
        return
    chunk = str(response.get("object", "")).endswith("chunk")
    for c, choice in enumerate(choices):
        where = f"choices[{c}]"
        if not isinstance(choice, dict):
            col.bad(loc, f"{where}: expected an object", line_level=True)
            continue
        streamed = chunk or "delta" in choice
        key = _stream_key(response, choice, c, streamed)
        logprobs = choice.get("logprobs")
        if logprobs is None:
            if not (streamed or seqs.was_seen(key)):
                col.bad(loc, f"{where}: no 'logprobs' (request logprobs=true and "
                             "top_logprobs=K, or logprobs=K for completions)", line_level=True)
        elif not isinstance(logprobs, dict):
            col.bad(loc, f"{where}.logprobs: expected an object", line_level=True)
        elif "content" in logprobs:
            _read_chat(col, logprobs["content"], f"{where}.logprobs.content", loc, line,
                       seqs.get(key))
        elif "top_logprobs" in logprobs:
            _read_legacy(col, logprobs, f"{where}.logprobs", loc, line, seqs.get(key))
        else:
            col.bad(loc, f"{where}.logprobs: neither 'content' (chat) nor 'top_logprobs' "
                         "(completions)", line_level=True)
        if choice.get("finish_reason") is not None:
            seqs.close(key)


def _queue(col: Collector, values: list[float] | None, sampled_col: int, err: str,
           where: str, loc: str, line: int, seq: int) -> None:
    """Queue one position, or report why it is bad."""
    if values is not None:
        issue = single_sampled_issue(values, sampled_col)
        if issue:
            values, err = None, f"{where}: {issue}"
    if values is None:
        col.bad(loc, err, line_level=False)
    else:
        col.add(values, sampled_col, line, seq)


def _read_chat(col: Collector, content: Any, where: str, loc: str, line: int,
               seq: int) -> None:
    if content is None:
        return
    if not isinstance(content, list):
        col.bad(loc, f"{where}: expected a list", line_level=True)
        return
    col.formats.add("openai-chat")
    for j, item in enumerate(content):
        values, sampled_col, err = item_entries(item, f"{where}[{j}]")
        _queue(col, values, sampled_col, err, f"{where}[{j}]", loc, line, seq)


def _legacy_entries(top: Any, tokens: Any, i: int, where: str,
                    ) -> tuple[list[float] | None, int, str]:
    """Log-probabilities and sampled column of one legacy-completions position."""
    if not isinstance(top, dict):
        return None, -1, f"{where}: expected a {{token: logprob}} object"
    values: list[float] = []
    for token, lp in top.items():
        if lp is None:
            return None, -1, f"{where}[{token!r}]: missing logprob"
        if not is_number(lp):
            return None, -1, f"{where}[{token!r}]: logprob is not a number: {lp!r}"
        values.append(float(lp))
    sampled = tokens[i] if isinstance(tokens, list) and i < len(tokens) else None
    sampled_col = next((j for j, tok in enumerate(top) if tok == sampled), -1)
    return values, sampled_col, ""


def _read_legacy(col: Collector, logprobs: dict[str, Any], where: str, loc: str,
                 line: int, seq: int) -> None:
    top = logprobs["top_logprobs"]
    if top is None:
        col.bad(loc, f"{where}.top_logprobs is null (request logprobs=K with K >= 1)",
                line_level=True)
        return
    if not isinstance(top, list):
        col.bad(loc, f"{where}.top_logprobs: expected a list", line_level=True)
        return
    col.formats.add("openai-completions")
    tokens = logprobs.get("tokens")
    token_logprobs = logprobs.get("token_logprobs")
    for i, entry in enumerate(top):
        here = f"{where}.top_logprobs[{i}]"
        if entry is None:
            echoed_first = (isinstance(token_logprobs, list) and i < len(token_logprobs)
                            and token_logprobs[i] is None)
            if not echoed_first:
                col.bad(loc, f"{here}: is null (no top log-probabilities at this position)",
                        line_level=False)
            continue   # the first token of an echoed prompt has no distribution
        values, sampled_col, err = _legacy_entries(entry, tokens, i, here)
        _queue(col, values, sampled_col, err, here, loc, line, seq)
