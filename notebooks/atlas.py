"""Shared helpers of the atlas notebooks: data access, figure style and claim checks.

Every notebook in this folder runs with ``notebooks/`` as its working directory and does
``import atlas``. In full mode a notebook reads the stored ``data/<name>.nc``; with the
environment variable ``BRWSIM_NOTEBOOK_QUICK`` set (to anything but ``""`` or ``"0"``) it
regenerates a small version of the data with ``experiments/<name>.py --quick`` instead, so
that the test suite can execute every notebook top to bottom in seconds. The numbers a
notebook states in its first cell are those of the stored full data; its last cell checks
them (:func:`check_claims`) in full mode only.

Run as a script, ``python atlas.py [NOTEBOOK ...]`` executes the given notebooks (default:
every ``*.ipynb`` here) in full mode and stores them with their outputs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import xarray as xr
from numpy.typing import ArrayLike

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from nbformat import NotebookNode

__all__ = ["DPI", "PRODUCERS", "QUICK", "QUICK_MARKER", "REPO", "budget_at_most", "budget_axis", "check_claims",
           "check_provenance", "dataset", "execute", "figure", "main", "provenance",
           "regenerate_command", "span", "store"]

#: Root of the brwsim checkout (the parent of ``notebooks/``).
REPO: Path = Path(__file__).resolve().parents[1]

#: Quick mode: regenerate small data with ``--quick`` instead of reading ``data/*.nc``.
QUICK: bool = os.environ.get("BRWSIM_NOTEBOOK_QUICK", "") not in ("", "0")

#: What :func:`provenance` prints in quick mode (a stored notebook must not contain it).
QUICK_MARKER: str = "QUICK smoke data"

#: Resolution of inline figures; modest, so that stored notebooks stay small.
DPI: int = 85

#: How many characters of a failed script's stderr :func:`dataset` reports.
_STDERR_TAIL = 3000

#: Datasets written by another experiment's script: name -> (script name, its flags).
PRODUCERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "charlstm_iid": ("iid_breakdown", ("--charlstm",)),
}


def _producer(name: str) -> tuple[str, list[str]]:
    script, flags = PRODUCERS.get(name, (name, ()))
    return script, list(flags)


def regenerate_command(name: str, quick: bool = False) -> str:
    """The shell command (run from the repository root) that writes ``data/<name>.nc``.

    Parameters
    ----------
    name : str
        Dataset name: ``data/<name>.nc`` is written by ``experiments/<name>.py``, or by the
        script and flags :data:`PRODUCERS` gives.
    quick : bool, default False
        The small smoke configuration (``--quick``) instead of the full one. The scripts'
        defaults are the full configurations, so the full command takes no flags.

    Returns
    -------
    str
    """
    script, flags = _producer(name)
    return " ".join([f"python experiments/{script}.py", *flags] + (["--quick"] if quick else []))


def dataset(name: str) -> xr.Dataset:
    """The dataset an atlas notebook analyses, loaded into memory.

    Parameters
    ----------
    name : str
        Dataset name, e.g. ``"tightness"`` (see :func:`regenerate_command`).

    Returns
    -------
    xarray.Dataset
        Full mode: the stored ``data/<name>.nc``. Quick mode (:data:`QUICK`): the output of
        its script (:func:`regenerate_command`) with ``--quick``, run now with this interpreter into a temporary
        folder that is removed afterwards.

    Raises
    ------
    RuntimeError
        When the quick run fails; the message ends with the script's stderr.
    brwsim.errors.UserError
        When the stored file is missing or unreadable (full mode).
    """
    from brwsim.io import open_dataset

    if not QUICK:
        return open_dataset(REPO / "data" / f"{name}.nc")
    script, flags = _producer(name)
    with tempfile.TemporaryDirectory(prefix=f"atlas-{name}-") as tmp:
        out = Path(tmp) / f"{name}.nc"
        cmd = [sys.executable, str(REPO / "experiments" / f"{script}.py"), *flags, "--quick",
               "--out", str(out)]
        try:
            subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=True)
        except subprocess.CalledProcessError as exc:
            tail = (exc.stderr or "")[-_STDERR_TAIL:]
            raise RuntimeError(f"{' '.join(cmd)} failed with exit status {exc.returncode}:\n"
                               f"{tail}") from None
        return open_dataset(out)


def provenance(ds: xr.Dataset) -> str:
    """One line saying what produced ``ds``: mode, title, command, date and git commit.

    Parameters
    ----------
    ds : xarray.Dataset
        A dataset written by an experiment script (it carries brwsim's provenance
        attributes).

    Returns
    -------
    str
    """
    mode = f"{QUICK_MARKER} (not the stored results)" if QUICK else "stored full data"
    history = ds.attrs.get("history", "").split(" ", 1)
    command = history[1] if len(history) == 2 else "?"
    commit = ds.attrs.get("git_commit", "")[:10] or "unknown"
    return (f"{mode}: {ds.attrs.get('title', '?')!r}, written {ds.attrs.get('date_created', '?')} "
            f"by `{command}` at commit {commit}")


def figure(nrows: int = 1, ncols: int = 1, *, panel: tuple[float, float] = (4.6, 3.3),
           sharex: bool = False, sharey: bool = False) -> tuple[Figure, np.ndarray]:
    """A figure of ``nrows`` x ``ncols`` panels in the atlas style.

    Parameters
    ----------
    nrows, ncols : int
        Grid of panels.
    panel : (float, float)
        Width and height of one panel in inches.
    sharex, sharey : bool
        Passed to :func:`matplotlib.pyplot.subplots`.

    Returns
    -------
    fig : matplotlib.figure.Figure
    axes : numpy.ndarray of matplotlib.axes.Axes
        Always two-dimensional (``squeeze=False``); iterate with ``axes.flat``.
    """
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, ncols, figsize=(panel[0] * ncols, panel[1] * nrows),
                             dpi=DPI, squeeze=False, sharex=sharex, sharey=sharey,
                             layout="constrained")
    for ax in axes.flat:
        ax.grid(True, lw=0.3, alpha=0.5)
        ax.tick_params(labelsize=8)
    return fig, axes


def budget_axis(ax: Axes, budgets: Iterable[int]) -> None:
    """Put the draft budget P on a base-2 logarithmic x axis with readable ticks.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    budgets : iterable of int
        The budgets plotted (powers of two or not); about six evenly spaced powers of two
        between the smallest and the largest become ticks, written out below 10,000.
    """
    b = np.asarray(list(budgets))
    ax.set_xscale("log", base=2)
    exps = np.log2(b[b > 0]).round().astype(int)
    step = max(1, int(np.ceil((exps.max() - exps.min() + 1) / 6)))
    ticks = [2 ** e for e in range(exps.min(), exps.max() + 1, step)]
    ax.set_xticks(ticks, [f"{t:,}" if t < 10_000 else f"$2^{{{int(np.log2(t))}}}$" for t in ticks])
    ax.set_xlabel("draft budget P (tree nodes)", fontsize=8)


def budget_at_most(ds: xr.Dataset, p: int) -> int:
    """The largest stored budget that is at most ``p`` (quick data stop at smaller P).

    Parameters
    ----------
    ds : xarray.Dataset
        A dataset with a ``budget`` coordinate.
    p : int
        The budget wanted.

    Returns
    -------
    int

    Raises
    ------
    ValueError
        When every stored budget exceeds ``p``.
    """
    b = ds.budget.values
    if not (b <= p).any():
        raise ValueError(f"no budget <= {p} in {b.tolist()}")
    return int(b[b <= p].max())


def span(values: ArrayLike, fmt: str = ".2f") -> str:
    """``"lo–hi"`` (or a single number when they agree) of the finite values, formatted.

    Parameters
    ----------
    values : array-like
        Numbers (an ``xarray.DataArray`` is fine); NaN are ignored.
    fmt : str, default ".2f"
        Format specification of each end.

    Returns
    -------
    str
    """
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v)]
    if v.size == 0:                 # no value (e.g. a theory value NaN for a context family)
        return "n/a"
    lo, hi = format(v.min(), fmt), format(v.max(), fmt)
    return lo if lo == hi else f"{lo}–{hi}"


def check_claims(computed: Mapping[str, str], stated: Mapping[str, str]) -> None:
    """Assert that every number stated in a notebook's text is the one computed from the data.

    Parameters
    ----------
    computed : mapping of str to str
        Claim name -> value as computed (and printed) by the notebook.
    stated : mapping of str to str
        Claim name -> value as quoted in the notebook's first cell.

    Raises
    ------
    AssertionError
        Listing every claim whose stated value differs from the computed one, or that is
        stated but not computed.
    """
    bad = [f"  {k}: stated {v!r}, data give {computed.get(k, '<not computed>')!r}"
           for k, v in stated.items() if computed.get(k) != v]
    assert not bad, "stated claims disagree with the data:\n" + "\n".join(bad)
    print(f"all {len(stated)} stated numbers agree with the data")


def check_provenance(ds: xr.Dataset, name: str) -> None:
    """Assert that ``ds`` was written by the command a notebook states (:func:`regenerate_command`).

    Parameters
    ----------
    ds : xarray.Dataset
        The dataset read by :func:`dataset` (full mode).
    name : str
        Experiment name.

    Raises
    ------
    AssertionError
        When the dataset's ``history`` attribute names another command.
    """
    command = regenerate_command(name)
    history = ds.attrs.get("history", "")
    assert history.endswith(command), f"data/{name}.nc was written by {history!r}, not {command!r}"
    print(f"data/{name}.nc was written by `{command}`")


def execute(path: str | os.PathLike[str], timeout: int = 600) -> NotebookNode:
    """Execute a notebook top to bottom in a fresh kernel, with its folder as working directory.

    The kernel inherits this process's environment, so ``BRWSIM_NOTEBOOK_QUICK`` set here
    selects quick mode. Cell execution timestamps are not recorded, so that re-executing
    an unchanged notebook changes little but its outputs.

    Parameters
    ----------
    path : path-like
        The ``.ipynb`` file.
    timeout : int, default 600
        Seconds allowed per cell.

    Returns
    -------
    nbformat.NotebookNode
        The executed notebook (the file is not modified).

    Raises
    ------
    nbclient.exceptions.CellExecutionError
        When a cell raises; the message shows the cell and the traceback.
    """
    import nbclient
    import nbformat

    path = Path(path).resolve()
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    return nb


def store(path: str | os.PathLike[str], timeout: int = 600) -> int:
    """Execute a notebook (:func:`execute`) and overwrite it with its outputs.

    Parameters
    ----------
    path : path-like
        The ``.ipynb`` file.
    timeout : int, default 600
        Seconds allowed per cell.

    Returns
    -------
    int
        Size of the stored file in bytes.
    """
    import nbformat

    nb = execute(path, timeout)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nbformat.write(nb, path)
    return Path(path).stat().st_size


def main(argv: list[str] | None = None) -> None:
    """Command line: execute and store notebooks in full mode (``python atlas.py [NOTEBOOK ...]``).

    Parameters
    ----------
    argv : list of str, optional
        Notebook paths; default every ``*.ipynb`` beside this module.
    """
    if QUICK:
        raise SystemExit("unset BRWSIM_NOTEBOOK_QUICK: stored notebooks must show the full data")
    args = sys.argv[1:] if argv is None else argv
    paths = [Path(a) for a in args] or sorted(Path(__file__).resolve().parent.glob("*.ipynb"))
    for p in paths:
        print(f"{p}: executing ...", flush=True)
        print(f"{p}: stored, {store(p) / 1e3:.0f} kB", flush=True)


if __name__ == "__main__":
    main()
