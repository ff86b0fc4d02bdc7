"""llama.cpp's native ``/completion`` responses (request ``n_probs=K``).

A response holds ``completion_probabilities``: one item per generated token, in any of the
forms of :mod:`brwsim.bank.entries` (``top_logprobs`` by default, ``top_probs`` with
``post_sampling_probs: true``, ``probs: [{tok_str, prob}]`` from older servers). llama.cpp
lists the K most likely tokens of the distribution (before or, with
``post_sampling_probs``, after its sampler chain), so a one-entry list is a true top-1.

Streams (``stream: true``) send one chunk per token, ``{"index", "content", "stop": false,
"completion_probabilities": [item]}``, then a final ``"stop": true`` chunk that ends the
generation; chunks of one task ``index`` form one sequence. Current servers send the final
chunk without probabilities; older ones repeat every position of the generation in it, of
which the streamed positions are a prefix, so only the positions not streamed yet are
added. A non-streamed response is a single ``"stop": true`` object holding every item.
"""

from __future__ import annotations

from typing import Any

from brwsim.bank.collect import Collector, Sequences
from brwsim.bank.entries import item_entries

__all__ = ["is_native", "read_response"]


def is_native(obj: dict[str, Any]) -> bool:
    """Whether a JSON object is a llama.cpp ``/completion`` response or stream chunk."""
    return "completion_probabilities" in obj or (
        "choices" not in obj and isinstance(obj.get("stop"), bool) and "content" in obj)


def read_response(col: Collector, response: dict[str, Any], loc: str, line: int,
                  seqs: Sequences) -> None:
    """Queue the positions of one llama.cpp response or stream chunk."""
    key = ("llama.cpp", str(response.get("index", 0)))
    final = response.get("stop") is True
    items = response.get("completion_probabilities")
    if items is None:
        if final and seqs.is_open(key):
            seqs.close(key)          # the final chunk of a stream
        elif not final and (seqs.is_open(key) or "prompt_progress" in response):
            pass                     # a progress chunk, or a token chunk without probabilities
        else:
            col.bad(loc, "no 'completion_probabilities' (request n_probs=K with K >= 1)",
                    line_level=True)
        return
    if not isinstance(items, list):
        col.bad(loc, "completion_probabilities: expected a list", line_level=True)
        return
    col.formats.add("llama.cpp-completion")
    streamed = seqs.is_open(key)
    seq = seqs.get(key if (streamed or not final) else None)
    if final and streamed:
        # Older servers repeat every position of the generation in the final chunk; the
        # streamed ones are its prefix, so only the rest is new.
        items = items[seqs.positions.get(key, 0):]
    for j, item in enumerate(items):
        values, sampled_col, err = item_entries(item, f"completion_probabilities[{j}]")
        if values is None:
            col.bad(loc, err, line_level=False)
        else:
            col.add(values, sampled_col, line, seq, appended=False)
            seqs.positions[key] = seqs.positions.get(key, 0) + 1
    if final:
        seqs.close(key)
