"""``brwsim inspect`` and ``brwsim plot``: read a ``results.nc`` of a sweep or a ``brwsim run`` file.

A sweep file holds one netCDF group per ``[[sweep.family]]`` block with per-point
summaries (``accepted_mean``, ``expected_mean``, ...); a run file holds one point's raw
arrays in its root group. :func:`open_results` gives both as a mapping from group name to
dataset and :func:`point_summaries` the same per-point, per-budget table for both.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from brwsim.cli.common import add_command, bound_check
from brwsim.errors import UserError
from brwsim.io import atomic_path, check_netcdf_size
from brwsim.lazy import xarray as xr
from brwsim.simulate import summarize
from brwsim.textform import format_table
from brwsim.validate import check_input_file, check_output_path, check_regular_or_absent

_FIGURE_FORMATS = ("png", "pdf", "svg", "eps", "ps", "jpg", "jpeg", "tif", "tiff", "webp")

__all__ = ["open_results", "point_summaries", "describe", "plot", "figure", "register"]

_SUMMARY_VARS = ("accepted_mean", "accepted_se", "expected_mean", "expected_se",
                 "tokens_per_call", "depth_mean")
_RUN_VARS = ("accepted", "expected_accepted", "depth")
_PLAN_VARS = ("speedup", "speedup_se", "tokens_per_call", "best_budget", "best_speedup")


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
    p = check_input_file(path, "input")
    check_netcdf_size(p)
    try:
        groups = xr.open_groups(p, engine="netcdf4")
    except (OSError, ValueError) as exc:
        raise UserError(f"{p}: not a readable netCDF file ({exc})") from None
    try:
        data = {name: ds for name, ds in groups.items() if "budget" in ds.dims}
        if not data:
            if str(groups["/"].attrs.get("source", "")).startswith("brwsim"):
                yield dict(groups["/"].attrs), {}       # a bank: no curves, attributes only
                return
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
    """Whether ``ds`` has the variables of a sweep group, a ``brwsim run`` or a ``brwsim plan`` file."""
    if all(v in ds for v in _SUMMARY_VARS) or _is_plan(ds):
        return True
    return all(v in ds for v in _RUN_VARS) and "iteration" in ds.dims


def _is_plan(ds: xr.Dataset) -> bool:
    """Whether ``ds`` is a ``brwsim plan`` dataset (speedup over batch and budget)."""
    return all(v in ds for v in _PLAN_VARS) and "batch" in ds.dims


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
    extra = [v for v in ("paper_bound", "upper_bound", "upper_bound_se", "prediction", "mu", "mu2",
                         "family_string", "batch") if v in ds]
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
    for name, title in (("paper_bound", "paper bound"), ("upper_bound", "upper bound"),
                        ("prediction", "prediction")):
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


def _short_commit(code: str) -> str:
    """A full commit hash cut to 12 digits, its ``-dirty`` mark kept; anything else as is."""
    head, dirty = (code[:-6], "-dirty") if code.endswith("-dirty") else (code, "")
    return head[:12] + dirty if re.fullmatch(r"[0-9a-f]{40}", head) else code


def _provenance(path: Path, attrs: dict[str, Any]) -> list[str]:
    git = attrs.get("git_commit") or "unknown"
    source = (f"  source: {attrs.get('source', '?')} (git {_short_commit(git)}), created "
              f"{attrs.get('date_created', '?')}, seed {attrs.get('seed_entropy', '?')}")
    lines = [f"{path}: {attrs.get('title', '(no title)')}", source]
    if "config_hash" in attrs:
        lines.append(f"  config hash: {str(attrs['config_hash'])[:16]}   chunk: {attrs.get('chunk', '?')}"
                     f"   prediction: {attrs.get('prediction_method', '?')}")
    lines.append(f"  python {attrs.get('python_version', '?')}, numpy {attrs.get('numpy_version', '?')}, "
                 f"numba {attrs.get('numba_version', '?')}; {attrs.get('log_base', 'natural logarithms')}")
    lines.append(f"  history: {attrs.get('history', '')}")
    codes = json.loads(attrs["shard_code"]) if "shard_code" in attrs else {}
    if len(codes) > 1 or (codes and next(iter(codes)) != git):     # a sweep of mixed code
        lines.append("  shards by the code that wrote them: "       # (most shards first)
                     + ", ".join(f"{_short_commit(c)} ({n})" for c, n in codes.items())
                     + "; not one version's run")
    if "cost_family" in attrs:            # a sweep with [sweep.cost]
        lines.append(f"  cost: {attrs.get('cost', '?')}; {attrs['cost_family']}")
    lines.extend(_input_lines(attrs))
    return lines


def _input_lines(attrs: dict[str, Any]) -> list[str]:
    """``input sha256`` lines: the files a run, sweep or plan read (``input_sha256``)."""
    import json

    try:
        inputs = json.loads(attrs.get("input_sha256", "{}"))
    except ValueError:
        return [f"  input sha256: unreadable attribute {attrs.get('input_sha256')!r}"]
    return [f"  input sha256: {digest}  {path}" for path, digest in sorted(inputs.items())]


def _other_lines(ds: xr.Dataset) -> list[str]:
    """A brwsim file without curves (a bank): its variables, their dims and long names."""
    lines = [f"  dims: {', '.join(f'{d}={n}' for d, n in ds.sizes.items()) or '(none)'}"]
    for name, var in ds.data_vars.items():
        lines.append(f"  {name}{tuple(var.dims)}: {var.attrs.get('long_name', '')}")
    for key in ("vocab", "format", "source_files", "skipped_positions"):
        if key in ds.attrs:
            lines.append(f"  {key}: {ds.attrs[key]}")
    return lines


def _plan_lines(ds: xr.Dataset) -> list[str]:
    """A plan: the family it assumed, the cost model and P*, speedup per batch size."""
    lines = [f"plan: family {ds.attrs.get('family', '?')}", f"  cost: {ds.attrs.get('cost', '?')}"]
    rows = []
    for i, b in enumerate(ds["batch"].values):
        rows.append([str(int(b)), str(int(ds["best_budget"].values[i])),
                     f"{float(ds['best_speedup'].values[i]):.3f} ± {float(ds['best_speedup_se'].values[i]):.3f}",
                     f"{float(ds['best_tokens_per_call'].values[i]):.3f}"])
    lines.extend("  " + r for r in format_table(rows, ["B", "P*", "speedup ± SE", "tau at P*"]).splitlines())
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
        mom = (f"   mu = {float(pt['mu']):.6g} nats, mu2 = {float(pt['mu2']):.6g} nats^2"
               if "mu" in pt else "")
        lines.append(f"  {label}{mom}")
        lines.extend("    " + row for row in _point_table(pt).splitlines())
    return lines


def describe(path: str | os.PathLike[str]) -> str:
    """What ``brwsim inspect`` prints: provenance, dims, points, budgets and a summary table."""
    p = Path(path)
    with open_results(p) as (attrs, groups):
        lines = _provenance(p, attrs)
        if not groups:
            with xr.open_dataset(p, engine="netcdf4") as ds:
                lines.extend(_other_lines(ds))
        for name, ds in groups.items():
            lines.extend(_plan_lines(ds) if _is_plan(ds) else _group_lines(name, ds, attrs))
    return "\n".join(lines)


def plot(path: str | os.PathLike[str], out: str | os.PathLike[str], *, paper_bound: bool = False,
         tau: bool = False) -> Path:
    """Curves against P for every point of a file, one panel per group; returns the file written.

    A run or sweep panel draws E[X] (the mean of E[X | T_P], Rao-Blackwellised) with
    standard-error bars, one labelled line per point (family, policy, batch) and the renewal
    prediction dotted in the point's colour. A plan panel draws the speedup (± SE) per batch
    size. The axes are scaled to the data.

    Parameters
    ----------
    path : path
        A file written by ``brwsim run``, ``brwsim sweep`` or ``brwsim plan``.
    out : path
        The figure file: format from its suffix (``.png``, ``.pdf``, ``.svg``); ``.png`` is
        appended to a name without one (``--out fig`` writes ``fig.png``).
    paper_bound : bool, default False
        Also draw the paper's bound (its O(1) term dropped), dashed, without rescaling the
        axes to it (it lies far above the curves at large P).
    tau : bool, default False
        Draw tokens per call tau = 1 + E[X] (per request for a batch) instead of E[X].

    Returns
    -------
    pathlib.Path
    """
    from matplotlib.figure import Figure

    check_regular_or_absent(out, "--out")            # a trailing '/' names a folder
    p, dest = Path(path), Path(out)
    if not dest.suffix:
        dest = dest.with_name(dest.name + ".png")
    fmt = dest.suffix[1:].lower()
    if fmt not in _FIGURE_FORMATS:
        raise UserError(f"{dest}: unknown figure format '.{fmt}' (use one of "
                        f"{', '.join('.' + f for f in _FIGURE_FORMATS)})")
    check_output_path(dest, "--out")
    fig = figure(p, paper_bound=paper_bound, tau=tau, figure_class=Figure)
    try:
        with atomic_path(dest) as tmp:
            fig.savefig(tmp, dpi=120, format=fmt)
    except (OSError, ValueError) as exc:
        raise UserError(f"{dest}: cannot write the figure ({exc})") from None
    return dest


def figure(path: str | os.PathLike[str], *, paper_bound: bool = False, tau: bool = False,
           figure_class: Any = None) -> Any:
    """The :func:`plot` figure of a file, not written (a ``matplotlib.figure.Figure``)."""
    if figure_class is None:
        from matplotlib.figure import Figure as figure_class
    p = Path(path)
    with open_results(p) as (attrs, groups):
        if not groups:
            raise UserError(f"{p}: a brwsim file without curves over the budget (a bank?); "
                            "brwsim inspect describes it, brwsim bank-stats summarises a bank")
        panels = {name: (ds.load() if _is_plan(ds) else point_summaries(ds)) for name, ds in groups.items()}
    fig = figure_class(figsize=(7.5, 4.2 * len(panels)), layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    for ax, (name, summary) in zip(axes, panels.items()):
        if _is_plan(summary):
            _plot_plan(ax, summary)
        else:
            _plot_group(ax, summary, attrs, name.strip("/"), paper_bound, tau)
    return fig


#: Characters of a title line and of a legend label before they are wrapped or shortened.
TITLE_WIDTH = 72
LABEL_WIDTH = 60


def _short(text: str, width: int = LABEL_WIDTH) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def _wrap(text: str, width: int = TITLE_WIDTH, lines: int = 3) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width, max_lines=lines, placeholder=" ...",
                                    break_long_words=True, break_on_hyphens=False)) or text


def _family_label(pt: xr.Dataset, attrs: dict[str, Any]) -> str:
    """A point's family string (a sweep's ``family_string``, else the run's ``family``)."""
    if "family_string" in pt:
        return str(pt["family_string"].values)
    return str(attrs.get("family", "?"))


def _line_label(pt: xr.Dataset, attrs: dict[str, Any], common: str) -> str:
    """A point's legend label: its family (unless every line shares it), policy and batch."""
    family = _family_label(pt, attrs)
    parts = [] if family == common else [family]
    if "policy" in pt.coords and pt["policy"].ndim == 0 and str(pt["policy"].values):
        parts.append(str(pt["policy"].values))
    if "batch" in pt and np.ndim(pt["batch"].values) == 0 and int(pt["batch"].values) > 1:
        parts.append(f"B = {int(pt['batch'].values)}")
    return _short(", ".join(parts) or family)


def _plot_group(ax: Any, summary: xr.Dataset, attrs: dict[str, Any], name: str,
                paper_bound: bool = False, tau: bool = False) -> None:
    points = list(_points(summary, attrs))
    families = {_family_label(pt, attrs) for _, pt in points}
    common = families.pop() if len(families) == 1 and len(points) > 1 else ""
    batch = int(attrs.get("batch", 1) or 1)
    colors = [f"C{i % 10}" for i in range(len(points))]
    bounds, predicted = [], set()
    for (label, pt), color in zip(points, colors):
        P = pt["budget"].values
        b = int(pt["batch"].values) if "batch" in pt and np.ndim(pt["batch"].values) == 0 else batch
        scale = 1.0 / b if tau else 1.0
        y = pt["expected_mean"].values * scale + (1.0 if tau else 0.0)
        ax.errorbar(P, y, yerr=pt["expected_se"].values * scale, fmt="o-", ms=3, lw=1, capsize=2,
                    color=color, label=_line_label(pt, attrs, common))
        family = _family_label(pt, attrs)
        if ("prediction" in pt and np.isfinite(pt["prediction"].values).any()
                and (family, b) not in predicted):       # the optimal tree's: once per family
            predicted.add((family, b))
            ax.plot(P, pt["prediction"].values * scale + (1.0 if tau else 0.0), ":", lw=1.2, color=color)
        if paper_bound and "paper_bound" in pt and family not in {lab for lab, *_ in bounds}:
            bounds.append((family, P, pt["paper_bound"].values + (1.0 if tau else 0.0), color))
    if "prediction" in summary and np.isfinite(summary["prediction"].values).any():
        ax.plot([], [], "k:", lw=1.2, label="renewal prediction")
    ax.set_xscale("log", base=2)
    if bounds:                           # drawn without rescaling: it dwarfs the curves
        ax.relim()
        ax.autoscale_view()
        xlim, ylim = ax.get_xlim(), ax.get_ylim()
        for _, P, y, color in bounds:
            ax.plot(P, y, "--", lw=0.8, color=color)
        ax.plot([], [], "k--", lw=0.8, label="paper's bound (O(1) dropped)")
        ax.set_xlim(xlim)
        ax.set_ylim(ylim)
    ax.set_xlabel("budget P (draft tokens per call" + (", over the batch)" if batch > 1 else ")"))
    if tau:
        ax.set_ylabel("tokens per call τ = 1 + E[X]" + (" / B (per request)" if batch > 1 else ""))
    else:
        ax.set_ylabel("E[X_F] (accepted draft tokens, batch total)" if batch > 1
                      else "E[X] (accepted draft tokens)")
    title = name or str(attrs.get("family") or attrs.get("title", ""))
    if common and not name:
        title = common
    ax.set_title(_wrap(title), fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=6 if len(points) > 6 else 8, ncol=1 + len(points) // 12)


def _plot_plan(ax: Any, ds: xr.Dataset) -> None:
    """Speedup (± SE) against P, one line per batch size B, P* marked."""
    P = ds["budget"].values
    for i, b in enumerate(ds["batch"].values):
        color = f"C{i % 10}"
        ax.errorbar(P, ds["speedup"].values[i], yerr=ds["speedup_se"].values[i], fmt="o-", ms=3,
                    lw=1, capsize=2, color=color, label=f"B = {int(b)}")
        best = int(ds["best_budget"].values[i])
        if best > 0:
            ax.plot([best], [float(ds["best_speedup"].values[i])], "*", ms=9, color=color)
    ax.axhline(1.0, color="0.5", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("budget P (draft tokens per call, over the batch)")
    ax.set_ylabel("speedup over plain decoding")
    ax.set_title(_wrap(f"plan: {ds.attrs.get('family', '')}"), fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)


def register(subparsers: Any) -> None:
    """Add ``inspect`` and ``plot``."""
    ins = add_command(subparsers, "inspect", _cmd_inspect, "describe any file brwsim wrote",
                      description="Print provenance, dims, swept parameters, budgets, "
                                  "iterations and a per-point summary table.")
    ins.add_argument("file", metavar="FILE", help="netCDF file written by brwsim sweep or run")
    plt = add_command(subparsers, "plot", _cmd_plot,
                      "plot E[X] (or a plan's speedup) against P for every point of a file",
                      description="E[X] (mean of E[X|T_P], standard-error bars) against "
                                            "P on a log2 axis, one labelled line per point (family, "
                                            "policy, batch), with the prediction when present; a "
                                            "plan file's speedup per batch size.")
    plt.add_argument("file", metavar="FILE", help="netCDF file written by brwsim sweep or run")
    plt.add_argument("--out", required=True, metavar="FIG", help="figure file (.png, .pdf, .svg)")
    plt.add_argument("--paper-bound", action="store_true",
                     help="also draw the paper's bound (dashed; the axes stay scaled to the data)")
    plt.add_argument("--tau", action="store_true",
                     help="plot tokens per call tau = 1 + E[X] (per request for a batch) instead of E[X]")


def _cmd_inspect(args: argparse.Namespace) -> int:
    print(describe(args.file))
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    print(f"wrote {plot(args.file, args.out, paper_bound=args.paper_bound, tau=args.tau)}")
    return 0
