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

from brwsim.cli.common import add_command, bound_check
from brwsim.cli.output import add_format, emit, report
from brwsim.errors import UserError

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
    from brwsim.io import check_netcdf_size
    from brwsim.lazy import xarray as xr
    from brwsim.validate import check_input_file

    p = check_input_file(path, "input")
    check_netcdf_size(p)
    try:
        groups = xr.open_groups(p, engine="netcdf4")
    except (OSError, ValueError) as exc:
        raise UserError(f"{p}: not a readable netCDF file ({exc})") from None
    try:
        data = {name: ds for name, ds in groups.items() if "budget" in ds.dims
                and not (name == "/" and "flat_view" in ds.attrs)}   # a sweep's root: its groups
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
    from brwsim.simulate import summarize

    if "expected_mean" in ds:
        out = ds[list(_SUMMARY_VARS)]
    else:

        out = summarize(ds.load())
    extra = [v for v in ("paper_bound", "upper_bound", "upper_bound_se", "prediction", "mu", "mu2",
                         "family_string", "batch") if v in ds]
    out = out.merge(ds[extra]).load()
    if "policy" in out["expected_mean"].dims:
        out = out.assign(_policy_fraction(out, ds))
    return out


def _policy_fraction(summary: xr.Dataset, ds: xr.Dataset) -> dict[str, Any]:
    """``fraction_of_optimal`` and its paired ``fraction_se`` (NaN without per-tree data)
    against the policy ``optimal(...)`` (else the first) on the same trees."""
    from brwsim.simulate import paired_fraction

    mean = summary["expected_mean"]
    dims = mean.dims
    names = [str(v) for v in summary["policy"].values]
    ref = next((i for i, v in enumerate(names) if v.startswith("optimal(")), 0)
    per_tree = None
    if "expected_accepted" in ds and "iteration" in ds["expected_accepted"].dims:
        per_tree = ds["expected_accepted"].transpose(*dims, "iteration").values
    frac, se = paired_fraction(mean.values, dims.index("policy"), ref, per_tree)
    return {"fraction_of_optimal": (dims, frac, {"long_name": "E[X|T] over the optimal tree's, "
                                                 "paired on the same trees", "units": "1"}),
            "fraction_se": (dims, se, {"long_name": "paired SE of fraction_of_optimal", "units": "1"})}


def _grid_dims(summary: xr.Dataset) -> list[str]:
    return [d for d in summary["expected_mean"].dims if d != "budget"]


def _points(summary: xr.Dataset, attrs: dict[str, Any]) -> Iterator[tuple[str, xr.Dataset]]:
    """(label, one point's summary) for every point, row-major over the grid."""
    import numpy as np

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
    import numpy as np

    v = float(x)
    return "nan" if np.isnan(v) else f"{v:.{digits}f}"


def _point_table(pt: xr.Dataset) -> str:

    import numpy as np
    from brwsim.textform import format_table

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
    if "fraction_of_optimal" in pt:
        header.append("of optimal ± SE (paired)")
        for i, row in enumerate(rows):
            f, se = float(pt["fraction_of_optimal"].values[i]), float(pt["fraction_se"].values[i])
            row.append("nan" if np.isnan(f) else f"{f:.3f}" + ("" if np.isnan(se) else f" ± {se:.3f}"))
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
    seed = f", seed {attrs['seed_entropy']}" if "seed_entropy" in attrs else ", no seed recorded"
    source = (f"  source: {attrs.get('source', '?')} (git {_short_commit(git)}), created "
              f"{attrs.get('date_created', '?')}{seed}")
    lines = [f"{path}: {attrs.get('title', '(no title)')}", source]
    if "config_hash" in attrs:
        lines.append(f"  config hash: {str(attrs['config_hash'])[:16]}   chunk: {attrs.get('chunk', '?')}"
                     f"   prediction: {attrs.get('prediction_method', '?')}")
    lines.append(f"  python {attrs.get('python_version', '?')}, numpy {attrs.get('numpy_version', '?')}, "
                 f"numba {attrs.get('numba_version', '?')}; {attrs.get('log_base', 'natural logarithms')}")
    lines.append(f"  history: {attrs.get('history', '')}")
    if "flat_view" in attrs:
        lines.append("  root group: every point's summary over (point, budget) "
                     "(xarray.open_dataset(FILE)); the groups below hold the grids")
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
    from brwsim.textform import format_table

    lines = [f"plan: family {ds.attrs.get('family', '?')}", f"  cost: {ds.attrs.get('cost', '?')}"]
    rows = []
    for i, b in enumerate(ds["batch"].values):
        rows.append([str(int(b)), str(int(ds["best_budget"].values[i])),
                     f"{float(ds['best_speedup'].values[i]):.3f} ± {float(ds['best_speedup_se'].values[i]):.3f}",
                     f"{float(ds['best_tokens_per_call'].values[i]):.3f}"])
    lines.extend("  " + r for r in format_table(rows, ["B", "P*", "speedup ± SE", "tau at P*"]).splitlines())
    return lines


def _group_lines(name: str, ds: xr.Dataset, attrs: dict[str, Any]) -> list[str]:
    import numpy as np

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


#: Longest JSON file ``inspect`` reads (brwsim's own are a few kilobytes).
MAX_JSON_BYTES = 16 * 2 ** 20


def _read_json(p: Path) -> Any:
    """The JSON value of a file brwsim wrote, or a one-line error."""
    from brwsim.validate import check_input_file

    check_input_file(p, "input")
    if p.stat().st_size > MAX_JSON_BYTES:
        raise UserError(f"{p}: {p.stat().st_size} bytes, more than any JSON file brwsim writes")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"{p}: not valid JSON ({exc})") from None


def _json_summary(p: Path, doc: Any) -> tuple[str, list[str], dict[str, Any]]:
    """(kind, description lines, fields for the JSON report) of a JSON file brwsim wrote:
    an ``export-acceptance`` schedule, a sweep folder's ``config.json`` or a ``--format
    json`` report."""
    if isinstance(doc, dict) and isinstance(doc.get("predicted"), dict):
        pred = doc["predicted"]
        engines = [k for k in ("vllm", "sglang", "tensorrt_llm") if k in doc]
        lines = [f"{p}: brwsim export-acceptance: engine settings for {', '.join(engines) or 'no engine'}",
                 f"  predicted for family {pred.get('family', '?')}, policy {pred.get('policy', '?')}, "
                 f"budget {pred.get('budget', '?')}, {pred.get('iterations', '?')} calls, seed "
                 f"{pred.get('seed', '?')}",
                 f"  acceptance length (tokens per call) {doc.get('acceptance_length', '?')} ± "
                 f"{pred.get('acceptance_length_se', '?')}; num_speculative_tokens "
                 f"{doc.get('num_speculative_tokens', '?')}"]
        if isinstance(doc.get("checked_against"), dict):
            lines.append("  checked against: " + ", ".join(f"{k} {v}" for k, v in doc["checked_against"].items()))
        return "export-acceptance", lines, {"predicted": pred, "engines": engines,
                                            "acceptance_length": doc.get("acceptance_length")}
    if isinstance(doc, dict) and "config_hash" in doc and isinstance(doc.get("config"), dict):
        cfg = doc["config"].get("sweep", doc["config"])
        blocks = cfg.get("family", []) if isinstance(cfg, dict) else []
        policies = cfg.get("policy", []) if isinstance(cfg, dict) else []
        lines = [f"{p}: brwsim sweep state (the configuration a rerun must match)",
                 f"  config hash: {str(doc['config_hash'])[:16]}   format {doc.get('format', '?')}"]
        for key in ("title", "seed", "iterations", "chunk", "budgets", "prediction", "batch"):
            if isinstance(cfg, dict) and key in cfg:
                lines.append(f"  {key}: {cfg[key]}")
        lines.extend(f"  family block: {json.dumps(b, sort_keys=True)}" for b in blocks)
        lines.extend(f"  policy: {json.dumps(b, sort_keys=True)}" for b in policies)
        return "sweep-config", lines, {"config_hash": doc["config_hash"], "config": doc["config"]}
    if isinstance(doc, dict) and "command" in doc and "schema" in doc and "rows" in doc:
        lines = [f"{p}: brwsim {doc['command']} --format json (schema {doc['schema']}, brwsim "
                 f"{doc.get('brwsim', '?')}): {len(doc['rows'])} rows",
                 "  fields: " + ", ".join(doc["rows"][0]) if doc["rows"] else "  no rows"]
        return "report", lines, {"report_of": doc["command"]}
    raise UserError(f"{p}: a JSON file brwsim did not write (neither an export-acceptance "
                    "schedule, a sweep's config.json nor a --format json report)")


def _figure_lines(p: Path) -> list[str]:
    """A figure ``brwsim plot`` wrote: its size and the software that drew it."""
    from PIL import Image

    try:
        with Image.open(p) as im:
            return [f"{p}: a {im.format} figure, {im.width} x {im.height} pixels"
                    + (f", drawn by {im.info['Software']}" if "Software" in im.info else ""),
                    "  its data: the .nc file it was plotted from (brwsim inspect FILE.nc)"]
    except OSError as exc:
        raise UserError(f"{p}: not a readable image ({exc})") from None


def _file_kind(p: Path) -> str:
    """``json``, ``figure`` or ``netcdf``, from the file's first bytes."""
    from brwsim.validate import check_input_file

    check_input_file(p, "input")
    with open(p, "rb") as fh:
        head = fh.read(8)
    if head.lstrip()[:1] in (b"{", b"["):
        return "json"
    if head.startswith(b"\x89PNG") or head[:3] == b"\xff\xd8\xff":
        return "figure"
    return "netcdf"


def describe(path: str | os.PathLike[str]) -> str:
    """What ``brwsim inspect`` prints: provenance, dims, points, budgets and a summary table
    (a JSON file brwsim wrote, or a figure: what it is)."""
    from brwsim.lazy import xarray as xr

    p = Path(path)
    kind = _file_kind(p)
    if kind == "json":
        return "\n".join(_json_summary(p, _read_json(p))[1])
    if kind == "figure":
        return "\n".join(_figure_lines(p))
    with open_results(p) as (attrs, groups):
        lines = _provenance(p, attrs)
        if not groups:
            with xr.open_dataset(p, engine="netcdf4") as ds:
                lines.extend(_other_lines(ds))
        for name, ds in groups.items():
            lines.extend(_plan_lines(ds) if _is_plan(ds) else _group_lines(name, ds, attrs))
    return "\n".join(lines)


#: Units of the fields of ``inspect``'s JSON and CSV rows.
INSPECT_UNITS = {
    "group": "netCDF group ('/' for a run)", "point": "the point's family, policy and batch",
    "budget": "draft tokens (tree nodes, root excluded)", "accepted_mean": "tokens",
    "accepted_se": "tokens", "expected_mean": "tokens", "expected_se": "tokens",
    "tokens_per_call": "tokens per target call", "depth_mean": "tree levels",
    "paper_bound": "tokens", "upper_bound": "tokens", "upper_bound_se": "tokens",
    "prediction": "tokens", "fraction_of_optimal": "1", "fraction_se": "1",
    "batch": "requests", "best_budget": "draft tokens", "best_speedup": "1",
    "best_speedup_se": "1", "best_tokens_per_call": "tokens per request per call",
}


def _jsonable_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """netCDF attributes as JSON values (numpy scalars and arrays to numbers and lists)."""
    out = {}
    for key, value in attrs.items():
        out[key] = value.tolist() if hasattr(value, "tolist") else value
    return out


def _point_rows(group: str, label: str, pt: xr.Dataset) -> list[dict[str, Any]]:
    """One row per budget of one point: every per-budget summary variable it holds."""
    names = [n for n in ("accepted_mean", "accepted_se", "tokens_per_call", "expected_mean",
                         "expected_se", "depth_mean", "paper_bound", "upper_bound",
                         "upper_bound_se", "prediction", "fraction_of_optimal", "fraction_se")
             if n in pt and pt[n].dims == ("budget",)]
    coords = {d: pt[d].values.item() for d in pt.coords if d != "budget" and pt[d].ndim == 0}
    rows = []
    for i, p in enumerate(pt["budget"].values):
        row = {"group": group, "point": label, **{k: v for k, v in coords.items() if k != "budget"},
               "budget": int(p)}
        row.update({n: float(pt[n].values[i]) for n in names})
        rows.append(row)
    return rows


def inspect_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What ``brwsim inspect --format json`` prints: the file's kind, its global attributes
    and one row per (group, point, budget) with the summary table's fields."""
    from brwsim.lazy import xarray as xr

    p = Path(path)
    rows: list[dict[str, Any]] = []
    if _file_kind(p) == "json":
        kind, lines, fields = _json_summary(p, _read_json(p))
        return report("inspect", rows, dict(INSPECT_UNITS), file=str(p), kind=kind,
                      description=lines, **fields)
    if _file_kind(p) == "figure":
        return report("inspect", rows, dict(INSPECT_UNITS), file=str(p), kind="figure",
                      description=_figure_lines(p))
    with open_results(p) as (attrs, groups):
        kind = "bank" if not groups else "sweep" if "/" not in groups else "run"
        for name, ds in groups.items():
            if _is_plan(ds):
                kind = "plan"
                for i, b in enumerate(ds["batch"].values):
                    rows.append({"group": name, "batch": int(b),
                                 "best_budget": int(ds["best_budget"].values[i]),
                                 "best_speedup": float(ds["best_speedup"].values[i]),
                                 "best_speedup_se": float(ds["best_speedup_se"].values[i]),
                                 "best_tokens_per_call": float(ds["best_tokens_per_call"].values[i])})
                continue
            summary = point_summaries(ds)
            for label, pt in _points(summary, attrs):
                rows.extend(_point_rows(name, label, pt))
        variables = {}
        if not groups:
            with xr.open_dataset(p, engine="netcdf4") as ds:
                variables = {n: {"dims": list(v.dims), "long_name": v.attrs.get("long_name", ""),
                                 "units": v.attrs.get("units", "")} for n, v in ds.data_vars.items()}
    units = dict(INSPECT_UNITS)
    for row in rows:                     # the grid's coordinates: swept family parameters
        units.update({k: "swept grid value" for k in row if k not in units})
    return report("inspect", rows, units, file=str(p), kind=kind,
                  attrs=_jsonable_attrs(attrs), **({"variables": variables} if variables else {}))


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
    from brwsim.io import atomic_path
    from brwsim.validate import check_output_path, check_regular_or_absent

    check_regular_or_absent(out, "--out")            # a trailing '/' names a folder
    p, dest = Path(path), Path(out)
    if not dest.suffix:
        dest = dest.with_name(dest.name + ".png")
    fmt = dest.suffix[1:].lower()
    if fmt not in _FIGURE_FORMATS:
        raise UserError(f"{dest}: unknown figure format '.{fmt}' (use one of "
                        f"{', '.join('.' + f for f in _FIGURE_FORMATS)})")
    check_output_path(dest, "--out")
    fig = figure(p, paper_bound=paper_bound, tau=tau)
    try:
        with atomic_path(dest) as tmp:
            fig.savefig(tmp, dpi=120, format=fmt)
    except (OSError, ValueError) as exc:
        raise UserError(f"{dest}: cannot write the figure ({exc})") from None
    return dest


def figure(path: str | os.PathLike[str], *, paper_bound: bool = False, tau: bool = False,
           figure_class: Any = None) -> Any:
    """The :func:`plot` figure of a file, not written (a ``matplotlib.figure.Figure``).

    Follows :mod:`brwsim.plotting`: what a group compares gets the colours (the policies,
    else its first grid dimension), a second dimension with at most four values the line
    style, the rest separate panels of at most eight series; with policies a second row
    draws each policy's fraction of the optimum with its paired ±2 SE band.
    """
    from brwsim import plotting

    p = Path(path)
    with open_results(p) as (attrs, groups):
        if not groups:
            raise UserError(f"{p}: a brwsim file without curves over the budget (a bank?); "
                            "brwsim inspect describes it, brwsim bank-stats summarises a bank")
        loaded = {name: (ds.load() if _is_plan(ds) else point_summaries(ds)) for name, ds in groups.items()}
    layout = []                          # (kind, group name, data, panels) per group
    for name, summary in loaded.items():
        if _is_plan(summary):
            layout.append(("plan", name, summary, [None]))
        else:
            layout.append(("curves", name, summary, _facets(summary, attrs)))
    cols = max(min(panels[0]["per_row"] if panels[0] else 1, 3) for _, _, _, panels in layout)
    rows = sum((2 if kind == "curves" and panels[0]["policy"] else 1) * -(-len(panels) // cols)
               for kind, _, _, panels in layout)
    paired = any(kind == "curves" and panels[0]["policy"] for kind, _, _, panels in layout)
    fig, axes = plotting.new_figure(rows, cols, height=3.2 if paired else 3.6)
    if figure_class is not None and not isinstance(fig, figure_class):    # pragma: no cover
        raise TypeError("figure_class must be matplotlib.figure.Figure")
    row = 0
    for kind, name, summary, panels in layout:
        if kind == "plan":
            _plot_plan(axes[row][0], summary)
            for ax in axes[row][1:]:
                ax.set_visible(False)
            row += 1
            continue
        per = 2 if panels[0]["policy"] else 1
        for start in range(0, len(panels), cols):
            for c in range(cols):
                if start + c >= len(panels):
                    for r in range(per):
                        axes[row + r][c].set_visible(False)
                    continue
                panel = panels[start + c]
                _plot_panel(axes[row][c], panel, attrs, name.strip("/"), paper_bound, tau)
                if per == 2:
                    _plot_fraction(axes[row + 1][c], panel)
            last = min(cols, len(panels) - start) - 1
            own = panels[0].get("per_row", 1) > 1    # policies split over panels: a legend each
            for c in range(last + 1) if own else [last]:
                for r in range(per):
                    plotting.legend(axes[row + r][c], title=panels[0]["colour_title"] if r == 0 else None)
            row += per
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


def _coord(pt: xr.Dataset, dim: str) -> Any:
    value = pt[dim].values
    return value.item() if hasattr(value, "item") else value


def _facets(summary: xr.Dataset, attrs: dict[str, Any]) -> list[dict[str, Any]]:
    """The panels of a group: each a dict with its points, the colour and style dimensions
    and a title naming what is compared (at most :data:`brwsim.plotting.MAX_SERIES` series)."""
    from brwsim.plotting import COLORS, MAX_SERIES, STYLES, chunks

    dims = [d for d in _grid_dims(summary) if summary.sizes[d] > 1 or d == "policy"]
    colour = "policy" if "policy" in dims else (dims[0] if dims else None)
    others = [d for d in dims if d != colour]
    n_colour = summary.sizes[colour] if colour else 1
    style = next((d for d in others if summary.sizes[d] <= len(STYLES)
                  and n_colour * summary.sizes[d] <= MAX_SERIES), None)
    panel_dims = [d for d in others if d != style]
    points = list(_points(summary, attrs))
    colour_values = list(summary[colour].values) if colour else [None]
    style_values = list(summary[style].values) if style else [None]
    groups: dict[tuple, list] = {}
    for label, pt in points:
        key = tuple(_coord(pt, d) for d in panel_dims)
        groups.setdefault(key, []).append(pt)
    compared = {"policy": "drafting policies on the same trees", None: "E[X]"}.get(colour, f"{colour} values")
    panels: list[dict[str, Any]] = []
    per_key = len(chunks(colour_values, max(1, MAX_SERIES // len(style_values))))
    for key, pts in groups.items():
        family = {_family_label(pt, attrs) for pt in pts}
        on = family.pop() if len(family) == 1 else ", ".join(f"{d} = {v}" for d, v in zip(panel_dims, key))
        for part in chunks(colour_values, max(1, MAX_SERIES // len(style_values))):
            members = [pt for pt in pts if colour is None or _coord(pt, colour) in part]
            panels.append({
                "points": members, "colour": colour, "style": style, "policy": colour == "policy",
                "colour_of": {v: COLORS[i % len(COLORS)] for i, v in enumerate(part)},
                "style_of": {v: STYLES[i] for i, v in enumerate(style_values)},
                "colour_title": colour, "title": f"{compared}: {on}" if on else compared,
                "per_row": per_key if per_key > 1 else len(groups)})
    return panels


def _series_label(pt: xr.Dataset, panel: dict[str, Any]) -> str:
    parts = []
    if panel["colour"]:
        parts.append(str(_coord(pt, panel["colour"])) if panel["colour"] == "policy"
                     else f"{panel['colour']} = {_coord(pt, panel['colour'])}")
    if panel["style"]:
        parts.append(f"{panel['style']} = {_coord(pt, panel['style'])}")
    return _short(", ".join(parts), 48) or "E[X]"


def _series_style(pt: xr.Dataset, panel: dict[str, Any]) -> tuple[str, str]:
    from brwsim.plotting import COLORS

    color = panel["colour_of"].get(_coord(pt, panel["colour"]), COLORS[0]) if panel["colour"] else COLORS[0]
    ls = panel["style_of"].get(_coord(pt, panel["style"]), "-") if panel["style"] else "-"
    return color, ls


def _plot_panel(ax: Any, panel: dict[str, Any], attrs: dict[str, Any], name: str,
                paper_bound: bool = False, tau: bool = False) -> None:
    """E[X] (or tau) against P: one line per point, ± 1 SE bars; the prediction dotted once
    per family (the optimal tree's); the paper's bound dashed on request."""
    import numpy as np

    from brwsim.plotting import TITLE_SIZE

    batch = int(attrs.get("batch", 1) or 1)
    bounds, predicted = [], set()
    for pt in panel["points"]:
        color, ls = _series_style(pt, panel)
        P = pt["budget"].values
        b = int(pt["batch"].values) if "batch" in pt and np.ndim(pt["batch"].values) == 0 else batch
        scale = 1.0 / b if tau else 1.0
        shift = 1.0 if tau else 0.0
        ax.errorbar(P, pt["expected_mean"].values * scale + shift, yerr=pt["expected_se"].values * scale,
                    fmt="o", ls=ls, ms=3, lw=1.2, capsize=2, color=color, label=_series_label(pt, panel))
        family = _family_label(pt, attrs)
        if ("prediction" in pt and np.isfinite(pt["prediction"].values).any()
                and (family, b) not in predicted):       # the optimal tree's: once per family
            predicted.add((family, b))
            ax.plot(P, pt["prediction"].values * scale + shift, ":", lw=1.2, color="0.35")
        if paper_bound and "paper_bound" in pt and family not in {f for f, *_ in bounds}:
            bounds.append((family, P, pt["paper_bound"].values + shift))
    if predicted:
        ax.plot([], [], ":", lw=1.2, color="0.35", label="renewal prediction (optimal)")
    ax.set_xscale("log", base=2)
    if bounds:                           # drawn without rescaling: it dwarfs the curves
        ax.relim()
        ax.autoscale_view()
        xlim, ylim = ax.get_xlim(), ax.get_ylim()
        for _, P, y in bounds:
            ax.plot(P, y, "--", lw=0.8, color="0.5")
        ax.plot([], [], "--", lw=0.8, color="0.5", label="paper's bound (O(1) dropped)")
        ax.set_xlim(xlim)
        ax.set_ylim(ylim)
    ax.set_xlabel("budget P (draft tokens per call" + (", over the batch)" if batch > 1 else ")"))
    if tau:
        ax.set_ylabel("tokens per call τ = 1 + E[X]" + (" / B" if batch > 1 else ""))
    else:
        ax.set_ylabel("E[X_F] (accepted, batch total)" if batch > 1 else "E[X] (accepted draft tokens)")
    title = panel["title"] if not name or panel["title"].endswith(name) else f"{name}: {panel['title']}"
    ax.set_title(_wrap(title, 56), fontsize=TITLE_SIZE)
    ax.grid(True, which="major", alpha=0.3)


def _plot_fraction(ax: Any, panel: dict[str, Any]) -> None:
    """Each policy's E[X|T] over the optimal tree's, with its paired ±2 SE band."""
    import numpy as np

    from brwsim.plotting import TITLE_SIZE, paired_band

    for pt in panel["points"]:
        if "fraction_of_optimal" not in pt or np.all(pt["fraction_of_optimal"].values == 1.0):
            continue                     # the reference itself: 1 by construction
        color, ls = _series_style(pt, panel)
        paired_band(ax, pt["budget"].values, pt["fraction_of_optimal"].values,
                    pt["fraction_se"].values, color, _series_label(pt, panel), ls)
    ax.axhline(1.0, color="0.5", lw=0.8)
    ax.set_ylim(0, 1.05)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("budget P (draft tokens per call)")
    ax.set_ylabel("fraction of the optimal E[X]")
    ax.set_title("fraction of optimal, band: ±2 paired SE (same trees)", fontsize=TITLE_SIZE - 1)
    ax.grid(True, which="major", alpha=0.3)


def _plot_plan(ax: Any, ds: xr.Dataset) -> None:
    """Speedup (± SE) against P, one line per batch size B, P* starred (with an entry)."""
    from brwsim.plotting import COLORS, STYLES, TITLE_SIZE, legend

    P = ds["budget"].values
    for i, b in enumerate(ds["batch"].values):
        color = COLORS[i % len(COLORS)]
        ax.errorbar(P, ds["speedup"].values[i], yerr=ds["speedup_se"].values[i], fmt="o",
                    ls=STYLES[(i // len(COLORS)) % len(STYLES)], ms=3, lw=1.2, capsize=2,
                    color=color, label=f"B = {int(b)}")
        best = int(ds["best_budget"].values[i])
        if best > 0:
            ax.plot([best], [float(ds["best_speedup"].values[i])], "*", ms=11, color=color,
                    markeredgecolor="k", markeredgewidth=0.5)
    ax.plot([], [], "*", ms=11, color="w", markeredgecolor="k", label="P* (best budget)")
    ax.axhline(1.0, color="0.5", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("budget P (draft tokens per call, over the batch)")
    ax.set_ylabel("speedup over plain decoding")
    ax.set_title(_wrap(f"speedup per batch size B: {ds.attrs.get('family', '')}", 56), fontsize=TITLE_SIZE)
    ax.grid(True, which="major", alpha=0.3)
    legend(ax, title="batch")


def register(subparsers: Any) -> None:
    """Add ``inspect`` and ``plot``."""
    ins = add_command(subparsers, "inspect", _cmd_inspect, "describe any file brwsim wrote",
                      description="Print provenance, dims, swept parameters, budgets, "
                                  "iterations and a per-point summary table (with policies: "
                                  "the fraction of the optimum and its paired SE); for a JSON "
                                  "file (export-acceptance, a sweep's config.json, a --format "
                                  "json report) or a figure, what it holds.")
    ins.add_argument("file", metavar="FILE", help="any file brwsim wrote (.nc, .json, figure)")
    add_format(ins)
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
    if args.format == "table":
        print(describe(args.file))
    else:
        emit(args.format, inspect_report(args.file))
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    print(f"wrote {plot(args.file, args.out, paper_bound=args.paper_bound, tau=args.tau)}")
    return 0
