"""Import a second copy of brwsim, from another git revision, beside the current one.

The benchmark compares the kernels of this worktree ("after") with those of a reference
revision ("before", default ``main``) in one process, on the same machine state. The
reference's ``brwsim/`` is exported with ``git archive`` into
``~/.cache/brwsim-bench/<commit>/`` (once per commit; its numba cache lives beside it, so
the reference's compiled code is reused across runs and never touches anyone's cache).

Both copies are the package ``brwsim``: :func:`load` imports the reference under
``sys.modules`` entries of its own, then puts the current ones back; :func:`active` swaps
the reference's modules in around each call into it, so that an import inside a reference
function resolves to the reference, never to the current code.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def _ours() -> dict[str, ModuleType]:
    return {k: m for k, m in sys.modules.items() if k == "brwsim" or k.startswith("brwsim.")}


def export(rev: str) -> Path:
    """Directory holding revision ``rev``'s ``brwsim/`` package (exported once per commit)."""
    sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", rev], capture_output=True,
                         text=True, check=True).stdout.strip()
    root = Path.home() / ".cache" / "brwsim-bench" / sha
    if not (root / "brwsim" / "__init__.py").exists():
        tar = subprocess.run(["git", "-C", str(REPO), "archive", sha, "brwsim"],
                             capture_output=True, check=True).stdout
        root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
            tf.extractall(root, filter="data")
    return root


class Reference:
    """The reference revision's ``brwsim`` modules, imported beside the current ones."""

    def __init__(self, rev: str = "main") -> None:
        import brwsim  # noqa: F401  (the current copy is imported first, and kept)
        root = export(rev)
        self.rev, self.root = rev, root
        current = _ours()
        for k in current:
            del sys.modules[k]
        env = os.environ.get("NUMBA_CACHE_DIR")
        os.environ["NUMBA_CACHE_DIR"] = str(root / "numba-cache")
        sys.path.insert(0, str(root))
        try:
            self.brwsim = importlib.import_module("brwsim")
            self.engine = importlib.import_module("brwsim.engine")
            self.modules = _ours()
        finally:
            sys.path.remove(str(root))
            if env is None:
                del os.environ["NUMBA_CACHE_DIR"]
            else:
                os.environ["NUMBA_CACHE_DIR"] = env
            for k in self.modules:
                del sys.modules[k]
            sys.modules.update(current)
        assert str(root) in self.brwsim.__file__

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """The reference's modules in ``sys.modules`` for the duration of the block."""
        current = _ours()
        for k in current:
            del sys.modules[k]
        sys.modules.update(self.modules)
        try:
            yield
        finally:
            for k in _ours():
                del sys.modules[k]
            sys.modules.update(current)
