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
    assert all(c.split()[0] in ("brwsim", "python") for c in commands()), commands()


def test_every_console_command_runs(folder):
    for cmd in commands():
        done = subprocess.run(cmd, shell=True, cwd=folder, env=_env(), capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, f"$ {cmd}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"


@pytest.mark.parametrize("i", range(len(blocks("python"))))
def test_every_python_example_runs(folder, i):
    done = subprocess.run([sys.executable, "-c", blocks("python")[i]], cwd=folder, env=_env(),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
