"""Merging a sweep's shards into ``DIR/results.nc``, one netCDF group per family block,
streaming one shard at a time (exact sufficient statistics, so standard errors come free).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from brwsim.errors import UserError
from brwsim.io import atomic_netcdf, provenance_attrs
from brwsim.plan import best_budget, speedup_from_sums
from brwsim.schema import VARIABLES
from brwsim.sweep.claim import RESULTS
from brwsim.sweep.config import Block, SweepConfig
from brwsim.sweep.execute import ShardInfo, load_shard, shard_codes
from brwsim.simulate import paired_fraction
from brwsim.sweep.shards import (
    PRODUCT_SUMS,
    RAW_VARS,
    SUM_VARS,
    THEORY_BUDGET_VARS,
    THEORY_CHUNK,
    THEORY_VARS,
    shard_name,
)

__all__ = ["merge"]

# --- merge -------------------------------------------------------------------------------

_UNITS_1 = "1"
#: name -> (trailing dims after the grid dims, dtype, long_name, units)


#: The variables of a sweep group, in file order (attributes from :data:`brwsim.schema.VARIABLES`).
_SWEEP_VARIABLES = (
    "point", "family_string", "point_key", "n", "nodes_visited", "mu", "mu2", "mu_se", "mu2_se",
    "h2", "moments_exact", "accepted_sum", "accepted_sumsq", "accepted_mean", "accepted_se",
    "batch", "tokens_per_call", "expected_sum", "expected_sumsq", "expected_mean",
    "expected_se", "depth_sum", "depth_mean", "depth_sumsq", "expected_depth_sum",
    "split_accepted_sum", "split_expected_sum", "split_expected_sumsq", "split_cross_sum",
    "split_expected_mean", "sharing_gain", "sharing_gain_se", "accepted_hist", "paper_bound",
    "prediction", "prediction_se", "upper_bound", "upper_bound_se",
    "upper_bound_point", "step_time",
    "plain_step_time", "speedup", "speedup_se", "best_budget", "best_speedup", "accepted",
    "expected_accepted", "depth",
)

_COST_VARS = frozenset({"step_time", "plain_step_time", "speedup", "speedup_se", "best_budget",
                        "best_speedup"})


def merge(out: Path, cfg: SweepConfig, infos: dict[tuple[int, int], ShardInfo], raw: bool,
           command: str) -> Path:
    """Stream every shard into ``out/results.nc`` (temporary file, then rename)."""
    import netCDF4

    dest = out / RESULTS
    with atomic_netcdf(dest) as tmp, netCDF4.Dataset(tmp, "w", format="NETCDF4") as nc:
        attrs = provenance_attrs(cfg.title, cfg.normalized, cfg.seed, command)
        attrs.update(config_hash=cfg.hash, groups=" ".join(b.label for b in cfg.blocks),
                     summary_only=int(not raw), iterations=cfg.iterations,
                     chunk=cfg.chunk, prediction_method=cfg.prediction)
        if cfg.cost is not None:
            attrs["cost"] = cfg.cost.describe()
            attrs["cost_family"] = ("each point's speedup assumes that point's family "
                                    "(family_string), not a measured workload")
        attrs["input_sha256"] = json.dumps(cfg.input_sha256(), sort_keys=True)
        attrs["shard_code"] = json.dumps(shard_codes(infos))   # most shards first
        nc.setncatts(attrs)
        for block in cfg.blocks:
            _BlockWriter(nc.createGroup(block.label), block, cfg, out, infos, raw).write()
        _flat_view(nc, cfg)
    return dest


#: Per-(point, budget) variables of the root's flat view, copied from the groups when present.
FLAT_VARS = ("accepted_mean", "accepted_se", "expected_mean", "expected_se", "tokens_per_call",
             "depth_mean", "paper_bound", "upper_bound", "upper_bound_se", "prediction")

#: The root group's ``flat_view`` attribute: what its variables are.
FLAT_VIEW = ("every point of every group, flattened: (point, budget) summaries; the groups "
             "hold the grids and the per-tree detail")


def _flat_view(nc: Any, cfg: SweepConfig) -> None:
    """The root group: every point's per-budget summary over dims (point, budget), with its
    group, family string, policy and batch (the dimension ``point`` has no coordinate
    variable: a group's own ``point`` variable must not be shadowed by an inherited one), and with ``[[sweep.policy]]`` the paired
    fraction of the optimum (:func:`brwsim.simulate.paired_fraction`), so that
    ``xr.open_dataset(results.nc)`` shows the answer without ``group=``."""
    n_points = sum(b.n_points for b in cfg.blocks)
    nb = cfg.budgets.size
    cols: dict[str, np.ndarray] = {}
    group = np.empty(n_points, object)
    family = np.empty(n_points, object)
    policy = np.full(n_points, "", object)
    batch = np.ones(n_points, np.int64)
    frac = np.full((n_points, nb), np.nan)
    frac_se = np.full((n_points, nb), np.nan)
    for block in cfg.blocks:
        grp = nc.groups[block.label]
        grid = list(block.grid)
        pts = np.asarray(grp["point"][:]).reshape(-1)
        group[pts] = block.label
        family[pts] = np.asarray(grp["family_string"][:], dtype=object).reshape(-1)
        for name in FLAT_VARS:
            if name in grp.variables:
                cols.setdefault(name, np.full((n_points, nb), np.nan))[pts] = \
                    np.asarray(grp[name][:], dtype=np.float64).reshape(-1, nb)
        if "batch" in grid:
            axis_shape = [-1 if d == "batch" else 1 for d in grid]
            batch[pts] = np.broadcast_to(np.asarray(grp["batch"][:]).reshape(axis_shape),
                                         block.shape).reshape(-1)
        elif "batch" in grp.variables:
            batch[pts] = np.asarray(grp["batch"][:]).reshape(-1)
        if "policy" in grid:
            ax = grid.index("policy")
            names = [str(v) for v in grp["policy"][:]]
            policy[pts] = np.broadcast_to(np.asarray(names, object).reshape(
                [-1 if d == "policy" else 1 for d in grid]), block.shape).reshape(-1)
            ref = next((i for i, v in enumerate(names) if v.startswith("optimal(")), 0)
            per_tree = (np.asarray(grp["expected_accepted"][:], np.float64)
                        if "expected_accepted" in grp.variables else None)
            f, se = paired_fraction(np.asarray(grp["expected_mean"][:], np.float64), ax, ref, per_tree)
            frac[pts], frac_se[pts] = f.reshape(-1, nb), se.reshape(-1, nb)
    nc.setncattr("flat_view", FLAT_VIEW)
    nc.createDimension("point", n_points)
    nc.createDimension("budget", nb)

    def var(name: str, dtype: Any, dims: tuple[str, ...], values: Any, long_name: str, units: str = "") -> None:
        v = nc.createVariable(name, dtype, dims, fill_value=False)
        v.setncatts({"long_name": long_name, **({"units": units} if units else {})})
        v[:] = values

    var("budget", np.int64, ("budget",), cfg.budgets, "draft budget P (tree nodes, root excluded)", "1")
    var("group", str, ("point",), group, "the point's group (family block)")
    var("family_string", str, ("point",), family, "the point's family")
    var("policy", str, ("point",), policy, "the point's drafting policy ('' without [[sweep.policy]])")
    var("batch", np.int64, ("point",), batch, "requests sharing each budget", "1")
    for name, values in cols.items():
        _, _, long_name, units = VARIABLES[name]
        var(name, np.float64, ("point", "budget"), values, long_name, units)
    if (policy != "").any():
        var("fraction_of_optimal", np.float64, ("point", "budget"), frac,
            "E[X|T] of the point's policy over the optimal tree's on the same trees", "1")
        var("fraction_se", np.float64, ("point", "budget"), frac_se,
            "paired standard error of fraction_of_optimal (NaN for a summary-only sweep)", "1")


class _BlockWriter:
    """Writes one block's group: coordinates, then point by point, shard by shard."""

    def __init__(self, grp: Any, block: Block, cfg: SweepConfig, out: Path,
                 infos: dict[tuple[int, int], ShardInfo], raw: bool) -> None:
        self.grp, self.block, self.cfg, self.out, self.raw = grp, block, cfg, out, raw
        self.infos = infos
        points = range(block.first_point, block.first_point + block.n_points)
        self.x_max = max(infos[(p, c)].x_max for p in points for c, _, _ in cfg.chunks())
        self.visited = {p: sum(infos[(p, c)].visited for c, _, _ in cfg.chunks()) for p in points}
        self.vars: dict[str, Any] = {}
        self.notes: list[str] = []
        self.reasons: dict[str, list[str]] = {}

    def write(self) -> None:
        """Define the group and fill it."""
        self._attributes()
        self._coordinates()
        self._variables()
        for local in range(self.block.n_points):
            self._point(local)
        if self.notes:
            self.grp.setncattr("notes", "\n".join(self.notes))
        for name, lines in self.reasons.items():
            if name in self.vars:
                self.vars[name].setncattr("reason", "\n".join(lines))

    def _attributes(self) -> None:
        b = self.block
        kind = b.name or "family strings"
        self.grp.setncatts({
            "title": f"{kind} block {b.index} of the sweep ({b.n_points} points)",
            "family_name": b.name or "family",
            "block_index": b.index,
            "fixed_parameters": json.dumps(b.fixed, sort_keys=True),
            "swept_parameters": " ".join(b.grid),
            "point_range": f"{b.first_point}..{b.first_point + b.n_points - 1}",
        })

    def _coord(self, name: str, values: Sequence[Any] | np.ndarray, long_name: str, units: str) -> None:
        arr = np.asarray(values)
        is_str = arr.dtype.kind in "US"
        dtype: Any = str if is_str else (np.int64 if arr.dtype.kind in "iu" else np.float64)
        self.grp.createDimension(name, arr.size)
        var = self.grp.createVariable(name, dtype, (name,), fill_value=False)
        var.setncatts({"long_name": long_name, **({"units": units} if units and not is_str else {})})
        var[:] = arr.astype(object if is_str else dtype)

    def _coordinates(self) -> None:
        kind = self.block.name or "family"
        for key, values in self.block.grid.items():
            if any(isinstance(v, list) for v in values):      # list-valued: its JSON text
                values = [json.dumps(v) for v in values]
            self._coord(key, values, f"swept parameter {key} of {kind}", _UNITS_1)
        self._coord("budget", self.cfg.budgets, "draft budget P (tree nodes, root excluded)", _UNITS_1)
        if self.raw:
            self._coord("iteration", np.arange(self.cfg.iterations), "independent tree index", _UNITS_1)
        self._coord("accepted_value", np.arange(self.x_max + 1), "value of X counted by accepted_hist",
                    _UNITS_1)

    def _variables(self) -> None:
        grid = tuple(self.block.grid)
        for name in _SWEEP_VARIABLES:
            dims, dtype, long_name, units = VARIABLES[name]
            if (name in RAW_VARS and not self.raw) or (name in THEORY_BUDGET_VARS
                                                        and self.cfg.prediction == "none"):
                continue
            if (name in _COST_VARS and self.cfg.cost is None) or (name == "batch" and name in grid):
                continue
            extra: dict[str, Any] = {}
            if name in RAW_VARS:
                extra = {"zlib": True, "complevel": 1, "shuffle": True,
                         "chunksizes": (1,) * len(grid) + (self.cfg.budgets.size, self.cfg.chunk)}
            var = self.grp.createVariable(name, dtype, grid + dims, fill_value=False, **extra)
            var.setncatts({"long_name": long_name, **({"units": units} if units else {})})
            self.vars[name] = var

    def _point(self, local: int) -> None:
        idx = tuple(int(i) for i in np.unravel_index(local, self.block.shape)) if self.block.grid else ()
        point = self.block.first_point + local

        def put(name: str, value: Any) -> None:
            self.vars[name][idx or Ellipsis] = value

        put("point", point)
        put("family_string", repr(self.block.families[local]))
        put("point_key", self.cfg.point_key(point))
        put("n", self.cfg.iterations)
        if "batch" in self.vars:         # else a grid coordinate
            put("batch", self.block.batch(local))
        put("nodes_visited", self.visited[point])
        self._theory(point, put)
        self._chunks(point, idx, put, self.block.batch(local))

    def _shard(self, point: int, chunk: int) -> Any:
        info = self.infos[(point, chunk)]
        if info.shard is not None:                  # computed by this process
            return info.shard
        ds = load_shard(self.out, self.cfg, point, chunk, self.raw, info.inputs)
        if ds is None:
            path = self.out / "shards" / shard_name(point, chunk)
            path.unlink(missing_ok=True)
            raise UserError(f"{path} became unusable during the merge and was deleted; "
                            "run the same command again to redo it")
        return ds

    def _theory(self, point: int, put: Callable[[str, Any], None]) -> None:
        ds = self._shard(point, THEORY_CHUNK)
        for name in (*THEORY_VARS, "paper_bound"):
            put(name, ds[name])
        for name in ("paper_bound", *THEORY_BUDGET_VARS):
            if name in ds and ds.var_attrs(name).get("reason"):
                self.reasons.setdefault(name, []).append(
                    f"point {point}: NaN: {ds.var_attrs(name)['reason']}")
        put("moments_exact", int(ds.attrs["moments_exact"]))
        for name in THEORY_BUDGET_VARS:
            if name in self.vars:
                put(name, ds[name])
        if ds.attrs.get("note"):
            self.notes.append(f"point {point}: {ds.attrs['note']}")

    def _chunks(self, point: int, idx: tuple[int, ...], put: Callable[[str, Any], None],
                batch: int) -> None:
        nb = self.cfg.budgets.size
        sums: dict[str, list[np.ndarray]] = {name: [] for name, _, _ in (*SUM_VARS, *PRODUCT_SUMS)}
        hist = np.zeros((nb, self.x_max + 1), np.int64)
        for chunk, first, count in self.cfg.chunks():
            ds = self._shard(point, chunk)
            for name, parts in sums.items():
                parts.append(ds[name])
            h = ds["accepted_hist"]
            hist[:, :h.shape[1]] += h
            if self.raw:
                cols = idx + (slice(None), slice(first, first + count))
                for name in RAW_VARS:
                    self.vars[name][cols] = ds[name]
        total = {name: np.array([math.fsum(col) for col in np.stack(parts).T])
                 for name, parts in sums.items()}
        for name, value in total.items():
            put(name, value)
        put("accepted_hist", hist)
        n = self.cfg.iterations
        for prefix in ("accepted", "expected"):
            mean, se = _mean_se(total[f"{prefix}_sum"], total[f"{prefix}_sumsq"], n)
            put(f"{prefix}_mean", mean)
            put(f"{prefix}_se", se)
        put("tokens_per_call", total["accepted_sum"] / (n * batch) + 1.0)
        put("depth_mean", total["depth_sum"] / n)
        self._split(total, n, put)
        if self.cfg.cost is not None:
            self._cost(total, n, batch, put)

    @staticmethod
    def _split(total: dict[str, np.ndarray], n: int, put: Callable[[str, Any], None]) -> None:
        """Equal split's mean and the paired gain of sharing, from the sums."""
        e, s = total["expected_sum"], total["split_expected_sum"]
        ms = s / n
        put("split_expected_mean", ms)
        with np.errstate(divide="ignore", invalid="ignore"):
            gain = np.where(ms > 0, (e / n) / ms, np.nan)
            if n > 1:
                var = (total["expected_sumsq"] - e * e / n - 2 * gain * (total["split_cross_sum"] - e * s / n)
                       + gain ** 2 * (total["split_expected_sumsq"] - s * s / n)) / (n - 1)
                se = np.sqrt(np.maximum(var, 0.0) / n) / ms
            else:
                se = np.full_like(gain, np.nan)
        put("sharing_gain", gain)
        put("sharing_gain_se", se)

    def _cost(self, total: dict[str, np.ndarray], n: int, batch: int,
              put: Callable[[str, Any], None]) -> None:
        """Step time, speedup and P* of the point under ``sweep.cost`` (:mod:`brwsim.plan`)."""

        st = speedup_from_sums(self.cfg.cost, batch, self.cfg.budgets, n, total["expected_sum"],
                               total["expected_sumsq"], total["depth_sum"], total["depth_sumsq"],
                               total["expected_depth_sum"])
        put("step_time", st["step_time"])
        put("plain_step_time", st["plain_step_time"])
        put("speedup", st["speedup"])
        put("speedup_se", st["speedup_se"])
        p_star, i = best_budget(self.cfg.budgets, st["speedup"])
        put("best_budget", int(p_star))
        put("best_speedup", float(st["speedup"][i]) if i >= 0 else 1.0)


def _mean_se(total: np.ndarray, total_sq: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error of the mean from n, the sum and the sum of squares."""
    mean = total / n
    if n < 2:
        return mean, np.full_like(mean, np.nan)
    var = np.maximum(total_sq - total * mean, 0.0) / (n - 1)
    return mean, np.sqrt(var / n)
