"""Parameter sweeps: config -> tasks keyed (point, chunk) -> joblib -> shards -> results.nc.

The driver (:func:`sweep`) validates the whole configuration, claims the output folder
(``DIR/config.json`` holds the configuration and its hash; ``DIR/.lock`` keeps a second
sweep out), keeps every usable shard of an earlier run, runs the missing tasks through
``joblib.Parallel`` and merges the shards into ``DIR/results.nc``, streaming one shard at
a time. Randomness is a function of (point key, global iteration index), so the merged
data are bit-identical whatever the worker count or backend, and after a crash the same
call finishes only the missing tasks.

Layout of ``results.nc`` (one netCDF group per ``[[sweep.family]]`` block, named by its
label): dims ``<swept parameters...>, budget[, iteration], accepted_value``; see
``docs/sweeps.md`` and :func:`sweep`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from brwsim.config import Block, SweepConfig, load_config
from brwsim.engine import run_forest, run_iterations
from brwsim.errors import UserError
from brwsim.io import atomic_path, provenance_attrs, write_error
from brwsim.plan import best_budget, speedup_from_sums
from brwsim.schema import VARIABLES
from brwsim.shards import (
    PRODUCT_SUMS,
    RAW_VARS,
    SUM_VARS,
    THEORY_BUDGET_VARS,
    THEORY_CHUNK,
    THEORY_VARS,
    ChunkTask,
    TaskResult,
    TheoryTask,
    read_shard,
    run_task,
    shard_name,
)
from brwsim.validate import check_output_dir, echo

__all__ = ["sweep", "SweepReport", "register", "BACKENDS"]

BACKENDS = ("loky", "dask")
RESULTS = "results.nc"
_STATE_FORMAT = 1

Task = ChunkTask | TheoryTask


@dataclass(frozen=True)
class SweepReport:
    """What a :func:`sweep` call did.

    Attributes
    ----------
    path : pathlib.Path
        The merged dataset (``DIR/results.nc``).
    tasks : int
        Tasks of the sweep (chunks of every point plus one theory task per point).
    run : int
        Tasks run by this call.
    reused : int
        Usable shards of an earlier call that were kept.
    discarded : int
        Corrupt, partial or foreign shards found, deleted and redone.
    tree_nodes : int
        Optimal-tree nodes (iterations * max budget) simulated by this call.
    seconds : float
        Wall time of this call.
    """

    path: Path
    tasks: int
    run: int
    reused: int
    discarded: int
    tree_nodes: int
    seconds: float


@dataclass(frozen=True)
class _ShardInfo:
    x_max: int
    visited: int


def sweep(config: Any, out_dir: str | os.PathLike[str], jobs: int | None = None,
          backend: str | None = None, scheduler: Any = None, summary_only: bool = False,
          quiet: bool = True, command: str = "") -> SweepReport:
    """Run (or finish) a parameter sweep and merge it into ``out_dir/results.nc``.

    Parameters
    ----------
    config : path-like, mapping or SweepConfig
        A TOML file (see :mod:`brwsim.config`), its parsed mapping, or a validated config.
    out_dir : path-like
        Output folder: ``config.json``, ``shards/`` and ``results.nc``. Running the same
        configuration again into it finishes missing tasks only; a different
        configuration is refused.
    jobs : int, optional
        Parallel tasks (``joblib.Parallel(n_jobs=jobs)``). Default 1, or every worker of
        the cluster with ``backend="dask"``. Results never depend on it.
    backend : {"loky", "dask"}, optional
        joblib backend, set with ``joblib.parallel_config``. ``None`` keeps the caller's
        (default loky), so ``with joblib.parallel_config(...)`` around the call works.
    scheduler : str or distributed.Client, optional
        With ``backend="dask"``: a scheduler address (``tcp://host:8786``) or a client.
        Default: a ``LocalCluster`` of ``jobs`` single-threaded worker processes.
    summary_only : bool, default False
        Keep per-point sufficient statistics and histograms but no per-iteration arrays.
    quiet : bool, default True
        No progress bar (it is also hidden when stderr is not a terminal).
    command : str, optional
        Recorded in the ``history`` attribute.

    Returns
    -------
    SweepReport

    Raises
    ------
    brwsim.errors.UserError
        For an invalid configuration (before any work), a folder holding another
        configuration, a folder in use, or a missing or unreachable Dask.
    """
    start = time.perf_counter()
    cfg = load_config(config)
    _check_options(jobs, backend, scheduler)
    out = check_output_dir(out_dir, "--out")
    raw = not summary_only
    with _exclusive(out) as state:
        try:
            _claim(out, cfg, state)
            _remove_temporaries(out)
            tasks, infos, discarded = _plan(cfg, out, raw, state)
            n_total = len(tasks) + len(infos)
            nodes = _execute(tasks, infos, out, n_total, jobs, backend, scheduler,
                             show=not quiet and sys.stderr.isatty())
            path = _merge(out, cfg, infos, raw, command or f"brwsim.sweep({str(out)!r})")
        except BaseException:
            _undo_claim(out, state)
            raise
    return SweepReport(path, n_total, len(tasks), n_total - len(tasks), discarded, nodes,
                       time.perf_counter() - start)


#: A dask scheduler address: [scheme://]host[:port] (host a name, an IPv4 or a [IPv6]).
_ADDRESS = re.compile(r"(?:(?:tcp|tls|ws|wss|ucx)://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)"
                      r"(?::\d{1,5})?/?\Z|inproc://\S+\Z")


@dataclass
class _FolderState:
    """What this call created in the output folder (undone when it fails before any shard)."""

    created_dir: bool = False
    created_lock: bool = False
    created_config: bool = False
    created_shards: bool = False


def _undo_claim(out: Path, state: _FolderState) -> None:
    """After a failure: remove what this call created, unless a shard (work) exists.

    A sweep that fails before any task finished (a bad scheduler, memory, a foreign file in
    the folder) leaves the folder as it found it, so a rerun is not refused as a claim by a
    run that never happened. Runs with finished shards keep them: a rerun resumes.
    """
    shards = out / "shards"
    if shards.is_dir() and any(shards.glob("p*.nc")):
        return
    with contextlib.suppress(OSError):
        if state.created_shards:
            for tmp in shards.glob(".*.tmp"):
                tmp.unlink()
            shards.rmdir()
        if state.created_config:
            (out / "config.json").unlink(missing_ok=True)
        if state.created_lock:
            (out / ".lock").unlink(missing_ok=True)     # still held: no one else has it
        if state.created_dir:
            out.rmdir()

def _check_options(jobs: int | None, backend: str | None, scheduler: Any) -> None:
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int)
                             or (jobs < 1 and jobs != -1)):
        raise UserError(f"jobs must be a positive integer or -1 (all cores), got {jobs!r}")
    if backend is not None and backend not in BACKENDS:
        raise UserError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if scheduler is not None and backend != "dask":
        raise UserError("a scheduler needs backend 'dask' (--backend dask)")
    if isinstance(scheduler, str) and not _ADDRESS.match(scheduler.strip()):
        raise UserError(f"--scheduler: {echo(scheduler)} is not a dask scheduler address "
                        "(e.g. tcp://host:8786 or host:8786)")


# --- the output folder -------------------------------------------------------------------

@contextlib.contextmanager
def _exclusive(out: Path) -> Iterator[_FolderState]:
    """Hold an exclusive lock on ``out/.lock`` (released by the OS even after SIGKILL).

    Yields what this call created (the folder, the lock file), for :func:`_undo_claim`.
    """
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a folder")
    state = _FolderState(created_dir=not out.exists())
    out.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no lock
        yield state
        return
    lock = out / ".lock"
    state.created_lock = not lock.exists()
    try:
        fh = open(lock, "w")
    except OSError:
        if state.created_dir:
            with contextlib.suppress(OSError):
                out.rmdir()
        raise
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise UserError(f"{out}: another brwsim sweep is running in this folder") from None
        yield state


def _claim(out: Path, cfg: SweepConfig, state: _FolderState) -> None:
    """Record the configuration in ``out/config.json``, or refuse a different one."""
    meta = out / "config.json"
    if meta.exists():
        try:
            stored = json.loads(meta.read_text())
        except (OSError, ValueError):
            raise UserError(f"{meta}: unreadable; use another --out folder or delete {out}") from None
        if not isinstance(stored, dict):
            raise UserError(f"{meta}: not a brwsim sweep state; use another --out folder or "
                            f"delete {out}")
        if stored.get("config_hash") != cfg.hash:
            diff = _first_difference(stored.get("config"), cfg.normalized, "sweep")
            raise UserError(f"{out} holds a sweep of a different configuration ({diff}); "
                            f"use another --out folder, or delete {out} to start over")
        return
    if (out / "shards").exists() or (out / RESULTS).exists():
        raise UserError(f"{out} holds sweep output but no config.json; use another --out folder")
    _write_text_atomic(meta, json.dumps({"format": _STATE_FORMAT, "config_hash": cfg.hash,
                                         "config": cfg.normalized}, indent=1, sort_keys=True))
    state.created_config = True


def _first_difference(old: Any, new: Any, path: str) -> str:
    """``"<path>: <old> -> <new>"`` at the first place two JSON values differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                return _first_difference(old.get(key), new.get(key), f"{path}.{key}")
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            if a != b:
                return _first_difference(a, b, f"{path}[{i}]")
    return f"{path}: {_json_short(old)} -> {_json_short(new)}"


def _json_short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _write_text_atomic(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def _remove_temporaries(out: Path) -> None:
    """Delete temporary files left by a killed run (the folder is locked: none is live)."""
    for folder in (out, out / "shards"):
        if folder.is_dir():
            for tmp in folder.glob(".*.tmp"):
                tmp.unlink(missing_ok=True)


# --- tasks -------------------------------------------------------------------------------

def _plan(cfg: SweepConfig, out: Path, raw: bool, state: _FolderState
          ) -> tuple[list[Task], dict[tuple[int, int], _ShardInfo], int]:
    """Tasks still to run, usable shards already present, and the number discarded."""
    shards = out / "shards"
    state.created_shards = not shards.exists()
    shards.mkdir(exist_ok=True)
    todo: list[Task] = []
    infos: dict[tuple[int, int], _ShardInfo] = {}
    discarded = 0
    for task in _tasks(cfg, shards, raw):
        path = Path(task.path)
        if path.exists():
            info = _usable(out, cfg, task, raw)
            if info is not None:
                infos[(task.point, task.chunk)] = info
                continue
            path.unlink()
            discarded += 1
        todo.append(task)
    return todo, infos, discarded


def _tasks(cfg: SweepConfig, shards: Path, raw: bool) -> Iterator[Task]:
    """Every task of the sweep: theory tasks first (the slowest), then all chunks."""
    points = list(cfg.points())
    for p in points:
        yield TheoryTask(p.index, p.family, cfg.budgets, cfg.prediction,
                         str(shards / shard_name(p.index, THEORY_CHUNK)), cfg.hash)
    for p in points:
        spec, key = p.family.spec(), int(cfg.point_key(p.index))
        for chunk, first, count in cfg.chunks():
            yield ChunkTask(p.index, chunk, first, count, key, cfg.budgets, spec,
                            str(shards / shard_name(p.index, chunk)), cfg.hash, raw,
                            p.block.batch(p.local))


def _load_shard(out: Path, cfg: SweepConfig, point: int, chunk: int, raw: bool) -> Any:
    """The shard of task (point, chunk) if it is usable for this sweep, else None."""
    path = out / "shards" / shard_name(point, chunk)
    if chunk == THEORY_CHUNK:
        return read_shard(path, config_hash=cfg.hash, point=point, chunk=chunk, budgets=cfg.budgets)
    first = chunk * cfg.chunk
    return read_shard(path, config_hash=cfg.hash, point=point, chunk=chunk, budgets=cfg.budgets,
                      first=first, count=min(cfg.chunk, cfg.iterations - first), raw=raw)


def _usable(out: Path, cfg: SweepConfig, task: Task, raw: bool) -> _ShardInfo | None:
    ds = _load_shard(out, cfg, task.point, task.chunk, raw)
    if ds is None:
        return None
    return _ShardInfo(int(ds.attrs.get("x_max", -1)), int(ds.attrs.get("nodes_visited", 0)))


def _execute(tasks: list[Task], infos: dict[tuple[int, int], _ShardInfo], out: Path,
             n_total: int, jobs: int | None, backend: str | None, scheduler: Any,
             show: bool) -> int:
    """Run ``tasks`` in parallel, recording each finished shard in ``infos``; tree nodes run."""
    if not tasks:
        return 0
    from joblib import Parallel, delayed
    from tqdm.auto import tqdm

    _warm_numba(tasks)
    nodes = 0
    with _parallel_backend(backend, scheduler, jobs) as n_jobs, \
            tqdm(total=n_total, initial=n_total - len(tasks), unit="task", desc="sweep",
                 disable=not show, dynamic_ncols=True) as bar:
        start = time.perf_counter()
        results = Parallel(n_jobs=n_jobs, return_as="generator_unordered")(
            delayed(run_task)(t) for t in tasks)
        for res in results:
            _check_written(out, res)
            infos[(res.point, res.chunk)] = _ShardInfo(res.x_max, res.visited)
            nodes += res.tree_nodes
            rate = nodes / max(time.perf_counter() - start, 1e-9)
            bar.set_postfix_str(f"{rate:.3g} tree nodes/s", refresh=False)
            bar.update(1)
    return nodes


def _warm_numba(tasks: list[Task]) -> None:
    """Compile (or load from numba's cache) the kernel once here, before fanning out."""
    task = next((t for t in tasks if isinstance(t, ChunkTask)), None)
    if task is not None:
        run_iterations(task.spec, task.budgets[:1], np.uint64(task.key), 0, 1)
    task = next((t for t in tasks if isinstance(t, ChunkTask) and t.batch > 1), None)
    if task is not None:
        run_forest(task.spec, task.budgets[:1], np.uint64(task.key), 0, 1, 2)


def _check_written(out: Path, res: TaskResult) -> None:
    path = out / "shards" / shard_name(res.point, res.chunk)
    if not path.is_file():
        raise UserError(f"a worker finished task (point {res.point}, chunk {res.chunk}) but "
                        f"{path} does not exist here: the output folder must be on a file "
                        "system shared by the driver and every worker")


@contextlib.contextmanager
def _parallel_backend(backend: str | None, scheduler: Any, jobs: int | None) -> Iterator[int]:
    """Enter the joblib backend chosen by ``backend``; yields the ``n_jobs`` to use."""
    from joblib import parallel_config

    if backend is None:
        yield jobs or 1
    elif backend == "loky":
        with parallel_config(backend="loky"):
            yield jobs or 1
    else:
        with _dask_client(scheduler, jobs) as client, parallel_config(backend="dask", client=client):
            yield jobs or -1


@contextlib.contextmanager
def _dask_client(scheduler: Any, jobs: int | None) -> Iterator[Any]:
    """A ``distributed.Client``: the one given, one for an address, or a LocalCluster's."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise UserError("backend 'dask' needs dask.distributed: pip install 'brwsim[dask]'") from None
    if scheduler is not None and not isinstance(scheduler, str):
        yield scheduler
        return
    if scheduler is None:
        import logging

        n = jobs if jobs and jobs > 0 else os.cpu_count() or 1
        with LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                          dashboard_address=None, silence_logs=logging.ERROR) as cluster, \
                Client(cluster) as client:
            yield client
        return
    try:
        client = Client(scheduler, timeout="20s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise UserError(f"cannot connect to the dask scheduler {echo(scheduler)}: "
                        f"{' '.join(str(exc).split())[:200]}") from None
    with client:
        yield client


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
    "prediction", "prediction_se", "upper_bound", "upper_bound_se", "step_time",
    "plain_step_time", "speedup", "speedup_se", "best_budget", "best_speedup", "accepted",
    "expected_accepted", "depth",
)

_COST_VARS = frozenset({"step_time", "plain_step_time", "speedup", "speedup_se", "best_budget",
                        "best_speedup"})


def _merge(out: Path, cfg: SweepConfig, infos: dict[tuple[int, int], _ShardInfo], raw: bool,
           command: str) -> Path:
    """Stream every shard into ``out/results.nc`` (temporary file, then rename)."""
    import netCDF4


    dest = out / RESULTS
    with atomic_path(dest) as tmp:
        try:
            with netCDF4.Dataset(tmp, "w", format="NETCDF4") as nc:
                attrs = provenance_attrs(cfg.title, cfg.normalized, cfg.seed, command)
                attrs.update(config_hash=cfg.hash, groups=" ".join(b.label for b in cfg.blocks),
                             summary_only=int(not raw), iterations=cfg.iterations,
                             chunk=cfg.chunk, prediction_method=cfg.prediction)
                if cfg.cost is not None:
                    attrs["cost"] = cfg.cost.describe()
                nc.setncatts(attrs)
                for block in cfg.blocks:
                    _BlockWriter(nc.createGroup(block.label), block, cfg, out, infos, raw).write()
        except (RuntimeError, OSError) as exc:
            raise write_error(dest, exc) from None
    return dest


class _BlockWriter:
    """Writes one block's group: coordinates, then point by point, shard by shard."""

    def __init__(self, grp: Any, block: Block, cfg: SweepConfig, out: Path,
                 infos: dict[tuple[int, int], _ShardInfo], raw: bool) -> None:
        self.grp, self.block, self.cfg, self.out, self.raw = grp, block, cfg, out, raw
        points = range(block.first_point, block.first_point + block.n_points)
        self.x_max = max(infos[(p, c)].x_max for p in points for c, _, _ in cfg.chunks())
        self.visited = {p: sum(infos[(p, c)].visited for c, _, _ in cfg.chunks()) for p in points}
        self.vars: dict[str, Any] = {}
        self.notes: list[str] = []

    def write(self) -> None:
        """Define the group and fill it."""
        self._attributes()
        self._coordinates()
        self._variables()
        for local in range(self.block.n_points):
            self._point(local)
        if self.notes:
            self.grp.setncattr("notes", "\n".join(self.notes))

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
        ds = _load_shard(self.out, self.cfg, point, chunk, self.raw)
        if ds is None:
            path = self.out / "shards" / shard_name(point, chunk)
            path.unlink(missing_ok=True)
            raise UserError(f"{path} became unusable during the merge and was deleted; "
                            "run the same command again to redo it")
        return ds

    def _theory(self, point: int, put: Callable[[str, Any], None]) -> None:
        ds = self._shard(point, THEORY_CHUNK)
        for name in (*THEORY_VARS, "paper_bound"):
            put(name, ds[name].values)
        put("moments_exact", int(ds.attrs["moments_exact"]))
        for name in THEORY_BUDGET_VARS:
            if name in self.vars:
                put(name, ds[name].values)
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
                parts.append(ds[name].values)
            h = ds["accepted_hist"].values
            hist[:, :h.shape[1]] += h
            if self.raw:
                cols = idx + (slice(None), slice(first, first + count))
                for name in RAW_VARS:
                    self.vars[name][cols] = ds[name].values
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


# --- command line ------------------------------------------------------------------------

def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``sweep`` subcommand to an argparse subparsers object.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        From ``parser.add_subparsers()``.

    Returns
    -------
    argparse.ArgumentParser
        The subcommand's parser (its ``func`` default is :func:`run_cli`).
    """
    parser = subparsers.add_parser(
        "sweep", help="run a parameter sweep from a TOML file into DIR/results.nc (resumable)",
        description="Run every (point, chunk) task of a TOML sweep configuration, one netCDF "
                    "shard per task in DIR/shards, and merge them into DIR/results.nc. Running "
                    "the same command again finishes only missing tasks.")
    parser.add_argument("config", metavar="CONFIG", help="TOML sweep configuration")
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder")
    parser.add_argument("--jobs", type=int, default=None, metavar="N",
                        help="parallel tasks (default 1; with dask: every worker; -1: all cores)")
    parser.add_argument("--backend", choices=BACKENDS, default=None,
                        help="joblib backend (default loky)")
    parser.add_argument("--scheduler", default=None, metavar="ADDRESS",
                        help="dask scheduler address, e.g. tcp://host:8786 (default: a LocalCluster)")
    parser.add_argument("--summary-only", action="store_true",
                        help="keep per-point statistics and histograms, not per-iteration arrays")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=run_cli)
    return parser


def run_cli(args: argparse.Namespace) -> int:
    """Body of ``brwsim sweep``: run, then print one line per outcome."""
    argv = getattr(args, "argv", None)
    command = "brwsim " + " ".join(shlex.quote(a) for a in argv) if argv else ""
    rep = sweep(args.config, args.out, jobs=args.jobs, backend=args.backend,
                scheduler=args.scheduler, summary_only=args.summary_only, quiet=args.quiet,
                command=command)
    rate = f", {rep.tree_nodes / rep.seconds:.3g} tree nodes/s" if rep.tree_nodes else ""
    redone = f", {rep.discarded} unusable shards redone" if rep.discarded else ""
    print(f"{rep.tasks} tasks: {rep.run} run, {rep.reused} reused{redone} "
          f"({rep.seconds:.1f} s{rate})")
    print(f"wrote {rep.path}")
    return 0
