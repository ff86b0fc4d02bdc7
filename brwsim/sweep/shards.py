"""Sweep tasks and their shards: what a worker runs and the file it leaves behind.

A task is keyed by ``(point, chunk)``: a chunk of iterations of one parameter point
(:class:`ChunkTask`), or the point's theory (:class:`TheoryTask`: moments, the paper's
bound, the renewal prediction; chunk ``-1``). A worker runs the task and writes one shard,
``shards/p<point>_c<chunk>.nc`` or ``shards/p<point>_theory.nc``, atomically through
:func:`brwsim.sweep.shardfile.write_shard`. Shards carry the configuration hash, their key,
their shape and the code that wrote them (``git_commit``, ``brwsim_version``:
:func:`shard_code`) in attributes, Fletcher-32 checksums on every array variable and a
SHA-256 (attribute ``checksum_sha256``, :func:`brwsim.sweep.shardfile.digest`) of every
variable's values, every coordinate and every other attribute (``nodes_visited``,
``x_max``, ...), so :func:`read_shard` can tell a complete shard of this sweep from a
corrupt, partial, edited or foreign one.

Chunk shards hold exact sufficient statistics per budget (sums and sums of squares, each
summed with :func:`math.fsum`, and the histogram of X), plus the raw per-iteration arrays
unless the sweep is summary-only.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from brwsim.engine import run_forest, run_iterations
from brwsim.families.base import Family, Spec
from brwsim.interrupt import worker_guard
from brwsim.io import code_attrs
from brwsim.policies import Optimal, parse_policy, run_policy
from brwsim.simulate import iterations_per_call
from brwsim.sweep.shardfile import DIGEST, Shard, Variable, digest, read_shard_file, seal, write_shard
from brwsim.theory import paper_bound, paper_bound_reason, theory_curves

__all__ = ["ChunkTask", "TheoryTask", "TaskResult", "run_task", "compute_task", "read_shard",
           "shard_name", "shard_code", "running_code", "point_inputs", "changed_inputs", "SHARD_FORMAT",
           "RAW_VARS", "SUM_VARS", "PRODUCT_SUMS", "THEORY_VARS"]

SHARD_FORMAT = 3      # 3: the SHA-256 covers the arrays too
THEORY_CHUNK = -1
RAW_VARS = ("accepted", "expected_accepted", "depth")
#: Per-budget sums in chunk shards: (name, source raw variable, squared?)
SUM_VARS = (("accepted_sum", "accepted", False), ("accepted_sumsq", "accepted", True),
            ("expected_sum", "expected_accepted", False), ("expected_sumsq", "expected_accepted", True),
            ("depth_sum", "depth", False))
#: Further per-budget sums: (name, source, other source or None): sum of x or of x * y.
#: The depth moments price a step with a per-level drafter cost (brwsim.plan); the split
#: sums give the equal split's mean and the paired gain of sharing (batch points; at
#: B = 1 the split is the tree itself).
PRODUCT_SUMS = (("depth_sumsq", "depth", "depth"), ("expected_depth_sum", "expected_accepted", "depth"),
                ("split_accepted_sum", "accepted_split", None),
                ("split_expected_sum", "expected_accepted_split", None),
                ("split_expected_sumsq", "expected_accepted_split", "expected_accepted_split"),
                ("split_cross_sum", "expected_accepted", "expected_accepted_split"))
THEORY_VARS = ("mu", "mu2", "mu_se", "mu2_se", "h2")
#: Per-budget theory variables of a theory shard (absent when the prediction is "none").
THEORY_BUDGET_VARS = ("prediction", "prediction_se", "upper_bound", "upper_bound_se",
                      "upper_bound_point")
def shard_name(point: int, chunk: int) -> str:
    """File name of the shard of task ``(point, chunk)`` (chunk -1: the theory shard)."""
    return f"p{point:07d}_theory.nc" if chunk == THEORY_CHUNK else f"p{point:07d}_c{chunk:06d}.nc"


@dataclass(frozen=True)
class ChunkTask:
    """Iterations ``first .. first + count - 1`` of one point.

    Attributes
    ----------
    point, chunk : int
        The task key.
    first, count : int
        Global iteration numbers within the point.
    key : int
        The point's 64-bit root key.
    budgets : numpy.ndarray
    spec : Spec
        The point's compiled family.
    path : str
        Shard destination.
    config_hash : str
    raw : bool
        Keep the per-iteration arrays in the shard.
    batch : int
        Requests sharing each budget (forests of ``batch`` roots when > 1).
    policy : str
        A drafting policy's string form (``""``: the optimal tree), run on the point's
        roots by :func:`brwsim.policies.run_policy`.
    inputs : str
        :func:`point_inputs` of the point: the SHA-256 of every file its family and policy
        read (part of the shard's identity: a shard of other inputs is not reused).
    driver : str
        :func:`brwsim.interrupt.driver_tag` of the sweep's driver: a worker process
        ignores SIGINT and ends when that process is gone (:func:`brwsim.interrupt.worker_guard`).
    family : Family or None
        A family whose trees a batched backend builds (``transformer(backend=numpy|torch)``;
        ``spec`` is None then): the worker evaluates it, loading its model once per process.
    """

    point: int
    chunk: int
    first: int
    count: int
    key: int
    budgets: np.ndarray
    spec: Spec | None
    path: str
    config_hash: str
    raw: bool
    batch: int = 1
    policy: str = ""
    inputs: str = ""
    driver: str = ""
    family: Family | None = None


@dataclass(frozen=True)
class TheoryTask:
    """Moments, paper's bound and (unless ``method == "none"``) the prediction of one point."""

    point: int
    family: Family
    budgets: np.ndarray
    method: str
    path: str
    config_hash: str
    inputs: str = ""
    driver: str = ""

    @property
    def chunk(self) -> int:
        """Always :data:`THEORY_CHUNK`."""
        return THEORY_CHUNK


@dataclass(frozen=True)
class TaskResult:
    """What the driver learns from a finished task (the data are in the shard).

    Attributes
    ----------
    point, chunk : int
        The task key.
    x_max : int
        Largest sampled X in the shard (-1 for a theory shard).
    visited : int
        Nodes visited by the threshold passes (0 for a theory shard).
    tree_nodes : int
        Optimal-tree nodes simulated: ``count * max(budgets)``.
    seconds : float
        Wall time of the task in its worker.
    code : str
        The code that ran it (:func:`running_code` in the worker).
    """

    point: int
    chunk: int
    x_max: int
    visited: int
    tree_nodes: int
    seconds: float
    code: str


def run_task(task: ChunkTask | TheoryTask) -> TaskResult:
    """Run one task in a worker and write its shard; returns a small :class:`TaskResult`."""
    start = time.perf_counter()
    res, shard = compute_task(task)
    write_shard(shard, task.path)
    return dataclasses.replace(res, seconds=time.perf_counter() - start)


def compute_task(task: ChunkTask | TheoryTask) -> tuple[TaskResult, Shard]:
    """Run one task; its result and its sealed shard, not yet written (``task.path`` is
    where it belongs). :func:`run_task` writes it at once; a sweep's driver hands it to a
    :class:`brwsim.sweep.shardfile.ShardWriter`."""
    worker_guard(task.driver)
    start = time.perf_counter()
    if isinstance(task, TheoryTask):
        shard = _theory_shard(task)
        return (TaskResult(task.point, task.chunk, -1, 0, 0, time.perf_counter() - start,
                           running_code()), shard)
    if task.family is not None:
        pol = parse_policy(task.policy) if task.policy else Optimal()
        run = (task.family.batched_trees if repr(pol) == repr(Optimal())
               else functools.partial(pol.run_batched, task.family))
        acc, exp, dep = run(task.budgets, np.uint64(task.key), task.first, task.count)
        acc_s, exp_s, visited = acc, exp, 0
    elif task.policy and task.policy != repr(Optimal()) and task.batch == 1:
        acc, exp, dep = run_policy(parse_policy(task.policy), task.spec, task.budgets,
                                   np.uint64(task.key), task.first, task.count)
        acc_s, exp_s, visited = acc, exp, 0
    else:
        acc, exp, dep, acc_s, exp_s, visited = _optimal_in_calls(task)
    shard = _chunk_shard(task, acc, exp, dep, visited, acc_s, exp_s)
    return (TaskResult(task.point, task.chunk, int(acc.max()), visited,
                       task.count * int(task.budgets[-1]), time.perf_counter() - start,
                       running_code()), shard)


def _optimal_in_calls(task: ChunkTask) -> tuple[np.ndarray, ...]:
    """The optimal trees (forests) of a chunk, in kernel calls of about
    :data:`brwsim.simulate.NODES_PER_CALL` nodes (Ctrl-C is answered between calls), the
    threshold carried from call to call; accepted, expected, depth, their split
    counterparts and the nodes visited."""
    step = iterations_per_call(int(task.budgets[-1]), task.count)
    parts, visited, t = [], 0, math.nan
    key = np.uint64(task.key)
    for first in range(task.first, task.first + task.count, step):
        count = min(step, task.first + task.count - first)
        if task.batch > 1:
            acc, exp, dep, acc_s, exp_s, v, extra, t = run_forest(
                task.spec, task.budgets, key, first, count, task.batch, t)
            v += extra
        else:
            acc, exp, dep, v, t = run_iterations(task.spec, task.budgets, key, first, count, t)
            acc_s, exp_s = acc, exp
        parts.append((acc, exp, dep, acc_s, exp_s))
        visited += v
    arrays = [np.concatenate(column, axis=1) if len(parts) > 1 else column[0]
              for column in zip(*parts)]
    return (*arrays, visited)


def _shard_attrs(task: ChunkTask | TheoryTask, **extra: Any) -> dict[str, Any]:
    inputs = {_INPUTS: task.inputs} if task.inputs else {}
    return {"brwsim_shard_format": SHARD_FORMAT, "config_hash": task.config_hash,
            "point": task.point, "chunk": task.chunk, **inputs, **code_attrs(), **extra}


#: Shard attribute holding :func:`point_inputs` (absent for a point that reads no file).
_INPUTS = "input_sha256"


def point_inputs(files: dict[str, str]) -> str:
    """The canonical JSON of a point's input files' SHA-256 by path (``""`` for none)."""
    return json.dumps(dict(sorted(files.items())), sort_keys=True) if files else ""


def changed_inputs(path: str | Path, inputs: str) -> str | None:
    """Which input of a shard differs from ``inputs`` (:func:`point_inputs` of its point
    now), as ``"<file> changed"``, or None when they agree or the shard cannot be read."""
    try:
        import netCDF4

        with netCDF4.Dataset(path, "r") as nc:
            stored = nc.getncattr(_INPUTS) if _INPUTS in nc.ncattrs() else ""
    except Exception:  # noqa: BLE001 - an unreadable shard is reported as corrupt instead
        return None
    if str(stored) == inputs:
        return None
    try:
        old = json.loads(stored) if stored else {}
    except ValueError:
        old = {}
    new = json.loads(inputs) if inputs else {}
    names = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    if not names:
        return "its inputs changed"
    more = f" (and {len(names) - 1} more)" if len(names) > 1 else ""
    return f"{names[0]} changed{more}"


def shard_code(attrs: dict[str, Any]) -> str:
    """Which code wrote a shard, from its attributes: its ``git_commit``, else
    ``brwsim <version>`` (a wheel built from an sdist), else ``unknown`` (a shard of a
    brwsim older than these attributes).

    Parameters
    ----------
    attrs : dict
        The shard's global attributes.

    Returns
    -------
    str
    """
    commit, version = _attr(attrs, "git_commit"), _attr(attrs, "brwsim_version")
    if commit:
        return str(commit)
    return f"brwsim {version}" if version else "unknown"


def running_code() -> str:
    """:func:`shard_code` of the shards this process writes."""
    return shard_code(code_attrs())


def _fsum_rows(a: np.ndarray) -> np.ndarray:
    """Correctly rounded row sums (independent of summation order and memory layout)."""
    return np.array([math.fsum(row) for row in a.astype(np.float64)])


def _chunk_shard(task: ChunkTask, acc: np.ndarray, exp: np.ndarray, dep: np.ndarray,
                 visited: int, acc_split: np.ndarray, exp_split: np.ndarray) -> Shard:
    raw = {"accepted": acc, "expected_accepted": exp, "depth": dep}
    data: dict[str, Variable] = {}
    for name, source, squared in SUM_VARS:
        x = raw[source].astype(np.float64)
        data[name] = Variable(("budget",), _fsum_rows(x * x if squared else x))
    both = {**raw, "accepted_split": acc_split, "expected_accepted_split": exp_split}
    for name, source, other in PRODUCT_SUMS:
        x = both[source].astype(np.float64)
        data[name] = Variable(("budget",), _fsum_rows(x if other is None else x * both[other]))
    x_max = int(acc.max())
    hist = np.stack([np.bincount(row, minlength=x_max + 1) for row in acc]).astype(np.int64)
    data["accepted_hist"] = Variable(("budget", "accepted_value"), hist)
    coords = {"budget": np.asarray(task.budgets)}
    if task.raw:
        for name, arr in raw.items():
            data[name] = Variable(("budget", "iteration"), np.asarray(arr))
        coords["iteration"] = np.arange(task.first, task.first + task.count, dtype=np.int64)
    return seal(Shard(data, coords, _shard_attrs(task, first=task.first, count=task.count,
                                                 x_max=x_max, nodes_visited=visited,
                                                 raw=int(task.raw), batch=task.batch)))


def _theory_shard(task: TheoryTask) -> Shard:
    mom = task.family.moments()
    data = {name: Variable((), np.asarray(getattr(mom, name), np.float64)) for name in THEORY_VARS}
    note = ""
    why = paper_bound_reason(task.family)
    if why is not None:
        bound = np.full(task.budgets.size, np.nan)
    else:
        try:
            bound = paper_bound(mom.mu, mom.mu2, task.budgets)
        except ValueError as exc:         # UserError: e.g. mu == 0
            bound, why = np.full(task.budgets.size, np.nan), str(exc)
    if why is not None:
        note = f"paper bound: {why}"
    data["paper_bound"] = Variable(("budget",), np.asarray(bound, dtype=np.float64),
                                   {"reason": why} if why else {})
    if task.method != "none":
        pred, reasons = _prediction(task.family, task.budgets, task.method)
        for name, values in pred.items():
            data[name] = Variable(("budget",), np.asarray(values, np.float64),
                                  {"reason": reasons[name]} if name in reasons else {})
        why = "; ".join(f"{name.replace('_', ' ')}: {reasons[name]}"
                        for name in ("prediction", "upper_bound") if name in reasons)
        note = "; ".join(x for x in (note, why) if x)
    return seal(Shard(data, {"budget": np.asarray(task.budgets)},
                      _shard_attrs(task, moments_exact=int(mom.exact),
                                   prediction_method=task.method, note=note)))


def _prediction(family: Family, budgets: np.ndarray, method: str
                ) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The renewal prediction with its SE and the proven upper bound (NaN where unavailable
    for this family) and the reason of every NaN one. ``method`` is the prediction's; SE
    are 0 for exact spine laws and for the asymptotic. A context-dependent family gets its
    own bound or NaN, never its i.i.d. marginal's (:func:`brwsim.theory.theory_curves`)."""

    curves = theory_curves(family, budgets, method)
    out = {k: np.asarray(curves.values[k], np.float64) for k in THEORY_BUDGET_VARS}
    return out, {k: v for k, v in curves.reasons.items() if k in out}


def read_shard(path: str | Path, *, config_hash: str, point: int, chunk: int,
               budgets: np.ndarray, first: int = 0, count: int = 0,
               raw: bool = False, inputs: str = "") -> Shard | None:
    """Load a shard and check it belongs to this task, or ``None`` when it is unusable.

    A shard is usable when it reads completely (every Fletcher-32 checksum verifies),
    carries the expected format, configuration hash, key, budgets and input files'
    SHA-256 (``inputs``, :func:`point_inputs`), and has every variable with the expected
    shape (the raw arrays when ``raw``).

    Returns
    -------
    brwsim.sweep.shardfile.Shard or None
        The shard's contents (the file is closed).
    """
    try:
        ds = read_shard_file(path)
    except Exception:  # noqa: BLE001 - any failure to read (HDF5, netCDF, checksum) = corrupt
        return None
    a = ds.attrs
    if a.get(DIGEST) != digest(ds):
        return None
    expect = {"brwsim_shard_format": SHARD_FORMAT, "config_hash": config_hash,
              "point": point, "chunk": chunk}
    if chunk != THEORY_CHUNK:
        expect.update(first=first, count=count)
    if any(_attr(a, k) != v for k, v in expect.items()):
        return None
    if str(a.get(_INPUTS, "")) != inputs:          # a checkpoint, bank or corpus changed
        return None
    if "budget" not in ds.coords or not np.array_equal(ds["budget"], budgets):
        return None
    return ds if _shapes_ok(ds, budgets.size, chunk, count, raw) else None


def _attr(attrs: dict[str, Any], key: str) -> Any:
    value = attrs.get(key)
    return value.item() if isinstance(value, np.generic) else value


def _shapes_ok(ds: Shard, nb: int, chunk: int, count: int, raw: bool) -> bool:
    if chunk == THEORY_CHUNK:
        if "moments_exact" not in ds.attrs:
            return False
        need = {name: () for name in THEORY_VARS} | {"paper_bound": (nb,)}
    else:
        x_max = _attr(ds.attrs, "x_max")
        if not isinstance(x_max, int) or x_max < 0:
            return False
        need = {name: (nb,) for name, _, _ in (*SUM_VARS, *PRODUCT_SUMS)} | {"accepted_hist": (nb, x_max + 1)}
        if raw:
            need |= {name: (nb, count) for name in RAW_VARS}
    return all(name in ds and ds[name].shape == shape for name, shape in need.items())
