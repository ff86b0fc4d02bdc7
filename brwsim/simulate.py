"""``simulate``: optimal draft trees on a family, recorded into an xarray Dataset."""

from __future__ import annotations

import contextlib
import functools
import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from brwsim import beside
from brwsim.engine import (
    compile_pass_callees,
    first_run,
    run_forest,
    run_iterations,
    seed_key,
    validate_batch,
    validate_budgets,
)
from brwsim.environment import node_logprobs
from brwsim.errors import UserError
from brwsim.families.base import Family, Spec
from brwsim.io import provenance_attrs
from brwsim.lazy import xarray as xr
from brwsim.policies import Optimal, Policy, parse_policy
from brwsim.schema import variable
from brwsim.theory import (
    CURVES,
    check_family,
    paper_bound,
    paper_bound_reason,
    small_budget_bound,
    theory_curves,
)
from brwsim.validate import check_int, check_work_size, echo

# validate_budgets .. run_forest live in brwsim.engine and are re-exported here
__all__ = ["simulate", "summarize", "policy_gap", "paired_fraction", "predictions", "make_dataset",
           "validate_budgets", "validate_batch", "seed_key", "run_iterations", "run_forest",
           "NODES_PER_CALL", "iterations_per_call"]

_CHUNK = 256
#: Most tree nodes (iterations x largest budget) one kernel call grows: a compiled kernel
#: holds the interpreter until it returns, so Ctrl-C is answered between calls.
NODES_PER_CALL = 1 << 16


def iterations_per_call(p_max: int, most: int = _CHUNK) -> int:
    """Iterations of one kernel call at largest budget ``p_max`` (at least 1, at most
    ``most``): about :data:`NODES_PER_CALL` nodes, so a call returns within a fraction of a
    second on the i.i.d. families and SIGINT is answered promptly (results do not depend on
    it: randomness is a function of the key and the iteration)."""
    return max(1, min(most, NODES_PER_CALL // max(int(p_max), 1)))
#: Bytes per (policy, budget, iteration) result: accepted (int32), expected (float64), depth (int32).
_BYTES_PER_RESULT = 16


def simulate(family: Family, budgets: Sequence[int] | np.ndarray, iterations: int, seed: int = 0,
             *, batch: int = 1, policies: Sequence[Any] | None = None, progress: bool = False,
             command: str = "") -> xr.Dataset:
    """Optimal trees of every budget on ``iterations`` independent roots of ``family``.

    One best-first (threshold) pass per iteration serves every budget: the optimal trees
    are nested. Randomness is a function of (seed, iteration, node path), so the numbers
    for a given (seed, iteration, budget) never depend on the other budgets, the
    iteration order or how the work is split.

    Parameters
    ----------
    family : Family
        The next-token distribution family (e.g. ``Dirichlet(0.05, 200)``).
    budgets : sequence of int
        Draft budgets P (tree sizes, root excluded); stored sorted and distinct.
    iterations : int
        Number of independent trees.
    seed : int, default 0
        Root seed (any non-negative integer).
    batch : int, default 1
        Requests per verifier call B. Each iteration then has B independent roots (request
        r's root key is a function of (seed, iteration, r) only; request 0's is the
        single-tree root) and the budget P counts draft nodes over the whole batch: the
        optimal allocation is the top P by path probability over the forest. ``accepted``
        and ``expected_accepted`` are batch totals and ``depth`` the deepest node of the
        forest; ``accepted_split`` and ``expected_accepted_split`` hold the equal split on
        the same roots (request r gets its own optimal tree of floor(P/B) + (r < P mod B)
        nodes). The per-budget theory curves of a single tree (``paper_bound``,
        ``prediction``, ...) are omitted for B > 1. ``batch=1`` is exactly the single tree.
        Not combinable with ``policies``.
    policies : sequence of Policy or str, optional
        Drafting policies (:mod:`brwsim.policies`, or their string forms) evaluated on the
        same environment and sampled paths; adds a leading ``policy`` dimension (labelled
        by the string forms). Without it, the optimal tree only and no policy dimension.
    progress : bool, default False
        Show a tqdm progress bar.
    command : str, optional
        Recorded in the ``history`` attribute.

    Returns
    -------
    xarray.Dataset
        Dims ``budget``, ``iteration``; variables ``accepted`` (sampled X),
        ``expected_accepted`` (E[X | T_P] = sum of path probabilities over T_P),
        ``depth`` (deepest node of T_P), ``mu``, ``mu2``, ``mu_se``, ``mu2_se``,
        ``h2`` (E[H**2]) and ``paper_bound`` (per budget).
    """
    if not isinstance(family, Family):
        raise UserError(f"family must be a brwsim family, got {family!r}")
    b = validate_budgets(budgets)
    iterations = check_int("iterations", iterations, 1)
    key = seed_key(seed)
    batch = validate_batch(batch)
    greedy = getattr(family, "batched", False) and family.temperature == 0
    spec = None if greedy else check_family(family)     # T = 0 has no spine law to check
    if batch > 1 and getattr(family, "batched", False):
        raise UserError(f"batch > 1 is not supported with backend={family.backend} yet")
    if batch > 1:
        if policies is not None:
            raise UserError("policies are not supported with batch > 1 (only the optimal allocation)")
        return _simulate_batch(family, spec, b, iterations, int(seed), key, batch, progress,
                               command)
    if getattr(family, "batched", False):
        return _simulate_rounds(family, b, iterations, int(seed), policies, progress, command)
    pols = _policies(policies)
    for pol in pols:
        pol.check(spec)
    check_work_size(len(pols) * b.size * float(iterations) * _BYTES_PER_RESULT,
                    f"simulate: {len(pols)} policies x {b.size} budgets x {iterations} iterations",
                    "use fewer iterations or budgets, or a sweep (brwsim sweep --summary-only)")
    # the optimal tree (capped or not) calls the kernel directly, its threshold carried over
    caps = [p.depth_cap if isinstance(p, Optimal) else None for p in pols]
    shape = (len(pols), b.size, iterations)
    acc = np.empty(shape, np.int32)
    exp = np.empty(shape)
    dep = np.empty(shape, np.int32)
    t = [math.nan] * len(pols)
    bar = None
    # on a cold cache a second process compiles what the tree kernel calls first and last,
    # and the theory's kernels, beside the trees (forked before the progress bar's thread)
    with beside.compiling(_beside_trees, family, spec, b, when=first_run()):
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=iterations, unit="tree", desc=repr(family)[:40])
        step = iterations_per_call(int(b[-1]))
        for first in range(0, iterations, step):
            count = min(step, iterations - first)
            cols = slice(first, first + count)
            for i, (pol, cap) in enumerate(zip(pols, caps)):
                if cap is not None:
                    acc[i, :, cols], exp[i, :, cols], dep[i, :, cols], _, t[i] = run_iterations(
                        spec, b, key, first, count, t[i], cap)
                else:
                    acc[i, :, cols], exp[i, :, cols], dep[i, :, cols] = pol.run(spec, b, key, first,
                                                                                count)
            if bar is not None:
                bar.update(count)
    if bar is not None:
        bar.close()
    if policies is None:
        acc, exp, dep = acc[0], exp[0], dep[0]
    config = {"family": repr(family), "budgets": b.tolist(), "iterations": int(iterations),
              "seed": str(int(seed))}
    ds = make_dataset(family, b, acc, exp, dep, config, int(seed), command,
                      policies=None if policies is None else [repr(p) for p in pols])
    return _with_policy_inputs(ds, pols)


def _beside_trees(family: Family, spec: Spec, budgets: np.ndarray) -> None:
    """What a process beside a cold run compiles (:mod:`brwsim.beside`), in the order that
    keeps ahead of the run: the family's node sampler, which the tree kernel needs first
    (through :func:`~brwsim.environment.node_logprobs`, which calls it with the tree's
    types); what the tree calls once a pass is done, which it needs last; then what the
    run needs after the trees: the small-P bound (the CLI's column; at the smallest
    budget) and the theory's curves (:func:`predictions`). A step that fails (a family
    without a small-P bound) is left to the run."""
    for step in (lambda: node_logprobs(spec, 0, 0, (0,)),
                 lambda: compile_pass_callees(spec, budgets),
                 lambda: small_budget_bound(family, budgets[:1]),
                 lambda: predictions(family, budgets)):
        with contextlib.suppress(Exception):
            step()


def _with_policy_inputs(ds: xr.Dataset, pols: list) -> xr.Dataset:
    """Record the policies' input files (a draft model's checkpoint) beside the family's."""
    inputs = {k: v for p in pols for k, v in p.input_files().items()}
    if inputs:
        inputs.update(json.loads(ds.attrs.get("input_sha256", "{}")))
        ds.attrs["input_sha256"] = json.dumps(inputs, sort_keys=True)
    return ds


def _simulate_rounds(family: Family, b: np.ndarray, iterations: int, seed: int,
                     policies: Sequence[Any] | None, progress: bool, command: str) -> xr.Dataset:
    """:func:`simulate` of a family whose trees a batched backend builds in rounds
    (``family.batched_trees``, :mod:`brwsim.backends.rounds`); policies other than the
    optimal tree draft on the same roots (:meth:`~brwsim.policies.base.Policy.run_batched`)."""
    pols = _policies(policies)
    key = seed_key(seed)
    optimal = repr(Optimal())
    for pol in pols:
        if repr(pol) != optimal:
            pol.check_batched(family)
    shape = (len(pols), b.size, iterations)
    acc, exp, dep = np.empty(shape, np.int32), np.empty(shape), np.empty(shape, np.int32)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=iterations, unit="root", desc=repr(family)[:40])
    for it in range(iterations):
        for i, pol in enumerate(pols):
            run = family.batched_trees if repr(pol) == optimal else functools.partial(pol.run_batched, family)
            acc[i, :, it:it + 1], exp[i, :, it:it + 1], dep[i, :, it:it + 1] = run(b, key, it, 1)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    if policies is None:
        acc, exp, dep = acc[0], exp[0], dep[0]
    config = {"family": repr(family), "budgets": b.tolist(), "iterations": int(iterations),
              "seed": str(seed)}
    # greedy decoding (T = 0): X = P for the optimal tree, no renewal theory to compare
    ds = make_dataset(family, b, acc, exp, dep, config, seed, command,
                      policies=None if policies is None else [repr(p) for p in pols],
                      theory=True)
    return _with_policy_inputs(ds, pols)


def _simulate_batch(family: Family, spec: Spec, b: np.ndarray, iterations: int, seed: int,
                    key: np.uint64, batch: int, progress: bool, command: str) -> xr.Dataset:
    """:func:`simulate` for ``batch`` > 1: shared-budget forests and the equal split."""
    shape = (b.size, iterations)
    acc, exp, dep = np.empty(shape, np.int32), np.empty(shape), np.empty(shape, np.int32)
    acc_s, exp_s = np.empty(shape, np.int32), np.empty(shape)
    t = math.nan
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=iterations, unit="forest", desc=repr(family)[:40])
    chunk = iterations_per_call(int(b[-1]), max(1, _CHUNK // batch))
    for first in range(0, iterations, chunk):
        count = min(chunk, iterations - first)
        cols = slice(first, first + count)
        acc[:, cols], exp[:, cols], dep[:, cols], acc_s[:, cols], exp_s[:, cols], _, _, t = \
            run_forest(spec, b, key, first, count, batch, t)
        if bar is not None:
            bar.update(count)
    if bar is not None:
        bar.close()
    config = {"family": repr(family), "budgets": b.tolist(), "iterations": int(iterations),
              "seed": str(seed), "batch": batch}
    ds = make_dataset(family, b, acc, exp, dep, config, seed, command, theory=False)
    return add_batch_variables(ds, batch, acc_s, exp_s)


def add_batch_variables(ds: xr.Dataset, batch: int, acc_split: np.ndarray,
                        exp_split: np.ndarray) -> xr.Dataset:
    """Mark ``ds`` as a batch-``batch`` forest Dataset and add the equal split's variables.

    Drops the single-tree theory curves (variables over ``budget`` alone), which do not
    describe a shared budget; relabels ``accepted``, ``expected_accepted`` and ``depth``.
    """
    dims = ds["accepted"].dims
    ds = ds.drop_vars([v for v in ds.data_vars if ds[v].dims == ("budget",)])
    ds["accepted"].attrs["long_name"] = ("accepted draft tokens summed over the batch (each "
                                         "request's sampled path inside its share of the forest)")
    ds["expected_accepted"].attrs["long_name"] = ("E[X | F_P] summed over the batch: path "
                                                  "probabilities over the optimal shared forest")
    ds["depth"].attrs["long_name"] = "depth of the deepest node of the optimal shared forest"
    ds["accepted_split"] = variable("accepted_split", acc_split, dims)
    ds["expected_accepted_split"] = variable("expected_accepted_split", exp_split, dims)
    ds.attrs["batch"] = int(batch)
    ds.attrs["title"] = ds.attrs.get("title", "") + f" (batch of {batch} sharing each budget)"
    return ds


def _policies(policies: Sequence[Any] | None) -> list[Any]:
    """Policies from objects or string forms (``[Optimal()]`` when None)."""

    if policies is None:
        return [Optimal()]
    if isinstance(policies, (str, Policy)):
        policies = [policies]
    out = [parse_policy(p) if isinstance(p, str) else p for p in policies]
    for p in out:
        if not isinstance(p, Policy):
            raise UserError(f"policies must be brwsim policies or their string forms, got {p!r}")
    if not out:
        raise UserError("policies must not be empty")
    labels = [repr(p) for p in out]
    if len(set(labels)) != len(labels):
        raise UserError(f"policies must be distinct, got {labels}")
    return out


def make_dataset(family: Family, budgets: np.ndarray, acc: np.ndarray, exp: np.ndarray,
                 dep: np.ndarray, config: dict[str, Any], seed: int, command: str = "",
                 policies: list[str] | None = None, theory: bool = True) -> xr.Dataset:
    """Wrap per-iteration arrays, the family's moments and the paper's bound in a Dataset.

    With ``policies`` (labels) the arrays carry a leading ``policy`` dimension. With
    ``theory`` False the single-tree theory curves over ``budget`` are neither computed
    nor stored (batch forests, which they do not describe).
    """

    mom = family.memoized("moments", family.moments)     # seconds for a sampled family
    nan = np.full(budgets.shape, np.nan)
    reasons = {}
    if theory:
        pred, reasons = predictions(family, budgets, with_reasons=True)
    else:
        pred = {k: nan for k in CURVES}
    n_it = acc.shape[-1]
    coords = {"budget": ("budget", budgets, {"long_name": "draft budget P (tree nodes, root excluded)",
                                             "units": "1"}),
              "iteration": ("iteration", np.arange(n_it), {"long_name": "independent tree index",
                                                           "units": "1"})}
    dims = ("budget", "iteration")
    if policies is not None:
        coords["policy"] = ("policy", policies, {"long_name": "drafting policy (string form)", "units": "1"})
        dims = ("policy",) + dims
    data = {name: variable(name, arr, dims) for name, arr in
            (("accepted", acc), ("expected_accepted", exp), ("depth", dep))}
    for name in ("mu", "mu2", "mu_se", "mu2_se", "h2"):
        data[name] = variable(name, getattr(mom, name))
    why = paper_bound_reason(family)
    if why is None:
        data["paper_bound"] = variable("paper_bound", paper_bound(mom.mu, mom.mu2, budgets))
    else:
        data["paper_bound"] = variable("paper_bound", nan, reason=why)
    for name in CURVES:
        extra = {"reason": reasons[name]} if name in reasons else {}
        data[name] = variable(name, pred[name], **extra)
    if not theory:
        data = {k: v for k, v in data.items() if v.dims != ("budget",)}
    attrs = provenance_attrs(f"brwsim optimal draft trees: {family!r}", config, seed, command)
    attrs["family"] = repr(family)
    inputs = family.input_files()
    if inputs:                            # a bank, corpus or weights file: its SHA-256 by path
        attrs["input_sha256"] = json.dumps(inputs, sort_keys=True)
    attrs["moments_exact"] = int(mom.exact)
    return xr.Dataset(data, coords, attrs)


def predictions(family: Family, budgets: np.ndarray, *, with_reasons: bool = False):
    """The renewal predictions and the proven bound per budget (NaN where they do not apply).

    A context-dependent family gets its own proven bound where the theory has one
    (:mod:`brwsim.theory.contextual`) and NaN otherwise: never a value of its i.i.d.
    marginal law.

    Returns
    -------
    dict
        ``prediction``, ``prediction_se`` (numerical prediction and its standard error from
        sampling the spine law, 0 when exact), ``prediction_asymptotic`` (NaN on lattices),
        ``upper_bound`` and ``upper_bound_se``; see :mod:`brwsim.theory`. With
        ``with_reasons``, a pair: that dict and the reason of every NaN variable.
    """
    curves = family.memoized(f"theory:{budgets.tolist()}", lambda: theory_curves(family, budgets))
    out = dict(curves.values)
    return (out, dict(curves.reasons)) if with_reasons else out


def summarize(ds: xr.Dataset) -> xr.Dataset:
    """Per-budget means and standard errors of a simulate() Dataset.

    For a batch Dataset (attribute ``batch`` = B > 1) the means are batch totals, and the
    per-request and equal-split statistics are added.

    Returns
    -------
    xarray.Dataset
        ``accepted_mean``, ``accepted_se``, ``expected_mean``, ``expected_se``,
        ``tokens_per_call`` (tokens per request per call, 1 + mean X / B; B = 1: tau = X + 1),
        ``depth_mean`` over the ``iteration`` dim. For B > 1 also
        ``accepted_per_request``, ``expected_per_request`` (and their ``_se``),
        ``tokens_per_batch_call`` (mean X + B), ``split_expected_mean``,
        ``split_expected_se``, ``split_accepted_mean``, ``sharing_gain`` (mean E[X | shared]
        / mean E[X | split], paired on the same roots) and ``sharing_gain_se``.

    Raises
    ------
    brwsim.errors.UserError
        When ``ds`` is not a :func:`simulate` Dataset (no ``iteration`` dimension or no
        ``accepted``, ``expected_accepted``, ``depth`` variables).
    """
    if not isinstance(ds, xr.Dataset):
        raise UserError(f"summarize needs an xarray.Dataset from simulate(), got {echo(ds)}")
    missing = [v for v in ("accepted", "expected_accepted", "depth") if v not in ds]
    if missing or "iteration" not in ds.dims:
        what = f"variables {', '.join(missing)}" if missing else "an 'iteration' dimension"
        raise UserError(f"summarize needs a Dataset from simulate(); this one has no {what}")
    n = ds.sizes["iteration"]
    root_n = math.sqrt(n)
    se = lambda v: ds[v].std("iteration", ddof=1) / root_n if n > 1 else ds[v].mean("iteration") * np.nan  # noqa: E731
    out = xr.Dataset({
        "accepted_mean": ds["accepted"].mean("iteration"),
        "accepted_se": se("accepted"),
        "expected_mean": ds["expected_accepted"].mean("iteration"),
        "expected_se": se("expected_accepted"),
        "depth_mean": ds["depth"].mean("iteration"),
    })
    batch = int(ds.attrs.get("batch", 1))
    out["tokens_per_call"] = out["accepted_mean"] / batch + 1.0
    if batch > 1 and "expected_accepted_split" in ds:
        for name in ("accepted", "expected"):
            out[f"{name}_per_request"] = out[f"{name}_mean"] / batch
            out[f"{name}_per_request_se"] = out[f"{name}_se"] / batch
        out["tokens_per_batch_call"] = out["accepted_mean"] + float(batch)
        out["split_accepted_mean"] = ds["accepted_split"].mean("iteration")
        out["split_expected_mean"] = ds["expected_accepted_split"].mean("iteration")
        out["split_expected_se"] = se("expected_accepted_split")
        e, s = ds["expected_accepted"], ds["expected_accepted_split"]
        safe = out["split_expected_mean"].where(out["split_expected_mean"] > 0)
        gain = out["expected_mean"] / safe
        resid = e - gain * s
        out["sharing_gain"] = gain
        out["sharing_gain_se"] = (resid.std("iteration", ddof=1) / (root_n * safe) if n > 1
                                  else gain * np.nan)
    return out


def paired_fraction(mean: np.ndarray, axis: int, reference: int,
                    per_tree: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each policy's mean E[X | T] as a fraction of the reference policy's, and its paired SE.

    Parameters
    ----------
    mean : ndarray
        Mean E[X | T], with a policy axis ``axis``.
    axis : int
        The policy axis of ``mean`` (and of ``per_tree``).
    reference : int
        The reference policy's index along ``axis`` (the optimal tree).
    per_tree : ndarray, optional
        E[X | T] per tree, ``mean``'s shape with a last axis of trees (the same trees under
        every policy). Without it the SE is NaN: a paired SE needs the pairs.

    Returns
    -------
    fraction, se : ndarray
        ``mean / mean_ref`` and ``sd(a - f b) / (sqrt(n) mean_ref)`` (the delta method on
        the paired means, as :func:`policy_gap`); NaN where the reference mean is 0.
    """
    ref = np.take(mean, [reference], axis=axis)
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(ref > 0, mean / ref, np.nan)
        se = np.full(frac.shape, np.nan)
        if per_tree is not None and per_tree.shape[-1] > 1:
            n = per_tree.shape[-1]
            resid = per_tree - frac[..., None] * np.take(per_tree, [reference], axis=axis)
            se = resid.std(axis=-1, ddof=1) / (math.sqrt(n) * ref)
    return frac, se


def policy_gap(ds: xr.Dataset, reference: int = 0) -> xr.Dataset:
    """Each policy's E[X | T] as a fraction of a reference policy's, paired on the same trees.

    Parameters
    ----------
    ds : xarray.Dataset
        A :func:`simulate` Dataset with a ``policy`` dimension (``policies=`` given).
    reference : int
        Index of the reference policy along ``policy`` (0: the first, ``optimal()`` when
        policies are listed as the CLI does).

    Returns
    -------
    xarray.Dataset
        ``expected_mean``, ``fraction_of_optimal`` = mean E[X|T] / reference mean E[X|T] and
        its standard error ``fraction_se`` (delta method on the paired means:
        ``sd(a - r b) / (sqrt(n) mean b)``), over (policy, budget); NaN where the reference
        mean is 0 or there is one iteration.
    """
    if "policy" not in ds.dims:
        raise UserError("policy_gap needs a Dataset with a policy dimension (simulate(policies=...))")
    e = ds["expected_accepted"]
    n = ds.sizes["iteration"]
    mean = e.mean("iteration")
    ref, ref_mean = e.isel(policy=reference), mean.isel(policy=reference)
    safe = ref_mean.where(ref_mean > 0)
    frac = mean / safe
    resid = e - frac * ref
    se = resid.std("iteration", ddof=1) / (math.sqrt(n) * safe) if n > 1 else frac * np.nan
    return xr.Dataset({"expected_mean": mean, "fraction_of_optimal": frac, "fraction_se": se})

