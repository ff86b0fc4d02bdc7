"""The one exception type that reaches a user as a single clear line."""

from __future__ import annotations

__all__ = ["UserError"]


class UserError(ValueError):
    """Bad input from a user: a parameter, a file or a configuration.

    The CLI prints ``brwsim: error: <message>`` on one line and exits with status 2;
    the Python API lets it propagate (it is a ``ValueError``). Messages name the
    offending parameter, key or file (and line) and say what was expected.
    """
