"""Which commit a file's ``git_commit`` names (:mod:`brwsim.gitcommit`).

Work trees are built in temporary folders with the git command line; the layout of an
installed wheel is imitated by a ``brwsim/`` folder deep inside another repository.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import brwsim
from brwsim.gitcommit import BUILD_FILE, checkout_commit, code_commit

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], capture_output=True, text=True, check=True).stdout.strip()


def _repo(folder: Path, files: dict[str, str]) -> str:
    """A work tree at ``folder`` with ``files`` committed; its HEAD."""
    folder.mkdir(parents=True, exist_ok=True)
    _git(folder, "init", "-q")
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    _git(folder, "add", "-A")
    _git(folder, "commit", "-q", "-m", "init")
    return _git(folder, "rev-parse", "HEAD")


def test_checkout_reports_its_head_and_dirty_code(tmp_path):
    head = _repo(tmp_path / "clone", {"brwsim/__init__.py": "", "docs/notes.md": "a\n"})
    package = tmp_path / "clone" / "brwsim"
    assert checkout_commit(package) == head
    assert code_commit(package) == head
    (tmp_path / "clone" / "docs" / "notes.md").write_text("b\n")    # not code: still clean
    (tmp_path / "clone" / "brwsim" / "new.py").write_text("")      # untracked: still clean
    assert checkout_commit(package) == head
    (package / "__init__.py").write_text("x = 1\n")                  # tracked code modified
    assert checkout_commit(package) == head + "-dirty"


def test_a_package_inside_another_repository_is_not_a_checkout(tmp_path):
    # a wheel installed into a virtual environment inside a user's own repository
    _repo(tmp_path / "project", {"README.md": "mine\n"})
    package = tmp_path / "project" / ".venv" / "lib" / "python3.11" / "site-packages" / "brwsim"
    package.mkdir(parents=True)
    assert checkout_commit(package) == ""
    assert code_commit(package) == ""
    (package / BUILD_FILE).write_text("0123abcd-dirty\n")
    assert code_commit(package) == "0123abcd-dirty"


def test_a_checkout_takes_precedence_over_a_build_record(tmp_path):
    head = _repo(tmp_path / "clone", {"brwsim/__init__.py": ""})
    package = tmp_path / "clone" / "brwsim"
    (package / BUILD_FILE).write_text("stale\n")    # untracked: the checkout stays clean
    assert code_commit(package) == head


def test_outside_any_work_tree(tmp_path):
    package = tmp_path / "brwsim"
    package.mkdir()
    assert checkout_commit(package) == code_commit(package) == ""


def test_the_running_package():
    """This test session's brwsim: a checkout (its HEAD) or an installed build (its record)."""
    package = Path(brwsim.__file__).resolve().parent
    commit = code_commit()
    top = subprocess.run(["git", "-C", str(package), "rev-parse", "--show-toplevel"],
                         capture_output=True, text=True, check=False).stdout.strip()
    if top and Path(top).resolve() / "brwsim" == package:
        head = _git(package, "rev-parse", "HEAD")
        assert commit in (head, head + "-dirty")
    else:
        record = package / BUILD_FILE
        assert commit == (record.read_text().strip() if record.exists() else "")


def test_inspect_shortens_commits_but_keeps_the_dirty_mark():
    from brwsim.cli.inspect import _short_commit

    full = "a95ae072cfffaa44dd67e279d4423ac274d8b884"
    assert _short_commit(full) == "a95ae072cfff"
    assert _short_commit(full + "-dirty") == "a95ae072cfff-dirty"
    assert _short_commit("brwsim 0.1.0") == "brwsim 0.1.0"
    assert _short_commit("unknown") == "unknown"
