"""Rendering a conversation with a checkpoint's chat template (Jinja2, sandboxed).

A chat template (``tokenizer.chat_template`` of a GGUF, ``chat_template`` of a Hugging
Face ``tokenizer_config.json``) is a Jinja2 program over ``messages`` (a list of
``{"role": ..., "content": ...}``), ``add_generation_prompt`` and the special token
strings. It is rendered as transformers renders it: in Jinja2's immutable sandbox (a
template cannot reach Python objects or mutate its inputs), with ``trim_blocks`` and
``lstrip_blocks``, the ``loopcontrols`` extension, a ``tojson`` filter and a
``raise_exception`` function whose message becomes a :class:`~brwsim.errors.UserError`.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any

from brwsim.errors import UserError

__all__ = ["render_chat", "check_messages"]

_ROLES = ("system", "user", "assistant", "tool")


def check_messages(messages: Any, where: str = "messages") -> list[dict[str, str]]:
    """``messages`` as a list of ``{"role", "content"}`` dicts of strings (else UserError)."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise UserError(f"{where}: a conversation must be a non-empty list of messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) \
                or not isinstance(m.get("content"), str):
            raise UserError(f"{where}[{i}]: a message is {{\"role\": str, \"content\": str}}")
        if m["role"] not in _ROLES:
            raise UserError(f"{where}[{i}]: role {m['role']!r} is not one of {', '.join(_ROLES)}")
        out.append({"role": m["role"], "content": m["content"]})
    return out


@functools.lru_cache(maxsize=8)
def _compile(template: str):
    from jinja2 import TemplateError
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise UserError(f"chat template: {message}")

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None,
               separators: Any = None, sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return env.from_string(template)
    except TemplateError as exc:
        raise UserError(f"chat template does not compile: {str(exc).splitlines()[0]}") from None


def render_chat(template: str | None, messages: Any, add_generation_prompt: bool = True,
                bos_token: str = "", eos_token: str = "", model: str = "the model") -> str:
    """The text of ``messages`` under ``template``, ending (by default) with the header of
    the assistant's turn.

    Raises
    ------
    UserError
        ``template`` is None (``chat=true`` on a model without a chat template: the line
        names ``model`` and suggests ``chat=false``), the messages are malformed, or the
        template fails or raises.
    """
    from jinja2 import TemplateError

    if template is None:
        raise UserError(f"{model} has no chat template; use chat=false for raw prompts")
    msgs = check_messages(messages)
    tpl = _compile(template)
    try:
        return tpl.render(messages=msgs, add_generation_prompt=bool(add_generation_prompt),
                          bos_token=bos_token, eos_token=eos_token)
    except TemplateError as exc:
        raise UserError(f"chat template failed: {str(exc).splitlines()[0]}") from None
