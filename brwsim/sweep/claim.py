"""The output folder of a sweep: an exclusive lock, the recorded configuration, clean-up.

``DIR/.lock`` (an flock the OS releases even after SIGKILL) keeps a second sweep out;
``DIR/config.json`` holds the configuration and its hash, so a rerun resumes the same
sweep and a different one is refused; a failure before any shard undoes the claim.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brwsim.errors import UserError
from brwsim.io import atomic_path
from brwsim.sweep.config import SweepConfig

__all__ = ["FolderState", "exclusive", "claim", "undo_claim", "remove_temporaries", "write_text_atomic"]

_STATE_FORMAT = 1
RESULTS = "results.nc"


@dataclass
class FolderState:
    """What this call created in the output folder (undone when it fails before any shard)."""

    created_dir: bool = False
    created_lock: bool = False
    created_config: bool = False
    created_shards: bool = False


def undo_claim(out: Path, state: FolderState) -> None:
    """After a failure: remove what this call created, unless a shard (work) exists.

    A sweep that fails before any task finished (a bad scheduler, memory, a foreign file in
    the folder) leaves the folder as it found it, so a rerun is not refused as a claim by a
    run that never happened. Runs with finished shards keep them: a rerun resumes.
    """
    shards = out / "shards"
    if shards.is_dir() and any(shards.glob("p*.nc")):
        return
    steps = []                # each on its own: one failing (shards/ never made) skips none
    if state.created_shards:
        steps += [tmp.unlink for tmp in shards.glob(".*.tmp")] + [shards.rmdir]
    if state.created_config:
        steps.append((out / "config.json").unlink)
    if state.created_lock:
        steps.append((out / ".lock").unlink)         # still held: no one else has it
    steps += [tmp.unlink for tmp in out.glob(".config.json.*.tmp")]
    if state.created_dir:
        steps.append(out.rmdir)
    for step in steps:
        with contextlib.suppress(OSError):
            step()


# --- the output folder -------------------------------------------------------------------

@contextlib.contextmanager
def exclusive(out: Path) -> Iterator[FolderState]:
    """Hold an exclusive lock on ``out/.lock`` (released by the OS even after SIGKILL).

    Yields what this call created (the folder, the lock file), for :func:`undo_claim`.
    """
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a folder")
    state = FolderState(created_dir=not out.exists())
    out.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no lock
        yield state
        return
    lock = out / ".lock"
    state.created_lock = not lock.exists()
    try:
        fh = open(lock, "w")
    except OSError:
        if state.created_dir:
            with contextlib.suppress(OSError):
                out.rmdir()
        raise
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise UserError(f"{out}: another brwsim sweep is running in this folder") from None
        yield state


def claim(out: Path, cfg: SweepConfig, state: FolderState) -> None:
    """Record the configuration in ``out/config.json``, or refuse a different one."""
    meta = out / "config.json"
    if meta.exists():
        try:
            stored = json.loads(meta.read_text())
        except (OSError, ValueError):
            raise UserError(f"{meta}: unreadable; use another --out folder or delete {out}") from None
        if not isinstance(stored, dict):
            raise UserError(f"{meta}: not a brwsim sweep state; use another --out folder or "
                            f"delete {out}")
        if stored.get("config_hash") != cfg.hash:
            old_written = stored.get("written")
            diff = _first_difference(stored.get("config"), cfg.normalized, "sweep",
                                     old_written if isinstance(old_written, list) else None,
                                     sorted(cfg.written))
            raise UserError(f"{out} holds a sweep of a different configuration ({diff}); "
                            f"use another --out folder, or delete {out} to start over")
        return
    if (out / "shards").exists() or (out / RESULTS).exists():
        raise UserError(f"{out} holds sweep output but no config.json; use another --out folder")
    write_text_atomic(meta, json.dumps({"format": _STATE_FORMAT, "config_hash": cfg.hash,
                                         "config": cfg.normalized, "written": sorted(cfg.written)},
                                        indent=1, sort_keys=True))
    state.created_config = True


def _first_difference(old: Any, new: Any, path: str, old_written: Any = None,
                      new_written: Any = None) -> str:
    """``"<path>: <old> -> <new>"`` at the first place two JSON values differ.

    At the top level the keys a configuration wrote itself come first, and a value the
    TOML did not set is marked ``(default)`` (``old_written`` / ``new_written``: the keys
    each side wrote; None when unknown, as in a state folder of an older version).
    """
    if isinstance(old, dict) and isinstance(new, dict):
        differ = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
        if not differ:
            return f"{path}: (no difference)"
        if new_written is not None or old_written is not None:
            wrote = set(new_written or ()) | set(old_written or ())
            differ.sort(key=lambda k: k not in wrote)       # stable: written keys first
            key = differ[0]
            a, b = old.get(key), new.get(key)
            if not (key in old and key in new and isinstance(a, (dict, list))
                    and isinstance(b, type(a))):
                return (f"{path}.{key}: {_marked(old, key, old_written)} -> "
                        f"{_marked(new, key, new_written)}")
        return _first_difference(old.get(differ[0]), new.get(differ[0]), f"{path}.{differ[0]}")
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            if a != b:
                return _first_difference(a, b, f"{path}[{i}]")
    return f"{path}: {_json_short(old)} -> {_json_short(new)}"


def _marked(values: dict, key: str, written: Any) -> str:
    """One side's value of a top-level key, ``(not set)`` when absent, ``(default)`` when
    the configuration did not write it."""
    if key not in values:
        return "(not set)"
    text = _json_short(values[key])
    return text + " (default)" if written is not None and key not in written else text


def _json_short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def write_text_atomic(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def remove_temporaries(out: Path) -> None:
    """Delete temporary files left by a killed run (the folder is locked: none is live)."""
    for folder in (out, out / "shards"):
        if folder.is_dir():
            for tmp in folder.glob(".*.tmp"):
                tmp.unlink(missing_ok=True)
