"""Import a second copy of brwsim, from another git revision, beside the current one.

The benchmark compares the kernels of this worktree ("after") with those of a reference
revision ("before", default ``main``) in one process, on the same machine state. The
reference's ``brwsim/`` is exported with ``git archive`` into
``~/.cache/brwsim-bench/<commit>/`` (once per commit; its numba cache lives beside it, so
the reference's compiled code is reused across runs and never touches anyone's cache).

The copy is a package of its own name, ``brwsim_<commit[:12]>``: every ``brwsim`` in its
sources is renamed when it is exported. Two copies both named ``brwsim`` would share
symbols: numba names a compiled function by its module, name, argument types and a
counter of the compiling process, so two caches compiled in fresh processes hold kernels
with equal names, and the JIT linker resolves a name to whichever copy loaded it first.
The reference would then run some of the current code's kernels (or the reverse): a
check that made the current copy's tail ranks 9 times slower slowed the "before" side of
an in-process comparison by as much (found by a helper session on 2026-12-02). With its
own module names the reference's kernels are its own.
"""

from __future__ import annotations

import importlib
import io
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
_NAME = re.compile(r"(?<![\w.-])brwsim(?![\w-])")


def export(rev: str) -> tuple[Path, str]:
    """(directory, package name) of revision ``rev``'s ``brwsim/``, exported once per commit
    under the package name ``brwsim_<commit[:12]>``."""
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", rev], capture_output=True,
                         text=True, check=True).stdout.strip()
    name = f"brwsim_{sha[:12]}"
    root = Path.home() / ".cache" / "brwsim-bench" / sha
    if not (root / name / "__init__.py").exists():
        tar = subprocess.run(["git", "-C", str(REPO), "archive", sha, "brwsim"],
                             capture_output=True, check=True).stdout
        tmp = root / "export"
        with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
            tf.extractall(tmp, filter="data")
        for path in (tmp / "brwsim").rglob("*.py"):
            path.write_text(_NAME.sub(name, path.read_text()))
        (tmp / "brwsim").rename(root / name)
        tmp.rmdir()
    return root, name


class Reference:
    """The reference revision's ``brwsim``, imported as a package of its own name."""

    def __init__(self, rev: str = "main") -> None:
        root, name = export(rev)
        self.rev, self.root = rev, root
        env = os.environ.get("NUMBA_CACHE_DIR")
        os.environ["NUMBA_CACHE_DIR"] = str(root / "numba-cache")
        sys.path.insert(0, str(root))
        try:
            self.brwsim: ModuleType = importlib.import_module(name)
            self.engine: ModuleType = importlib.import_module(f"{name}.engine")
        finally:
            sys.path.remove(str(root))
            if env is None:
                del os.environ["NUMBA_CACHE_DIR"]
            else:
                os.environ["NUMBA_CACHE_DIR"] = env
        assert str(root) in self.brwsim.__file__
