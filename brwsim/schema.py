"""The schema catalogue: every variable brwsim writes, with its dims, dtype, long_name and units.

Simulation Datasets (:func:`brwsim.simulate`), generation runs, sweep results and banks
all take their variables' CF attributes from :data:`VARIABLES`, so a name means the same
thing (and carries the same ``long_name`` and ``units``) in every file brwsim writes.
``dims`` are the variable's trailing dimensions (a sweep prepends its grid, a policy run
a ``policy`` dimension).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from brwsim.lazy import xarray as xr

__all__ = ["Var", "VARIABLES", "attrs", "variable"]

_UNITS_1 = "1"


class Var(NamedTuple):
    """One catalogue entry."""

    dims: tuple[str, ...]
    dtype: Any
    long_name: str
    units: str


VARIABLES: dict[str, Var] = {name: Var(*spec) for name, spec in {

    "point": ((), np.int64, "global index of the parameter point", _UNITS_1),
    "family_string": ((), str, "the point's family in brwsim's string form", ""),
    "point_key": ((), np.uint64, "64-bit root key of the point: SeedSequence(seed, spawn_key=(point,))", _UNITS_1),
    "n": ((), np.int64, "iterations (independent trees) of the point", _UNITS_1),
    "nodes_visited": ((), np.int64, "tree nodes visited by all threshold passes (the work done)", _UNITS_1),
    "mu": ((), np.float64, "mean entropy E[H(q)] (spine step mean)", "nat"),
    "mu2": ((), np.float64, "E[sum_i q_i (log q_i)^2] (spine step second moment)", "nat2"),
    "mu_se": ((), np.float64, "standard error of mu (0 when exact)", "nat"),
    "mu2_se": ((), np.float64, "standard error of mu2 (0 when exact)", "nat2"),
    "h2": ((), np.float64, "E[H(q)^2] (the other reading of the paper's second moment)", "nat2"),
    "moments_exact": ((), np.int8, "1 when mu and mu2 are exact (closed form or quadrature), 0 for Monte Carlo", _UNITS_1),
    "accepted_sum": (("budget",), np.float64, "sum over iterations of X", _UNITS_1),
    "accepted_sumsq": (("budget",), np.float64, "sum over iterations of X^2", _UNITS_1),
    "accepted_mean": (("budget",), np.float64, "mean accepted draft tokens X", _UNITS_1),
    "accepted_se": (("budget",), np.float64, "standard error of accepted_mean", _UNITS_1),
    "batch": ((), np.int64, "requests B sharing each budget (1: a single tree)", _UNITS_1),
    "tokens_per_call": (("budget",), np.float64, "mean tokens per request per verifier call, 1 + X / B (B = 1: tau = X + 1)", _UNITS_1),
    "expected_sum": (("budget",), np.float64, "sum over iterations of E[X | T_P]", _UNITS_1),
    "expected_sumsq": (("budget",), np.float64, "sum over iterations of E[X | T_P]^2", _UNITS_1),
    "expected_mean": (("budget",), np.float64, "mean of E[X | T_P] (Rao-Blackwellised estimate of E[X])", _UNITS_1),
    "expected_se": (("budget",), np.float64, "standard error of expected_mean", _UNITS_1),
    "depth_sum": (("budget",), np.float64, "sum over iterations of the depth of T_P", _UNITS_1),
    "depth_mean": (("budget",), np.float64, "mean depth of the deepest node of the optimal tree", _UNITS_1),
    "depth_sumsq": (("budget",), np.float64, "sum over iterations of depth^2", _UNITS_1),
    "expected_depth_sum": (("budget",), np.float64, "sum over iterations of E[X | T_P] * depth", _UNITS_1),
    "split_accepted_sum": (("budget",), np.float64, "sum of X under the equal split (B = 1: X)", _UNITS_1),
    "split_expected_sum": (("budget",), np.float64, "sum of E[X | equal split] (floor(P/B), remainder to the first requests)", _UNITS_1),
    "split_expected_sumsq": (("budget",), np.float64, "sum of E[X | equal split]^2", _UNITS_1),
    "split_cross_sum": (("budget",), np.float64, "sum of E[X | shared] * E[X | equal split]", _UNITS_1),
    "split_expected_mean": (("budget",), np.float64, "mean E[X | equal split] over the batch", _UNITS_1),
    "sharing_gain": (("budget",), np.float64, "mean E[X | shared] / mean E[X | equal split], paired", _UNITS_1),
    "sharing_gain_se": (("budget",), np.float64, "standard error of sharing_gain (delta method)", _UNITS_1),
    "accepted_hist": (("budget", "accepted_value"), np.int64, "histogram of X: iterations with X = accepted_value", _UNITS_1),
    "paper_bound": (("budget",), np.float64, "paper's bound (mu + mu2) log P / mu^2 with the O(1) term dropped", _UNITS_1),
    "prediction": (("budget",), np.float64, "renewal-theory prediction of E[X] (numerical renewal equation, brwsim.theory.prediction)", _UNITS_1),
    "prediction_se": (("budget",), np.float64, "standard error of the prediction from sampling the spine-step law (0 when exact)", _UNITS_1),
    "upper_bound": (("budget",), np.float64, "proven upper bound on E[X]: min_t U(t) + e^-t (P - M(t)) on the floor-discretised spine law, or a context-dependent family's own spine (brwsim.theory.upper_bound); where the spine law is sampled, at confidence 1 - alpha with alpha = 0.001: upper_bound_point + t quantile (9 degrees of freedom for 10 batches) x upper_bound_se; NaN with attribute reason where none is proven", _UNITS_1),
    "upper_bound_se": (("budget",), np.float64, "standard error of upper_bound_point from sampling the spine-step law (0 when exact)", _UNITS_1),
    "upper_bound_point": (("budget",), np.float64, "the Lagrangian minimum of the (sampled) spine law itself: an estimate of the bound, below it about half the time where the law is sampled; equal to upper_bound where the law is exact", _UNITS_1),
    "step_time": (("budget",), np.float64, "mean time of one step under sweep.cost (drafting + verifying B + P tokens)", "s"),
    "plain_step_time": ((), np.float64, "time of one plain decoding call of B tokens under sweep.cost", "s"),
    "speedup": (("budget",), np.float64, "tokens/s over plain decoding's under sweep.cost", _UNITS_1),
    "speedup_se": (("budget",), np.float64, "standard error of speedup (delta method)", _UNITS_1),
    "best_budget": ((), np.int64, "P*: budget of the highest speedup (0: plain decoding is fastest)", _UNITS_1),
    "best_speedup": ((), np.float64, "speedup at P* (1 when P* = 0)", _UNITS_1),
    "accepted": (("budget", "iteration"), np.int32, "accepted draft tokens X (sampled target path inside the optimal tree)", _UNITS_1),
    "expected_accepted": (("budget", "iteration"), np.float64, "E[X | T_P]: sum of path probabilities over the optimal tree", _UNITS_1),
    "depth": (("budget", "iteration"), np.int32, "depth of the deepest node of the optimal tree", _UNITS_1),
    "expected_accepted_split": (("budget", "iteration"), np.float64, "E[X | split] summed over the batch under the equal split", _UNITS_1),
    "accepted_split": (("budget", "iteration"), np.int32, "accepted draft tokens summed over the batch under the equal split (request r: its optimal tree of floor(P/B) + (r < P mod B) nodes)", _UNITS_1),
    "prediction_asymptotic": (("budget",), np.float64, "key-renewal-theorem asymptotic of E[X] (NaN on lattices)", _UNITS_1),
    "root_context": (("call",), np.int64, "context of the call's root (regime, depth index)", _UNITS_1),
    "root_latent": (("call",), np.float64, "latent context value of the call's root (AR(1))", _UNITS_1),
    "probs": (("position", "rank"), np.float64, "top-k next-token probabilities, sorted in descending order, zero padded", _UNITS_1),
    "tail_mass": (("position",), np.float64, "probability outside the stored top-k entries", _UNITS_1),
    "sampled_rank": (("position",), np.int64, "rank of the sampled token (0 = most likely; -1 = unknown or outside the top-k)", _UNITS_1),
    "sequence": (("position",), np.int64, "index of the generation (response choice or npz sequence) the position belongs to", _UNITS_1),
    "entropy_lower": (("position",), np.float64, "lower bound of the next-token entropy -sum q log q", "nat"),
    "entropy_upper": (("position",), np.float64, "upper bound of the next-token entropy -sum q log q (inf: unbounded without a vocabulary size)", "nat"),
    "mu2_lower": (("position",), np.float64, "lower bound of the second log-moment sum q (log q)^2", "nat2"),
    "mu2_upper": (("position",), np.float64, "upper bound of the second log-moment sum q (log q)^2 (inf: unbounded without a vocabulary size)", "nat2"),
}.items()}


def attrs(name: str, **override: str) -> dict[str, str]:
    """The CF attributes (``long_name`` and, when set, ``units``) of catalogue variable ``name``."""
    v = VARIABLES[name]
    out = {"long_name": v.long_name, **({"units": v.units} if v.units else {})}
    out.update(override)
    return out


def variable(name: str, data: Any, dims: tuple[str, ...] | None = None, **override: str
             ) -> xr.Variable:
    """An ``xarray.Variable`` of catalogue variable ``name`` (dims default to the catalogue's)."""
    return xr.Variable(VARIABLES[name].dims if dims is None else dims, np.asarray(data),
                       attrs(name, **override))
