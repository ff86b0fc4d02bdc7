"""Every command and Python example of the README runs, as written, in a fresh folder.

``console`` blocks: each ``$ `` line is run by the shell, in order, in one temporary folder
(which holds ``responses.jsonl``, a capture of an OpenAI-compatible server from
``tests/fixtures``, and a link to ``docs/``); each must exit with status 0. ``python``
blocks run in a fresh interpreter in the same folder. The two ``bash`` set-up blocks are
what ``.ci/run`` itself runs (install, then the tests), so they are not repeated here.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
_BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)


def blocks(kind: str) -> list[str]:
    return [body for lang, body in _BLOCK.findall(README.read_text()) if lang == kind]


def commands() -> list[str]:
    out = []
    for body in blocks("console"):
        lines = body.splitlines()
        i = 0
        while i < len(lines):
            if lines[i].startswith("$ "):
                cmd = lines[i][2:]
                while cmd.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    cmd = cmd[:-1] + " " + lines[i].strip()
                out.append(cmd)
            i += 1
    return out


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("readme")
    shutil.copy(ROOT / "tests" / "fixtures" / "logprobs" / "chat.jsonl", tmp / "responses.jsonl")
    os.symlink(ROOT / "docs", tmp / "docs")
    return tmp


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def test_the_readme_has_commands_and_examples():
    assert len(commands()) >= 8 and blocks("python")
    assert all(c.split()[0] in ("brwsim", "python", "pip") for c in commands()), commands()


def _offline_backend_fits() -> bool:
    """Whether the running environment's setuptools meets pyproject's build requirement
    (``--no-build-isolation`` builds with it; a fresh venv's may be older)."""
    import importlib.metadata
    import tomllib

    from packaging.requirements import Requirement

    try:
        have = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    needs = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    req = next(Requirement(r) for r in needs if Requirement(r).name == "setuptools")
    return req.specifier.contains(have, prereleases=True)


def _runnable(cmd: str) -> tuple[str, Path | None]:
    """(the command, its folder): ``pip install -e .`` is checked with ``--dry-run`` from
    the checkout (offline, no dependency resolved, nothing installed into the running
    environment); every other command runs as written in the test folder."""
    if cmd.split()[:2] == ["pip", "install"]:
        import importlib.util

        args = cmd.split()[2:]
        assert args == ["-e", "."], cmd                # the install the README documents
        if not _offline_backend_fits():                 # no offline build backend
            return f"{sys.executable} -m pip --version", ROOT
        return (f"{sys.executable} -m pip install --dry-run --no-deps --no-index "
                "--no-build-isolation -e ."), ROOT
    return cmd, None


def test_the_five_commands_from_install_to_a_fraction_of_optimal_plot():
    """The README's path from ``pip install`` to a saved plot of your own bank's fraction
    of the optimum: at most five commands, install first, a plot of a policy run last."""
    body = next(b for b in blocks("console") if b.startswith("$ pip install"))
    cmds = [ln[2:] for ln in body.splitlines() if ln.startswith("$ ")]
    assert len(cmds) <= 5 and cmds[0].startswith("pip install")
    run = next(c for c in cmds if c.startswith("brwsim run"))
    assert "empirical(path=bank.nc)" in run and "--policy" in run
    assert any(c.startswith("brwsim plot mine.nc --out ") for c in cmds)


def test_every_console_command_runs(folder):
    for cmd in commands():
        cmd, where = _runnable(cmd)
        done = subprocess.run(cmd, shell=True, cwd=where or folder, env=_env(), capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, f"$ {cmd}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    png = folder / "mine.png"              # the five commands' plot: fraction of the optimum
    assert png.exists() and png.stat().st_size > 10_000


@pytest.mark.parametrize("i", range(len(blocks("python"))))
def test_every_python_example_runs(folder, i):
    done = subprocess.run([sys.executable, "-c", blocks("python")[i]], cwd=folder, env=_env(),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
