"""Build hook: a built (non-editable) package records the git commit it was built from.

Everything else is declared in ``pyproject.toml``. The commit goes into
``brwsim/BUILD_COMMIT`` of the build (never into the source tree), so that a file written
by an installed wheel names the code that wrote it (:mod:`brwsim.gitcommit`). An editable
install reads its checkout instead, and a build from a tree that is not a git checkout
records nothing.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _gitcommit():
    """:mod:`brwsim.gitcommit`, loaded by path: brwsim's own imports need its dependencies."""
    spec = importlib.util.spec_from_file_location("_brwsim_gitcommit", ROOT / "brwsim" / "gitcommit.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPy(build_py):
    """``build_py`` that also writes ``brwsim/BUILD_COMMIT`` into the build."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        gitcommit = _gitcommit()
        commit = gitcommit.checkout_commit(ROOT / "brwsim")
        if commit:
            target = Path(self.build_lib) / "brwsim" / gitcommit.BUILD_FILE
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(commit + "\n", encoding="ascii")


setup(cmdclass={"build_py": BuildPy})
