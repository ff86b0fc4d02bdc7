"""Which commit of brwsim is running: the provenance behind every file's ``git_commit``.

Two sources, in this order:

* **A checkout**: the package is the ``brwsim/`` folder at the top of a git work tree (a
  clone, an editable install). Its ``HEAD``, with ``-dirty`` appended when tracked code is
  modified.
* **An installed wheel**: the commit the wheel was built from, which ``setup.py`` writes
  into the built package as :data:`BUILD_FILE` (``-dirty`` included). A wheel built
  from a source tree that is not a git checkout (an sdist) records none.

A package that merely sits inside some git work tree, such as a wheel installed into a
virtual environment inside a user's own repository, is not a checkout: that repository's
commit is not brwsim's, and it is never reported.

The module imports only the standard library: ``setup.py`` loads it by path at build time,
before brwsim's dependencies are installed.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

__all__ = ["BUILD_FILE", "CODE_PATHS", "checkout_commit", "code_commit", "running_commit"]

#: The file of a built package holding the commit it was built from.
BUILD_FILE = "BUILD_COMMIT"
#: What the ``-dirty`` mark looks at: the code, not data or notebooks.
CODE_PATHS = ("brwsim", "experiments", "pyproject.toml", "setup.py")
_TIMEOUT = 5


def _git(folder: Path, *args: str) -> str | None:
    """stdout of ``git -C folder args`` (stripped), or None when git fails or is absent."""
    try:
        out = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True,
                             timeout=_TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def checkout_commit(package: Path) -> str:
    """``HEAD`` of the git work tree whose top level holds ``package`` as ``brwsim/``.

    Parameters
    ----------
    package : Path
        The brwsim package folder.

    Returns
    -------
    str
        The commit's hash, with ``-dirty`` appended when a tracked file under
        :data:`CODE_PATHS` is modified; "" when ``package`` is not the ``brwsim/`` folder
        at the top of a work tree (or git is unavailable).
    """
    package = package.resolve()
    top = _git(package, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() / "brwsim" != package:
        return ""
    head = _git(package, "rev-parse", "HEAD")
    if not head:
        return ""
    status = _git(package.parent, "status", "--porcelain", "--untracked-files=no", "--",
                  *CODE_PATHS)
    return head + ("-dirty" if status else "")


def code_commit(package: Path | None = None) -> str:
    """The commit of the running brwsim code: its checkout's, else its wheel's build record.

    Parameters
    ----------
    package : Path, optional
        The brwsim package folder (default: this module's).

    Returns
    -------
    str
        :func:`checkout_commit` when it finds one, else the content of
        :data:`BUILD_FILE` in the package, else "".
    """
    package = Path(__file__).resolve().parent if package is None else package
    commit = checkout_commit(package)
    if commit:
        return commit
    try:
        return (package / BUILD_FILE).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""


@functools.cache
def running_commit() -> str:
    """:func:`code_commit` of the brwsim package that runs, asked once per process.

    The code a process runs is the code it imported, so the answer is kept: a checkout
    edited later in the process's life does not change it (and git is not called again
    for every file written or every sweep task).

    Returns
    -------
    str
    """
    return code_commit()
