"""String forms of policies (``"dynamic(depth=6, topk=10)"``): the family parser with the policy registry."""

from __future__ import annotations

from typing import Any

from brwsim.errors import UserError
from brwsim.families.parse import bind_call, parse_text
from brwsim.policies.base import POLICIES, Policy

__all__ = ["parse_policy"]


def _build_policy(name: str, args: list[Any], kwargs: dict[str, Any]) -> Policy:
    key = name.lower()
    if key not in POLICIES:
        raise UserError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}")
    return bind_call(POLICIES[key], key, args, kwargs)


def parse_policy(text: str) -> Policy:
    """Build a policy from its string form.

    Parameters
    ----------
    text : str
        E.g. ``"dynamic(depth=6, topk=10)"``, ``"kary(4)"`` or a bare name such as
        ``"chain"`` (a policy without required parameters).

    Returns
    -------
    Policy

    Raises
    ------
    brwsim.errors.UserError
        On a syntax error, an unknown name, a wrong argument or an invalid value.
    """
    if not isinstance(text, str):
        raise UserError(f"a policy must be given as a string, got {text!r}")
    out = parse_text(text, _build_policy, "policy")
    if isinstance(out, str) and out.lower() in POLICIES:
        out = _build_policy(out, [], {})
    if not isinstance(out, Policy):
        raise UserError(f"{text!r} is not a policy; known: {', '.join(sorted(POLICIES))}")
    return out
