"""The listed tokens of one generated position, as the JSON servers write them.

One position ("item") lists the sampled token and some of the most likely tokens with their
log-probabilities or probabilities. Three forms exist:

* ``{"token", "logprob", "top_logprobs": [{"token", "logprob"}, ...]}``: OpenAI chat
  ``logprobs.content[]`` items (also vLLM, SGLang and llama.cpp's OpenAI-compatible
  endpoints, and llama.cpp's native ``completion_probabilities[]``);
* ``{"token", "prob", "top_probs": [{"token", "prob"}, ...]}``: llama.cpp with
  ``post_sampling_probs: true`` (probabilities after its sampler chain);
* ``{"content", "probs": [{"tok_str", "prob"}, ...]}``: llama.cpp's ``/completion`` before
  its OpenAI-compatible probabilities (late 2024 and earlier).

:func:`item_entries` turns any of them into a list of log-probabilities and the column of
the sampled token in it.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["is_number", "item_entries", "single_sampled_issue", "SINGLE_SAMPLED_LIMIT"]

#: A position listing only its sampled token is placed at rank 0 when the token's
#: probability exceeds this: no other token can then be more likely.
SINGLE_SAMPLED_LIMIT = 0.5

# (list key, value key, token key of a listed entry, token key of the sampled token,
#  value key of the sampled token)
_FORMS = (("top_logprobs", "logprob", "token", "token", "logprob"),
          ("top_probs", "prob", "token", "token", "prob"),
          ("probs", "prob", "tok_str", "content", None))


def is_number(value: Any) -> bool:
    """Whether ``value`` is a JSON number (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_logprob(value: float, key: str) -> tuple[float | None, str]:
    """A log-probability from a ``logprob`` or ``prob`` value, or (None, reason)."""
    if key == "logprob":
        return float(value), ""
    if value < 0:
        return None, f"negative prob {value!r}"
    return (math.log(value) if value > 0 else -math.inf), ""


def item_entries(item: Any, where: str) -> tuple[list[float] | None, int, str]:
    """Log-probabilities of a position's listed tokens and the sampled token's column.

    Parameters
    ----------
    item : object
        One position in any of the three forms of the module docstring.
    where : str
        The item's place in the response, for messages.

    Returns
    -------
    values : list of float or None
        One log-probability per listed token (None when the item is bad).
    sampled_col : int
        Index in ``values`` of the sampled token (the listed entry with the same token id
        when the item and its entries carry ``id`` fields, as llama.cpp writes them, else
        the entry with the same token text and the closest value), -1 when it is not
        listed or unknown.
    error : str
        Why the item is bad ("" when it is not).
    """
    if not isinstance(item, dict):
        return None, -1, f"{where}: expected an object"
    form = next((f for f in _FORMS if f[0] in item), None)
    if form is None:
        return None, -1, (f"{where}: missing 'top_logprobs' (request top_logprobs >= 1, or "
                          "n_probs >= 1 from llama.cpp)")
    list_key, value_key, token_key, sampled_key, sampled_value_key = form
    top = item[list_key]
    if not isinstance(top, list):
        return None, -1, f"{where}.{list_key}: expected a list"
    values: list[float] = []
    for j, entry in enumerate(top):
        raw = entry.get(value_key) if isinstance(entry, dict) else None
        if raw is None:
            return None, -1, f"{where}.{list_key}[{j}]: missing '{value_key}'"
        if not is_number(raw):
            return None, -1, f"{where}.{list_key}[{j}]: {value_key} is not a number: {raw!r}"
        lp, err = _as_logprob(raw, value_key)
        if lp is None:
            return None, -1, f"{where}.{list_key}[{j}]: {err}"
        values.append(lp)
    token = item.get(sampled_key)
    sampled = item.get(sampled_value_key) if sampled_value_key else None
    sampled_lp = _as_logprob(sampled, value_key)[0] if is_number(sampled) else None
    token_id = item.get("id")
    if isinstance(token_id, int) and all(isinstance(e.get("id"), int) for e in top):
        # llama.cpp lists token ids: they identify the sampled token even when two tokens
        # decode to the same text.
        return values, next((j for j, e in enumerate(top) if e["id"] == token_id), -1), ""
    col, best = -1, math.inf
    if token is not None:
        for j, entry in enumerate(top):
            if entry.get(token_key) == token:
                gap = (abs(values[j] - sampled_lp)
                       if sampled_lp is not None and math.isfinite(values[j]) else 0.0)
                if gap < best:
                    col, best = j, gap
    return values, col, ""


def single_sampled_issue(values: list[float], col: int) -> str:
    """Why a position that lists only its sampled token cannot be placed ("" if it can).

    With ``top_logprobs=1``, vLLM lists the sampled token rather than the most likely one
    (its sampler puts the sampled token first and the server keeps the first entry), while
    OpenAI and SGLang list the most likely one. A lone entry that is the sampled token is
    therefore the most likely one only when its probability exceeds 1/2; otherwise its rank
    is unknown at temperature > 0 and the position is refused.
    """
    positive = [j for j, v in enumerate(values) if v > -math.inf and math.exp(v) > 0.0]
    if len(positive) != 1 or positive[0] != col:
        return ""
    p = math.exp(min(values[col], 0.0))
    if p > SINGLE_SAMPLED_LIMIT:
        return ""
    return (f"only the sampled token is listed (p = {p:.4g} <= {SINGLE_SAMPLED_LIMIT}): "
            "vLLM lists the sampled token, not the most likely one, so at temperature > 0 "
            "its rank is unknown; request top_logprobs >= 2 (or logprobs >= 2 for "
            "completions)")
