"""The package's layering, from the CLI down to the kernels (import-linter, pyproject.toml).

No module imports a module of a higher layer, so there is no import cycle; and brwsim
imports brwsim at module level only (the lazily loaded command line and the torch backend
aside, :data:`LATE_IMPORTS_ALLOWED`), so the layering that import-linter checks is the
whole truth.
"""

from __future__ import annotations

import ast
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_layers_contract_is_kept():
    exe = shutil.which("lint-imports") or str(pathlib.Path(sys.executable).parent / "lint-imports")
    if not pathlib.Path(exe).exists():
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    res = subprocess.run([exe, str(ROOT / "pyproject.toml")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "4 kept, 0 broken" in res.stdout


#: Where brwsim imports brwsim inside functions, on purpose: the command line loads a
#: command's modules only when that command runs (``brwsim --help`` imports no numpy), and
#: the torch backend only when asked for (it imports torch).
LATE_IMPORTS_ALLOWED = ("brwsim/cli/", "brwsim/families/transformer.py:brwsim.backends.torchforward")


def test_brwsim_imports_brwsim_at_module_level_only():
    late = []
    for path in (ROOT / "brwsim").rglob("*.py"):
        rel = str(path.relative_to(ROOT))
        if rel.startswith(LATE_IMPORTS_ALLOWED[0]):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.ImportFrom) and (inner.module or "").startswith("brwsim") \
                            and f"{rel}:{inner.module}" not in LATE_IMPORTS_ALLOWED:
                        late.append(f"{path.relative_to(ROOT)}:{inner.lineno}")
    assert not late, late


def test_design_doc_table_is_the_contract():
    """docs/design.md section 3 lists the contract's layers, in order, module for module."""
    import re
    import tomllib

    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = contract["contracts"][0]["layers"]
    rows = [ln for ln in (ROOT / "docs" / "design.md").read_text().splitlines()
            if re.match(r"\| \d+ \| ", ln)]
    assert len(rows) == len(layers), (len(rows), len(layers))
    for i, (row, layer) in enumerate(zip(rows, layers), 1):
        cell = row.split("|")[2]
        named, prefix = [], ""
        for name in re.findall(r"`([\w.]+)`", cell):
            if name.startswith("."):             # `.zipf_laws` continues the previous package
                name = prefix + name
            prefix = name.rsplit(".", 1)[0]
            named.append(name)
        assert row.startswith(f"| {i} |"), row
        assert sorted(named) == sorted(m.strip() for m in layer.split("|")), (i, named, layer)


#: Kernels whose parameters are fixed from outside: a C function's signature holds scalars
#: and pointers only (:mod:`brwsim.kernels.netinit`).
WIDE_SIGNATURES_ALLOWED = {"brwsim/kernels/netinit.py:set_up"}
#: The most parameters a kernel takes; wider data travels as named tuples
#: (:class:`brwsim.kernels.spec.Law`, :class:`~brwsim.kernels.spec.Roots`,
#: :class:`~brwsim.kernels.spec.Out`, :class:`brwsim.kernels.tree.Workspace`, ...).
MAX_KERNEL_PARAMETERS = 12


def test_no_kernel_takes_more_than_twelve_parameters():
    wide = []
    for path in sorted((ROOT / "brwsim" / "kernels").glob("*.py")):
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
                allowed = f"{rel}:{node.name}" in WIDE_SIGNATURES_ALLOWED
                if count > MAX_KERNEL_PARAMETERS and not allowed:
                    wide.append(f"{rel}:{node.lineno} {node.name} ({count})")
    assert not wide, wide
