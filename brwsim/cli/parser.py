"""The command table and the one-line-error parser: what ``brwsim``, ``brwsim --help``,
``--version`` and a mistyped command need, importing nothing heavy (no numpy, no numba).

:data:`COMMANDS` names every subcommand, the module that registers it and its one-line
summary; :func:`brwsim.cli.main.main` imports a command's module only when that command
runs (or prints its own ``--help``).
"""

from __future__ import annotations

import argparse

from brwsim.errors import UserError

__all__ = ["Parser", "COMMANDS", "usage_text", "unknown_command", "DEFAULT_FAMILY_MARK"]


class _DefaultFamily:
    """The default of ``--family`` while parsing: :func:`brwsim.cli.main.main` replaces it
    with ``brwsim.families.DEFAULT_FAMILY`` after parsing (parsing imports no family)."""

    def __repr__(self) -> str:
        return "DEFAULT_FAMILY"


#: The ``--family`` default that stands for the default family (see :class:`_DefaultFamily`).
DEFAULT_FAMILY_MARK = _DefaultFamily()

#: (command, module under brwsim.cli that registers it, one-line summary), in the order
#: ``brwsim --help`` lists them.
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("run", "run", "simulate optimal draft trees (and drafting policies) on one family"),
    ("theory", "theory", "the paper's bound, proven bounds and predictions; no simulation"),
    ("ceiling", "theory", "the optimal ceiling at an entropy; the entropy a measured tau implies"),
    ("import-logprobs", "bank", "turn your server's logprobs (JSON Lines, .npz) into a bank"),
    ("capture", "bank", "sample a transformer checkpoint into a bank (no torch)"),
    ("bank-stats", "bank", "a bank's moments, entropy histogram and predicted E[X]"),
    ("plan", "plan", "the draft budget that maximises tokens/s on a GPU, per batch size"),
    ("export-acceptance", "plan", "a predicted acceptance schedule as engine settings (JSON)"),
    ("sweep", "sweep", "a resumable parameter sweep from a TOML file"),
    ("models", "models", "list the real models brwsim can fetch; fetch one into the cache"),
    ("inspect", "inspect", "describe any file brwsim wrote"),
    ("plot", "inspect", "plot a run, sweep or plan file"),
)


def _short_prog(prog: str) -> str:
    """``brwsim run`` -> ``run`` (the error line already starts with ``brwsim:``)."""
    head, _, rest = prog.partition(" ")
    return rest if head == "brwsim" and rest else ""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit status 2), as for every other bad input.

    The message names the subcommand (``run: unrecognized arguments: -x``), never the
    program a second time: :func:`brwsim.cli.main.main` prints ``brwsim: error: `` before it.
    """

    #: A callable returning the epilog, called only when the help is printed (building it
    #: may import what parsing must not, e.g. the family list).
    epilog_source = None

    def format_help(self) -> str:
        if self.epilog is None and self.epilog_source is not None:
            self.epilog = self.epilog_source()
        return super().format_help()

    def error(self, message: str) -> None:  # noqa: D401 - argparse API
        where = _short_prog(self.prog)
        raise UserError(f"{where}: {message}" if where else message)


def usage_text() -> str:
    """What bare ``brwsim`` and ``brwsim --help`` print: the commands, one line each."""
    width = max(len(name) for name, _, _ in COMMANDS)
    lines = ["usage: brwsim COMMAND [options]     (brwsim COMMAND --help: its options)", "",
             "Monte Carlo speed-of-light of speculative decoding.", "", "commands:"]
    lines += [f"  {name:<{width}}  {summary}" for name, _, summary in COMMANDS]
    lines += ["", "options:", "  -h, --help     this message", "  -V, --version  the version",
              "", "example: brwsim run --budgets 1,4,16,64   (the default family; see README.md)"]
    return "\n".join(lines)


def unknown_command(word: str) -> UserError:
    """The error for ``brwsim WORD`` where WORD is no command (an option before a command too)."""
    import difflib

    names = [name for name, _, _ in COMMANDS]
    if word.startswith("-"):
        return UserError(f"unknown option {word!r} before a command (usage: brwsim COMMAND "
                         "[options]; brwsim --help lists the commands)")
    close = difflib.get_close_matches(word, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return UserError(f"unknown command {word!r}{hint} (commands: {', '.join(names)})")
