"""``brwsim inspect`` and ``brwsim plot``: read a ``results.nc`` of a sweep or a ``brwsim run`` file.

A sweep file holds one netCDF group per ``[[sweep.family]]`` block with per-point
summaries (``accepted_mean``, ``expected_mean``, ...); a run file holds one point's raw
arrays in its root group. :func:`open_results` gives both as a mapping from group name to
dataset and :func:`point_summaries` the same per-point, per-budget table for both.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from brwsim.cli.common import bound_check
from brwsim.errors import UserError
from brwsim.io import atomic_path
from brwsim.lazy import xarray as xr
from brwsim.simulate import summarize
from brwsim.textform import format_table
from brwsim.validate import check_output_path

_FIGURE_FORMATS = ("png", "pdf", "svg", "eps", "ps", "jpg", "jpeg", "tif", "tiff", "webp")

__all__ = ["open_results", "point_summaries", "describe", "plot", "register"]

_SUMMARY_VARS = ("accepted_mean", "accepted_se", "expected_mean", "expected_se",
                 "tokens_per_call", "depth_mean")
_RUN_VARS = ("accepted", "expected_accepted", "depth")


@contextlib.contextmanager
def open_results(path: str | os.PathLike[str]) -> Iterator[tuple[dict[str, Any], dict[str, xr.Dataset]]]:
    """Open a brwsim netCDF file lazily.

    Yields
    ------
    attrs : dict
        Global (root group) attributes.
    groups : dict of str to xarray.Dataset
        Every group holding a ``budget`` dimension: ``{"/": ds}`` for a ``brwsim run`` file,
        ``{"/<label>": ds, ...}`` for a sweep.

    Raises
    ------
    brwsim.errors.UserError
        When the file is missing, unreadable or holds no brwsim data.
    """
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{p}: no such file")
    try:
        groups = xr.open_groups(p, engine="netcdf4")
    except (OSError, ValueError) as exc:
        raise UserError(f"{p}: not a readable netCDF file ({exc})") from None
    try:
        data = {name: ds for name, ds in groups.items() if "budget" in ds.dims}
        if not data:
            raise UserError(f"{p}: no brwsim data (no group with a 'budget' dimension)")
        for name, ds in data.items():
            if not _is_brwsim(ds):
                where = "" if name == "/" else f" (group {name})"
                raise UserError(f"{p}: not a brwsim run or sweep file{where}: it has a 'budget' "
                                f"dimension but neither {', '.join(_SUMMARY_VARS[:1])} nor "
                                f"{', '.join(_RUN_VARS)}")
        yield dict(groups["/"].attrs), data
    finally:
        for ds in groups.values():
            ds.close()


def _is_brwsim(ds: xr.Dataset) -> bool:
    """Whether ``ds`` has the variables of a sweep group or of a ``brwsim run`` file."""
    if all(v in ds for v in _SUMMARY_VARS):
        return True
    return all(v in ds for v in _RUN_VARS) and "iteration" in ds.dims


def point_summaries(ds: xr.Dataset) -> xr.Dataset:
    """Per-point, per-budget means and standard errors of a sweep group or a run dataset.

    Returns
    -------
    xarray.Dataset
        ``accepted_mean``, ``accepted_se``, ``expected_mean``, ``expected_se``,
        ``tokens_per_call``, ``depth_mean`` and, when present, ``paper_bound``,
        ``prediction``, ``mu``, ``mu2``; dims: the swept parameters, then ``budget``.
    """
    if "expected_mean" in ds:
        out = ds[list(_SUMMARY_VARS)]
    else:

        out = summarize(ds.load())
    extra = [v for v in ("paper_bound", "prediction", "upper_bound", "upper_bound_se", "mu", "mu2",
                         "family_string") if v in ds]
    return out.merge(ds[extra]).load()


def _grid_dims(summary: xr.Dataset) -> list[str]:
    return [d for d in summary["expected_mean"].dims if d != "budget"]


def _points(summary: xr.Dataset, attrs: dict[str, Any]) -> Iterator[tuple[str, xr.Dataset]]:
    """(label, one point's summary) for every point, row-major over the grid."""
    dims = _grid_dims(summary)
    shape = [summary.sizes[d] for d in dims]
    for idx in np.ndindex(*shape):
        pt = summary.isel(dict(zip(dims, idx)))
        if "family_string" in pt:
            label = str(pt["family_string"].values)
        else:
            label = str(attrs.get("family", "?"))
        for extra in ("policy", "batch"):        # grid dimensions that are not family parameters
            if extra in pt.coords and pt[extra].ndim == 0:
                label += f"   {extra}: {pt[extra].values}"
        yield label, pt


def _fmt(x: Any, digits: int = 4) -> str:
    v = float(x)
    return "nan" if np.isnan(v) else f"{v:.{digits}f}"


def _point_table(pt: xr.Dataset) -> str:

    header = ["P", "mean X", "SE", "tau=X+1", "E[X|T]", "SE", "depth"]
    cols = ["accepted_mean", "accepted_se", "tokens_per_call", "expected_mean", "expected_se",
            "depth_mean"]
    for name, title in (("paper_bound", "paper bound"), ("prediction", "prediction"),
                        ("upper_bound", "upper bound")):
        if name in pt:
            header.append(title)
            cols.append(name)
    rows = [[str(int(p))] + [_fmt(pt[c].values[i], 2 if c == "depth_mean" else 4) for c in cols]
            for i, p in enumerate(pt["budget"].values)]
    if "upper_bound" in pt:
        header.append("E[X|T] vs bound")
        se = pt["upper_bound_se"].values if "upper_bound_se" in pt else np.zeros(len(rows))
        for i, row in enumerate(rows):
            row.append(bound_check(float(pt["expected_mean"].values[i]),
                                   float(pt["expected_se"].values[i]),
                                   float(pt["upper_bound"].values[i]), float(se[i])))
    return format_table(rows, header)


def _provenance(path: Path, attrs: dict[str, Any]) -> list[str]:
    git = attrs.get("git_commit") or "unknown"
    source = (f"  source: {attrs.get('source', '?')} (git {git[:12]}), created "
              f"{attrs.get('date_created', '?')}, seed {attrs.get('seed_entropy', '?')}")
    lines = [f"{path}: {attrs.get('title', '(no title)')}", source]
    if "config_hash" in attrs:
        lines.append(f"  config hash: {str(attrs['config_hash'])[:16]}   chunk: {attrs.get('chunk', '?')}"
                     f"   prediction: {attrs.get('prediction_method', '?')}")
    lines.append(f"  python {attrs.get('python_version', '?')}, numpy {attrs.get('numpy_version', '?')}, "
                 f"numba {attrs.get('numba_version', '?')}; {attrs.get('log_base', 'natural logarithms')}")
    lines.append(f"  history: {attrs.get('history', '')}")
    return lines


def _group_lines(name: str, ds: xr.Dataset, attrs: dict[str, Any]) -> list[str]:
    summary = point_summaries(ds)
    dims = _grid_dims(summary)
    n_points = int(np.prod([summary.sizes[d] for d in dims])) if dims else 1
    group = name.strip("/") or "(root)"
    dims_text = ", ".join(f"{d}={n}" for d, n in ds.sizes.items())
    iters = int(ds["n"].values.flat[0]) if "n" in ds else ds.sizes.get("iteration", 0)
    stored = "per-iteration arrays stored" if "accepted" in ds else "summary only"
    lines = [f"group {group}: {n_points} point{'s' * (n_points != 1)}   dims: {dims_text}"]
    for d in dims:
        lines.append(f"  swept {d}: {', '.join(str(v) for v in summary[d].values)}")
    if ds.attrs.get("fixed_parameters", "{}") != "{}":
        lines.append(f"  fixed: {ds.attrs['fixed_parameters']}")
    lines.append(f"  budgets: {', '.join(str(int(p)) for p in ds['budget'].values)}")
    lines.append(f"  iterations: {iters} per point ({stored})")
    if ds.attrs.get("notes"):
        lines.extend(f"  note: {n}" for n in str(ds.attrs["notes"]).splitlines())
    else:                             # a run's file: the reasons of its NaN theory values
        lines.extend(f"  {v}: n/a: {ds[v].attrs['reason']}"
                     for v in ("upper_bound", "prediction", "paper_bound")
                     if v in ds and ds[v].attrs.get("reason"))
    for label, pt in _points(summary, attrs):
        mom = (f"   mu = {float(pt['mu']):.6g}, mu2 = {float(pt['mu2']):.6g} nats"
               if "mu" in pt else "")
        lines.append(f"  {label}{mom}")
        lines.extend("    " + row for row in _point_table(pt).splitlines())
    return lines


def describe(path: str | os.PathLike[str]) -> str:
    """What ``brwsim inspect`` prints: provenance, dims, points, budgets and a summary table."""
    p = Path(path)
    with open_results(p) as (attrs, groups):
        lines = _provenance(p, attrs)
        for name, ds in groups.items():
            lines.extend(_group_lines(name, ds, attrs))
    return "\n".join(lines)


def plot(path: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """E[X] with standard-error bars against P for every point, one panel per group.

    The estimate is the mean of E[X | T_P] (Rao-Blackwellised); the paper's bound (its
    O(1) term dropped) is dashed and the renewal prediction dotted, in the point's colour.

    Returns
    -------
    pathlib.Path
        The figure file written: format from its suffix (``.png``, ``.pdf``, ``.svg``);
        ``.png`` is appended to a name without one (``--out fig`` writes ``fig.png``).
    """
    from matplotlib.figure import Figure

    p, dest = Path(path), Path(out)
    if not dest.suffix:
        dest = dest.with_name(dest.name + ".png")
    fmt = dest.suffix[1:].lower()
    if fmt not in _FIGURE_FORMATS:
        raise UserError(f"{dest}: unknown figure format '.{fmt}' (use one of "
                        f"{', '.join('.' + f for f in _FIGURE_FORMATS)})")
    check_output_path(dest, "--out")
    with open_results(p) as (attrs, groups):
        summaries = {name: point_summaries(ds) for name, ds in groups.items()}
    fig = Figure(figsize=(7.5, 4.2 * len(summaries)), layout="constrained")
    axes = fig.subplots(len(summaries), 1, squeeze=False)[:, 0]
    for ax, (name, summary) in zip(axes, summaries.items()):
        _plot_group(ax, summary, attrs, name.strip("/"))
    try:
        with atomic_path(dest) as tmp:
            fig.savefig(tmp, dpi=120, format=fmt)
    except (OSError, ValueError) as exc:
        raise UserError(f"{dest}: cannot write the figure ({exc})") from None
    return dest


def _plot_group(ax: Any, summary: xr.Dataset, attrs: dict[str, Any], name: str) -> None:
    points = list(_points(summary, attrs))
    colors = [f"C{i % 10}" for i in range(len(points))]
    for (label, pt), color in zip(points, colors):
        P = pt["budget"].values
        ax.errorbar(P, pt["expected_mean"].values, yerr=pt["expected_se"].values, fmt="o-",
                    ms=3, lw=1, capsize=2, color=color, label=label if len(label) <= 60 else label[:57] + "...")
        if "paper_bound" in pt:
            ax.plot(P, pt["paper_bound"].values, "--", lw=0.8, color=color)
        if "prediction" in pt:
            ax.plot(P, pt["prediction"].values, ":", lw=1.2, color=color)
    ax.plot([], [], "k--", lw=0.8, label="paper's bound (O(1) dropped)")
    if "prediction" in summary and np.isfinite(summary["prediction"].values).any():
        ax.plot([], [], "k:", lw=1.2, label="renewal prediction")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("budget P (draft tokens per call)")
    ax.set_ylabel("E[X] (accepted draft tokens)")
    ax.set_title(name or str(attrs.get("title", "")), fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=6 if len(points) > 6 else 8, ncol=1 + len(points) // 12)


def register(subparsers: Any) -> None:
    """Add the ``inspect`` and ``plot`` subcommands to an argparse subparsers object."""
    ins = subparsers.add_parser("inspect", help="describe a results.nc (sweep) or run output file",
                                description="Print provenance, dims, swept parameters, budgets, "
                                            "iterations and a per-point summary table.")
    ins.add_argument("file", metavar="FILE", help="netCDF file written by brwsim sweep or run")
    ins.set_defaults(func=_cmd_inspect)
    plt = subparsers.add_parser("plot", help="plot E[X] against P for every point of a file",
                                description="E[X] (mean of E[X|T_P], standard-error bars) against "
                                            "P on a log2 axis, with the paper's bound and the "
                                            "prediction when present.")
    plt.add_argument("file", metavar="FILE", help="netCDF file written by brwsim sweep or run")
    plt.add_argument("--out", required=True, metavar="FIG", help="figure file (.png, .pdf, .svg)")
    plt.set_defaults(func=_cmd_plot)


def _cmd_inspect(args: argparse.Namespace) -> int:
    print(describe(args.file))
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    print(f"wrote {plot(args.file, args.out)}")
    return 0
