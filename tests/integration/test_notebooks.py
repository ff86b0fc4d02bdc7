"""The atlas notebooks: each runs top to bottom, and each is stored executed, clean and small.

Every ``notebooks/*.ipynb`` is covered, so a new notebook is tested without changes here.
The execution test runs in quick mode (``BRWSIM_NOTEBOOK_QUICK=1``): the notebooks
regenerate small data with ``experiments/<name>.py --quick`` instead of reading ``data/``.
A notebook on a real model (``REAL_MODEL``) runs its quick data on that model: it is
marked slow, and skipped where the model is not fetched.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
MAX_BYTES = 1_000_000
#: Notebooks whose quick data come from a real model: minutes on a CPU, and only where the
#: model file is fetched (name -> catalogue model).
REAL_MODEL = {"real_gap": "smollm2-135m-instruct"}


def _quick_params():
    """Every notebook; those on a real model are marked slow."""
    return [pytest.param(p, id=p.stem, marks=[pytest.mark.slow] if p.stem in REAL_MODEL else [])
            for p in NOTEBOOKS]


def _atlas():
    """The notebooks' helper module ``notebooks/atlas.py``."""
    spec = importlib.util.spec_from_file_location("atlas", NOTEBOOK_DIR / "atlas.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_there_are_notebooks():
    assert NOTEBOOKS, f"no notebooks in {NOTEBOOK_DIR}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_stored_notebook_is_executed_without_errors_and_small(path):
    nbformat = pytest.importorskip("nbformat")
    assert path.stat().st_size < MAX_BYTES, f"{path.name}: {path.stat().st_size} bytes"
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    assert code, f"{path.name} has no code"
    unexecuted = [i for i, c in enumerate(code) if c.execution_count is None]
    assert not unexecuted, f"{path.name}: code cells {unexecuted} were not executed"
    assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), \
        f"{path.name}: not executed top to bottom in one session"
    silent = [i for i, c in enumerate(code) if not c.outputs]
    assert not silent, f"{path.name}: code cells {silent} are stored without outputs"
    errors = [o.get("ename") for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{path.name} is stored with errors: {errors}"
    texts = [o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
             for c in code for o in c.outputs]
    marker = _atlas().QUICK_MARKER
    assert not any(marker in t for t in texts), f"{path.name} is stored with quick-mode outputs"


@pytest.mark.parametrize("path", _quick_params())
def test_notebook_runs_top_to_bottom_in_quick_mode(path, monkeypatch):
    pytest.importorskip("nbclient")
    pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    if path.stem in REAL_MODEL:
        from brwsim.errors import UserError
        from brwsim.models.catalogue import local_path

        try:
            local_path(REAL_MODEL[path.stem])
        except UserError as exc:
            pytest.skip(str(exc))
    monkeypatch.setenv("BRWSIM_NOTEBOOK_QUICK", "1")     # the kernel inherits the environment
    nb = _atlas().execute(path)
    code = [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    assert all(c.execution_count is not None for c in code)
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
