"""``plan``: the draft budget that maximises tokens per second, per batch size.

For each batch size B, :func:`brwsim.simulate` grows the optimal shared forests of every
budget P on the same roots; a :class:`~brwsim.cost.CostModel` prices each step (drafting
the forest's depth levels and P nodes, then verifying B + P tokens). Over many steps the
throughput is a renewal-reward ratio,

    tokens/s (B, P) = (B + E[X_F]) / E[step time],

with X_F the accepted tokens of the whole batch (E[X_F | F] per forest, the
Rao-Blackwellised estimator), and plain decoding makes B tokens per call of B tokens.
The speedup is the ratio of the two; P* maximises it over the budgets offered, and is 0
(do not speculate) when no budget beats plain decoding.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from brwsim.cost import CostModel
from brwsim.errors import UserError
from brwsim.families.base import Family
from brwsim.io import provenance_attrs
from brwsim.lazy import xarray as xr
from brwsim.simulate import simulate, validate_batch, validate_budgets

__all__ = ["plan", "plan_from_runs", "speedup_from_sums", "best_budget"]


def _batch_sizes(batch_sizes: Any) -> list[int]:
    if isinstance(batch_sizes, (int, np.integer)) and not isinstance(batch_sizes, bool):
        batch_sizes = [batch_sizes]
    try:
        out = [validate_batch(b) for b in batch_sizes]
    except TypeError:
        raise UserError(f"batch_sizes must be a list of positive integers, got {batch_sizes!r}") from None
    if not out:
        raise UserError("batch_sizes must not be empty")
    if len(set(out)) != len(out):
        raise UserError(f"batch_sizes must be distinct, got {out}")
    return sorted(out)


def plan(family: Family, cost: CostModel, batch_sizes: Sequence[int], budgets: Sequence[int],
         iterations: int, seed: int = 0, *, progress: bool = False, command: str = "") -> xr.Dataset:
    """Optimal budget P*, tokens per call, step time and speedup per batch size.

    Parameters
    ----------
    family : Family
        The next-token distribution family.
    cost : CostModel
        Verifier and drafter costs (:mod:`brwsim.cost`).
    batch_sizes : sequence of int
        Requests per verifier call B.
    budgets : sequence of int
        Draft budgets P offered (nodes over the whole batch, roots excluded).
    iterations : int
        Steps (forests) simulated per batch size.
    seed : int, default 0
        Root seed; every batch size sees the same seed, so request r of iteration i has the
        same root at every B.

    Returns
    -------
    xarray.Dataset
        Over (``batch``, ``budget``): ``speedup`` and ``speedup_se``, ``tokens_per_call``
        (per request, 1 + E[X_F] / B) and its SE, ``step_time`` (mean seconds) and its SE,
        ``depth_mean``, ``sharing_gain`` (E[X | shared] / E[X | equal split], 1 at B = 1)
        and ``tokens_per_second``. Over ``batch``: ``best_budget`` (P*, 0 when plain
        decoding is fastest), ``best_speedup``, ``best_tokens_per_call``,
        ``best_step_time`` (each with ``_se``), ``best_tokens_per_second``,
        ``plain_step_time`` and ``plain_tokens_per_second``. P* is the argmax of the
        Monte Carlo speedup, so it carries the estimate's noise where the curve is flat.
    """
    if not isinstance(family, Family):
        raise UserError(f"family must be a brwsim family, got {family!r}")
    if not isinstance(cost, CostModel):
        raise UserError(f"cost must be a brwsim.cost.CostModel, got {cost!r}")
    sizes = _batch_sizes(batch_sizes)
    b = validate_budgets(budgets)
    runs = [simulate(family, b, iterations, seed, batch=B, progress=progress) for B in sizes]
    out = plan_from_runs(runs, cost)
    config = {"family": repr(family), "budgets": b.tolist(), "iterations": int(iterations),
              "seed": str(int(seed)), "batch": sizes, "cost": cost.describe()}
    out.attrs.update(provenance_attrs(f"brwsim plan: {family!r}", config, int(seed), command))
    out.attrs["family"] = repr(family)
    out.attrs["cost"] = cost.describe()
    return out


def speedup_from_sums(cost: CostModel, batch: int, budgets: np.ndarray, n: int, e_sum: np.ndarray,
                      e_sumsq: np.ndarray, d_sum: np.ndarray, d_sumsq: np.ndarray,
                      ed_sum: np.ndarray) -> dict[str, np.ndarray]:
    """Throughput statistics per budget from sums over n steps of E[X_F | F] (e) and depth (d).

    The step time is linear in the depth, T = a + c d (``c`` the drafter's per-level
    cost), so mean T = a + c mean d, and the renewal-reward rate r = (B + mean e) / mean T
    has the delta-method standard error sd(B + e - r T) / (sqrt(n) mean T), with
    Var(e - r c d) = Var e - 2 r c Cov(e, d) + (r c)^2 Var d from the sums.

    Returns
    -------
    dict
        ``step_time`` (mean s) and ``step_time_se``, ``tokens_per_second`` (whole batch),
        ``speedup`` over plain decoding and ``speedup_se``, ``tokens_per_call`` (per
        request) and ``tokens_per_call_se``, ``plain_step_time`` (scalar).
    """
    B = float(batch)
    p = np.asarray(budgets, np.float64)
    c = cost.drafter.per_level
    a = cost.step_time(B, p, 0.0)
    me, md = e_sum / n, d_sum / n
    t_mean = a + c * md
    plain = float(cost.plain_time(B))
    rate = (B + me) / t_mean
    if n > 1:
        var_e = np.maximum(e_sumsq - e_sum * me, 0.0) / (n - 1)
        var_d = np.maximum(d_sumsq - d_sum * md, 0.0) / (n - 1)
        cov = (ed_sum - e_sum * md) / (n - 1)
        var_r = np.maximum(var_e - 2 * rate * c * cov + (rate * c) ** 2 * var_d, 0.0)
        rate_se = np.sqrt(var_r / n) / t_mean
        t_se = c * np.sqrt(var_d / n)
        e_se = np.sqrt(var_e / n)
    else:
        rate_se = t_se = e_se = np.full(p.shape, np.nan)
    return {"step_time": t_mean, "step_time_se": t_se, "tokens_per_second": rate,
            "speedup": rate * plain / B, "speedup_se": rate_se * plain / B,
            "tokens_per_call": 1.0 + me / B, "tokens_per_call_se": e_se / B,
            "plain_step_time": plain}


def best_budget(budgets: np.ndarray, speedup: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """P* (0 where no budget beats plain decoding) and its index (-1 then) along the last axis."""
    idx = np.argmax(speedup, axis=-1)
    best = np.take_along_axis(speedup, idx[..., None], -1)[..., 0]
    pays = best > 1.0
    return np.where(pays, np.asarray(budgets)[idx], 0), np.where(pays, idx, -1)


def plan_from_runs(runs: Sequence[xr.Dataset], cost: CostModel) -> xr.Dataset:
    """The planning table of :func:`plan` from :func:`simulate` Datasets, one per batch size.

    Each run must hold the same budgets; its ``batch`` attribute (1 when absent) gives B.
    """
    if not runs:
        raise UserError("plan needs at least one run")
    budgets = runs[0]["budget"].values
    sizes = [int(r.attrs.get("batch", 1)) for r in runs]
    if len(set(sizes)) != len(sizes):
        raise UserError(f"runs must have distinct batch sizes, got {sizes}")
    m = budgets.size
    fields = ["speedup", "speedup_se", "tokens_per_call", "tokens_per_call_se", "step_time",
              "step_time_se", "depth_mean", "sharing_gain", "tokens_per_second"]
    curves = {f: np.empty((len(runs), m)) for f in fields}
    plain = np.empty(len(runs))
    for i, (run, B) in enumerate(zip(runs, sizes)):
        if not np.array_equal(run["budget"].values, budgets):
            raise UserError("runs must share the same budgets")
        e = run["expected_accepted"].values.astype(np.float64)          # (budget, iteration)
        d = run["depth"].values.astype(np.float64)
        fs = lambda x: np.array([math.fsum(row) for row in x])          # noqa: E731
        stats = speedup_from_sums(cost, B, budgets, e.shape[1], fs(e), fs(e * e), fs(d), fs(d * d),
                                  fs(e * d))
        plain[i] = stats.pop("plain_step_time")
        for name, value in stats.items():
            curves[name][i] = value
        curves["depth_mean"][i] = d.mean(1)
        if "expected_accepted_split" in run:
            split = run["expected_accepted_split"].values.mean(1)
            with np.errstate(divide="ignore", invalid="ignore"):
                curves["sharing_gain"][i] = np.where(split > 0, e.mean(1) / split, np.nan)
        else:                            # a single tree is its own split
            curves["sharing_gain"][i] = 1.0 if B == 1 else np.nan
    p_star, best = best_budget(budgets, curves["speedup"])
    rows = np.arange(len(runs))
    pays = best >= 0
    pick = lambda f, plain_value: np.where(pays, curves[f][rows, best], plain_value)  # noqa: E731
    dims = ("batch", "budget")
    a = lambda long, units: {"long_name": long, "units": units}  # noqa: E731
    data = {
        "speedup": (dims, curves["speedup"], a("tokens/s over plain decoding's tokens/s", "1")),
        "speedup_se": (dims, curves["speedup_se"], a("standard error of speedup (delta method)", "1")),
        "tokens_per_call": (dims, curves["tokens_per_call"],
                            a("tokens per request per call, 1 + E[X_F] / B", "1")),
        "tokens_per_call_se": (dims, curves["tokens_per_call_se"], a("standard error of tokens_per_call", "1")),
        "step_time": (dims, curves["step_time"], a("mean time of one step (drafting + verifying B + P tokens)", "s")),
        "step_time_se": (dims, curves["step_time_se"], a("standard error of step_time (0: deterministic)", "s")),
        "depth_mean": (dims, curves["depth_mean"], a("mean depth of the optimal shared forest", "1")),
        "sharing_gain": (dims, curves["sharing_gain"],
                         a("E[X | shared budget] / E[X | equal split] on the same roots", "1")),
        "tokens_per_second": (dims, curves["tokens_per_second"], a("tokens per second, whole batch", "s-1")),
        "best_budget": ("batch", p_star,
                        a("P*: budget of the highest speedup (0: plain decoding is fastest)", "1")),
        "best_speedup": ("batch", pick("speedup", 1.0), a("speedup at P*", "1")),
        "best_speedup_se": ("batch", pick("speedup_se", 0.0), a("standard error of best_speedup", "1")),
        "best_tokens_per_call": ("batch", pick("tokens_per_call", 1.0), a("tokens per request per call at P*", "1")),
        "best_tokens_per_call_se": ("batch", pick("tokens_per_call_se", 0.0),
                                    a("standard error of best_tokens_per_call", "1")),
        "best_step_time": ("batch", pick("step_time", plain), a("step time at P*", "s")),
        "best_step_time_se": ("batch", pick("step_time_se", 0.0), a("standard error of best_step_time", "s")),
        "best_tokens_per_second": ("batch", pick("tokens_per_second", np.asarray(sizes) / plain),
                                   a("tokens per second at P*, whole batch", "s-1")),
        "plain_step_time": ("batch", plain, a("time of one plain decoding call of B tokens", "s")),
        "plain_tokens_per_second": ("batch", np.asarray(sizes) / plain,
                                    a("tokens per second of plain decoding, whole batch", "s-1")),
    }
    coords = {"batch": ("batch", np.asarray(sizes, np.int64), a("requests per verifier call B", "1")),
              "budget": ("budget", budgets, a("draft budget P (nodes over the batch, roots excluded)", "1"))}
    return xr.Dataset(data, coords, {"cost": cost.describe()})
