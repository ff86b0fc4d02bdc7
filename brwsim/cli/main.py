"""Command line: ``brwsim run | theory | ceiling | plan | export-acceptance`` (and the sweep and bank commands).

Bare ``brwsim`` and ``brwsim --help`` print the commands, one line each; ``-V`` the
version; neither imports numpy (:mod:`brwsim.cli.parser`). A command imports only its own
module. Every user error (bad family string, budget, file) prints one line
``brwsim: error: ...`` and exits with status 2; no output file is written then. So do the
faults a user can cause: a full disk, an unwritable output (checked before the work
starts), memory exhausted, input nested too deeply. A closed stdout (``brwsim inspect F |
head``) ends quietly with status 141 (128 + SIGPIPE), Ctrl-C with 130; a stdout that cannot
be written (``> /dev/full``) ends in ``brwsim: error: writing stdout: No space left on
device`` and status 2 (the final flush is made here, not at interpreter exit).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import sys
from collections.abc import Sequence
from typing import Any

from brwsim.cli.parser import (COMMANDS, DEFAULT_FAMILY_MARK, Parser, unknown_command,
                               usage_text)
from brwsim.errors import UserError
from brwsim.version import __version__
from brwsim.interrupt import (
    EXIT_INTERRUPTED,
    MESSAGE,
    check_interrupted,
    command_handlers,
    is_interrupt,
)

__all__ = ["main", "build_parser", "EXIT_BROKEN_PIPE"]


def build_parser(commands: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``brwsim`` argument parser with every subcommand (each module's ``register``).

    Parameters
    ----------
    commands : sequence of str, optional
        Register only the modules of these commands (:data:`~brwsim.cli.parser.COMMANDS`),
        so that one command imports only what it needs; default every command.
    """
    import importlib

    parser = Parser(prog="brwsim", description="Monte Carlo speed-of-light of speculative decoding.")
    parser.add_argument("-V", "--version", action="version", version=f"brwsim {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    wanted = None if commands is None else set(commands)
    modules = []
    for name, module, _ in COMMANDS:
        if (wanted is None or name in wanted) and module not in modules:
            modules.append(module)
    for module in modules:
        importlib.import_module(f"brwsim.cli.{module}").register(sub)
    return parser


#: Exit status after the reader of stdout went away (``brwsim inspect F | head``): 128 + SIGPIPE.
EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``brwsim`` console script; returns the exit status.

    Every failure a user can cause ends in one line on stderr and status 2: a
    :class:`~brwsim.errors.UserError`, a full disk or another operating-system error on a
    file, memory exhausted, or input nested too deeply (RecursionError). A closed stdout
    (a pipe into ``head``) ends quietly with status 141; Ctrl-C with 130; a stdout that
    cannot be written (``> /dev/full``) ends in "writing stdout: ..." and status 2.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    guard = _StdoutGuard(sys.stdout)
    sys.stdout = guard
    try:
        with command_handlers() as handlers:
            try:
                code = _main(argv, guard)
                if code != EXIT_INTERRUPTED:
                    check_interrupted()        # a Ctrl-C that a library swallowed
            except KeyboardInterrupt:          # between _main's handlers and here
                code = _interrupted()
            handlers.exit_now(code)            # the command: no slow interpreter teardown
            return code
    finally:
        if sys.stdout is guard:
            sys.stdout = guard.stream


def _main(argv: list[str], guard: "_StdoutGuard") -> int:
    try:
        first = argv[0] if argv else None
        if first is None or first in ("-h", "--help"):
            print(usage_text())           # bare brwsim runs nothing and writes nothing
            sys.stdout.flush()
            return 0
        if first in ("-V", "--version"):
            print(f"brwsim {__version__}")
            sys.stdout.flush()
            return 0
        if first not in {name for name, _, _ in COMMANDS}:
            raise unknown_command(first)
        args, extra = build_parser([first]).parse_known_args(argv)
        if extra:
            raise UserError(f"{first}: unrecognized arguments: {' '.join(extra)}")
        args.argv = argv
        if getattr(args, "family", None) is DEFAULT_FAMILY_MARK:     # --family not given
            from brwsim.families import DEFAULT_FAMILY

            args.family = DEFAULT_FAMILY
        _check_out(args)
        from brwsim.cli.common import quiet_compiles

        with quiet_compiles(bool(getattr(args, "quiet", False))):
            code = int(args.func(args) or 0)
        sys.stdout.flush()                # a closed pipe or a full disk shows here, not at exit
        return code
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        return _interrupted()
    except (UserError, MemoryError, RecursionError, OSError) as exc:
        if is_interrupt(exc):
            return _interrupted()
        if guard.failed is not None and exc is guard.failed:
            _silence_stdout()              # or the interpreter's last flush fails again: 120
            _error_line(exc, stdout=True)
        else:
            _error_line(exc)
        return 2
    except Exception as exc:
        if is_interrupt(exc):          # numba's SystemError of an interrupted cache load
            return _interrupted()
        raise


def _interrupted() -> int:
    """Ctrl-C: the one line and status 130 (temporary files were removed as the call unwound)."""
    with contextlib.suppress(OSError, ValueError):
        print(MESSAGE, file=sys.stderr)
    return EXIT_INTERRUPTED


def _check_out(args: argparse.Namespace) -> None:
    """Refuse an empty ``--out`` (and ``bank-stats --plot``) and, for a file output, a symbolic link or anything but a
    regular file there, in every command, before any work (a sweep's --out is a folder,
    checked by the sweep)."""
    for option in ("out", "plot") if args.command == "bank-stats" else ("out",):
        out = getattr(args, option, None)
        if out is None:
            continue
        if out == "":
            raise UserError(f"--{option}: empty path (give a file name"
                            + ("; --no-out writes none)" if args.command == "run" else ")"))
        if args.command != "sweep":
            from brwsim.validate import check_regular_or_absent

            check_regular_or_absent(out, f"--{option}")


class _StdoutGuard:
    """sys.stdout during :func:`main`: remembers a failed write or flush (``> /dev/full``),
    so that error is reported as stdout's, not as a file's."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.failed: OSError | None = None

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            self.failed = exc
            raise

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            self.failed = exc
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def _error_line(exc: BaseException, stdout: bool = False) -> None:
    """Print the one-line message of a failure a user can cause (``stdout``: writing it)."""
    if stdout:
        msg = f"writing stdout: {getattr(exc, 'strerror', None) or exc}"
    elif isinstance(exc, UserError):
        msg = str(exc)
    elif isinstance(exc, MemoryError):
        msg = "out of memory: use fewer iterations, budgets or grid points"
    elif isinstance(exc, RecursionError):
        msg = "input nested too deeply (recursion limit reached)"
    elif getattr(exc, "errno", None) == errno.ENOSPC:
        where = f" writing {exc.filename}" if getattr(exc, "filename", None) else ""
        msg = f"disk full{where}: free some space or write elsewhere"
    else:
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        msg = f"{where}{exc.strerror or exc}" if isinstance(exc, OSError) else str(exc)
    msg = " ".join(msg.split()) if "\n" in msg else msg
    try:
        print(f"brwsim: error: {msg}", file=sys.stderr)
    except (OSError, ValueError):  # pragma: no cover - stderr closed too
        pass


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again
    (the recipe of the Python documentation, "Note on SIGPIPE")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # pragma: no cover - stdout is not a file
        pass
