"""A Hugging Face ``config.json``, read and checked as untrusted input.

The one reader of a checkpoint folder's (or a draft head's) configuration: a FIFO, a
device or a file larger than :data:`MAX_CONFIG_BYTES` is refused before it is opened;
JSON that does not parse, or numbers of thousands of digits, or nesting deeper than the
recursion limit are one :class:`~brwsim.errors.UserError` line; so are entries of the
wrong type (:func:`config_text`, :func:`config_key`).
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from brwsim.errors import UserError
from brwsim.validate import check_input_file, echo

__all__ = ["MAX_CONFIG_BYTES", "read_config", "config_text", "config_key"]

#: Largest config.json read (a real one is a few KiB): a bigger file is refused unread.
MAX_CONFIG_BYTES = 1 << 24


def read_config(folder: str, what: str = "checkpoint folder") -> dict:
    """The JSON object in ``folder/config.json``.

    Parameters
    ----------
    folder : str
        The folder (a checkpoint, a draft head).
    what : str
        How messages name the folder (``"checkpoint folder"``, ``"EAGLE head"``).

    Raises
    ------
    brwsim.errors.UserError
        When the folder or its config.json is missing, not a regular file of at most
        :data:`MAX_CONFIG_BYTES`, not JSON, or not a JSON object.
    """
    path = os.path.join(folder, "config.json")
    if not os.path.isdir(folder):
        raise UserError(f"{what} {folder!r} not found")
    if os.path.lexists(path):      # a pipe, a device or a huge file: refused before opening
        check_input_file(path, f"{what} config", MAX_CONFIG_BYTES)
    try:
        with open(path, encoding="utf-8") as fh:
            cfg = json.load(fh)
    except FileNotFoundError:
        raise UserError(f"{what} {folder!r} has no config.json") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:   # JSON, digits, nesting
        raise UserError(f"{path}: not JSON ({' '.join(str(exc).split())[:200]})") from None
    except OSError as exc:
        raise UserError(f"{path}: unreadable ({exc.strerror or exc})") from None
    if not isinstance(cfg, dict):
        raise UserError(f"{path}: not a JSON object")
    return cfg


def config_text(cfg: dict, name: str, where: str, default: str | None = None) -> str | None:
    """A config entry that must be a string (``default`` when absent or null)."""
    value = cfg.get(name)
    if value is None:
        return default
    if not isinstance(value, str):
        raise UserError(f"{where}: config key {name!r} = {echo(value)} is not a string")
    return value


def config_key(cfg: dict, name: str, where: str, default: Any = None, kind: type = int) -> Any:
    """A config entry of the given kind, positive (``default`` None: required); integers
    below 2**40."""
    if name not in cfg or cfg[name] is None:
        if default is None:
            raise UserError(f"{where}: config key {name!r} is missing")
        return default
    value = cfg[name]
    try:           # an integer of thousands of digits overflows float(): not a size either
        ok = (isinstance(value, bool) if kind is bool else
              isinstance(value, (int, float)) and not isinstance(value, bool)
              and (kind is float or float(value).is_integer())
              and math.isfinite(value) and value > 0 and (kind is float or value < 1 << 40))
    except OverflowError:
        ok = False
    if not ok:
        raise UserError(f"{where}: config key {name!r} = {echo(value, 60)} is not a positive "
                        f"{'boolean' if kind is bool else kind.__name__}"
                        f"{' below 2**40' if kind is int else ''}")
    return kind(value)
