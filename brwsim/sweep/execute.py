"""Running a sweep's tasks: the plan (which shards are usable), joblib or dask, progress.

Tasks are keyed (point, chunk); ``joblib.Parallel`` runs the missing ones with the
caller's backend (loky by default, dask through ``joblib.parallel_config``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from brwsim.engine import law, run_forest, run_iterations
from brwsim.errors import UserError
from brwsim.interrupt import driver_tag
from brwsim.policies import Optimal, parse_policy, run_policy
from brwsim.sweep.claim import FolderState
from brwsim.sweep.config import SweepConfig
from brwsim.sweep.shardfile import Shard, ShardWriter
from brwsim.sweep.shards import (
    THEORY_CHUNK,
    ChunkTask,
    TaskResult,
    TheoryTask,
    compute_task,
    read_shard,
    run_task,
    changed_inputs,
    point_inputs,
    shard_code,
    shard_name,
)
from brwsim.validate import echo

__all__ = ["Task", "ShardInfo", "StaleInputWarning", "shard_codes", "plan_tasks", "execute",
           "check_options", "load_shard", "point_input_map",
           "BACKENDS"]

BACKENDS = ("loky", "dask")

Task = ChunkTask | TheoryTask


@dataclass(frozen=True)
class ShardInfo:
    """What the merge needs of a finished shard: its largest X, the nodes its passes
    visited, the code that wrote it (:func:`brwsim.sweep.shards.shard_code`), its
    point's input files (:func:`brwsim.sweep.shards.point_inputs`) and, for a summary or
    theory shard this process computed, its contents (the merge reads it from memory,
    not from the file)."""

    x_max: int
    visited: int
    code: str
    inputs: str = ""
    shard: Shard | None = field(default=None, compare=False, repr=False)


def shard_codes(infos: dict[tuple[int, int], ShardInfo]) -> dict[str, int]:
    """How many of the shards each code wrote (:attr:`ShardInfo.code`), most first."""
    counts: dict[str, int] = {}
    for info in infos.values():
        counts[info.code] = counts.get(info.code, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


#: A dask scheduler address: [scheme://]host[:port] (host a name, an IPv4 or a [IPv6]).
_ADDRESS = re.compile(r"(?:(?:tcp|tls|ws|wss|ucx)://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)"
                      r"(?::\d{1,5})?/?\Z|inproc://\S+\Z")


def check_options(jobs: int | None, backend: str | None, scheduler: Any) -> None:
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


# --- tasks -------------------------------------------------------------------------------

def plan_tasks(cfg: SweepConfig, out: Path, raw: bool, state: FolderState
          ) -> tuple[list[Task], dict[tuple[int, int], ShardInfo], int]:
    """Tasks still to run, usable shards already present, and the number discarded.

    A shard whose point's input files (checkpoints, banks, corpora, prompts) no longer
    have the SHA-256 it recorded is discarded and redone like a corrupt one; one
    :class:`StaleInputWarning` names how many and which file changed.
    """
    shards = out / "shards"
    state.created_shards = not shards.exists()
    shards.mkdir(exist_ok=True)
    todo: list[Task] = []
    infos: dict[tuple[int, int], ShardInfo] = {}
    discarded = 0
    stale: dict[str, list[str]] = {}
    for task in _tasks(cfg, shards, raw):
        path = Path(task.path)
        if path.exists():
            info = _usable(out, cfg, task, raw)
            if info is not None:
                infos[(task.point, task.chunk)] = info
                continue
            why = changed_inputs(path, task.inputs)
            if why is not None:
                stale.setdefault(why, []).append(path.name)
            path.unlink()
            discarded += 1
        todo.append(task)
    if stale:
        parts = [f"{why} for {len(names)} shard{'s' if len(names) > 1 else ''} "
                 f"({', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
                 for why, names in stale.items()]
        n = sum(len(names) for names in stale.values())
        warnings.warn(f"{n} shards of an earlier run were made from other input files and are "
                      f"redone: {'; '.join(parts)}", StaleInputWarning, stacklevel=3)
    return todo, infos, discarded


class StaleInputWarning(UserWarning):
    """Shards of an earlier run were made from input files (a checkpoint, a bank, a corpus,
    a prompts file) whose bytes have changed since: they are redone, not merged."""


def _tasks(cfg: SweepConfig, shards: Path, raw: bool) -> Iterator[Task]:
    """Every task of the sweep: theory tasks first (the slowest), then all chunks."""
    points = list(cfg.points())
    inputs = point_input_map(cfg)
    driver = driver_tag()
    for p in points:
        yield TheoryTask(p.index, p.family, cfg.budgets, cfg.prediction,
                         str(shards / shard_name(p.index, THEORY_CHUNK)), cfg.hash,
                         inputs[p.index], driver)
    for p in points:
        batched = getattr(p.family, "batched", False)   # a real model's batched backend
        if batched and p.block.batch(p.local) > 1:
            raise UserError(f"{p.family!r}: batch > 1 is not supported with "
                            f"backend={p.family.backend}")
        spec, key = (None if batched else p.family.spec()), int(cfg.point_key(p.index))
        for chunk, first, count in cfg.chunks():
            yield ChunkTask(p.index, chunk, first, count, key, cfg.budgets, spec,
                            str(shards / shard_name(p.index, chunk)), cfg.hash, raw,
                            p.block.batch(p.local), p.block.policy(p.local), inputs[p.index],
                            driver, p.family if batched else None)


def point_input_map(cfg: SweepConfig) -> dict[int, str]:
    """:func:`brwsim.sweep.shards.point_inputs` of every point: its family's input files
    and its policy's (a draft model's checkpoint)."""
    policies: dict[str, dict[str, str]] = {}
    out = {}
    for p in cfg.points():
        files = dict(p.family.input_files())
        text = p.block.policy(p.local)
        if text:
            if text not in policies:
                policies[text] = parse_policy(text).input_files()
            files.update(policies[text])
        out[p.index] = point_inputs(files)
    return out


def load_shard(out: Path, cfg: SweepConfig, point: int, chunk: int, raw: bool,
               inputs: str = "") -> Any:
    """The shard of task (point, chunk) if it is usable for this sweep (made from these
    ``inputs``: :func:`brwsim.sweep.shards.point_inputs`), else None."""
    path = out / "shards" / shard_name(point, chunk)
    if chunk == THEORY_CHUNK:
        return read_shard(path, config_hash=cfg.hash, point=point, chunk=chunk, budgets=cfg.budgets,
                          inputs=inputs)
    first = chunk * cfg.chunk
    return read_shard(path, config_hash=cfg.hash, point=point, chunk=chunk, budgets=cfg.budgets,
                      first=first, count=min(cfg.chunk, cfg.iterations - first), raw=raw,
                      inputs=inputs)


def _usable(out: Path, cfg: SweepConfig, task: Task, raw: bool) -> ShardInfo | None:
    ds = load_shard(out, cfg, task.point, task.chunk, raw, task.inputs)
    if ds is None:
        return None
    return ShardInfo(int(ds.attrs.get("x_max", -1)), int(ds.attrs.get("nodes_visited", 0)),
                     shard_code(ds.attrs), task.inputs)


def execute(tasks: list[Task], infos: dict[tuple[int, int], ShardInfo], out: Path,
             n_total: int, jobs: int | None, backend: str | None, scheduler: Any,
             show: bool) -> int:
    """Run ``tasks``, recording each finished shard in ``infos``; tree nodes run.

    With one job (and no dask) every task runs in this process and a
    :class:`~brwsim.sweep.shardfile.ShardWriter` writes the shards beside the kernel calls;
    else the theory tasks of :func:`_theory_here` run here and the rest in parallel.
    """
    if not tasks:
        return 0
    from joblib import Parallel, delayed
    from tqdm.auto import tqdm

    _warm_numba(tasks)
    here = _theory_here(tasks)
    rest = [t for t in tasks if not any(t is h for h in here)]
    inputs = {(t.point, t.chunk): t.inputs for t in tasks}
    nodes = 0
    with _parallel_backend(backend, scheduler, jobs) as n_jobs, ShardWriter() as writer, \
            tqdm(total=n_total, initial=n_total - len(tasks), unit="task", desc="sweep",
                 disable=not show, dynamic_ncols=True) as bar:
        if n_jobs == 1 and backend != "dask":      # every task in this process
            here, rest = here + rest, []
        start = time.perf_counter()
        results = itertools.chain(
            (_run_here(t, writer) for t in here),
            ((res, None, False) for res in Parallel(n_jobs=n_jobs, return_as="generator_unordered")(
                delayed(run_task)(t) for t in rest)) if rest else ())
        for res, shard, local in results:
            if not local:
                _check_written(out, res)
            infos[(res.point, res.chunk)] = ShardInfo(res.x_max, res.visited, res.code,
                                                      inputs[(res.point, res.chunk)], shard)
            nodes += res.tree_nodes
            rate = nodes / max(time.perf_counter() - start, 1e-9)
            bar.set_postfix_str(f"{rate:.3g} tree nodes/s", refresh=False)
            bar.update(1)
    return nodes


def _run_here(task: Task, writer: ShardWriter) -> tuple[TaskResult, Shard | None, bool]:
    """Run ``task`` in this process, its shard queued on ``writer`` (written beside the
    next task's kernel calls); the result, the shard the merge may take from memory (None
    for a shard with raw arrays, which the merge streams from its file) and True (a task
    of this process)."""
    res, shard = compute_task(task)
    writer.put(shard, task.path)
    return res, None if getattr(task, "raw", False) else shard, True


def _kernel_group(spec: Any) -> tuple[str, ...]:
    """What selects a kernel's compiled specialisation: the dtypes of a spec's arrays."""
    return tuple(str(a.dtype) for a in law(spec))


def _warm_numba(tasks: list[Task]) -> None:
    """Compile (or load from numba's cache) every tree kernel the chunk tasks need once
    here, before fanning out, so that workers load machine code instead of compiling the
    same kernel side by side: one tree at the smallest budget per kernel group and kind
    of call (the optimal tree, the forest of a batch, each policy). The theory tasks'
    kernels: :func:`_theory_here`."""
    done = set()
    for t in tasks:
        if isinstance(t, ChunkTask) and t.spec is not None:     # (a batched backend compiles nothing)
            policy = t.policy if t.policy and t.policy != repr(Optimal()) and t.batch == 1 else ""
            what = ("forest" if t.batch > 1 else policy, _kernel_group(t.spec))
            if what in done:
                continue
            done.add(what)
            key, b = np.uint64(t.key), t.budgets[:1]
            if t.batch > 1:
                run_forest(t.spec, b, key, 0, 1, 2)
            elif policy:
                run_policy(parse_policy(policy), t.spec, b, key, 0, 1)
            else:
                run_iterations(t.spec, b, key, 0, 1)


def _theory_here(tasks: list[Task]) -> list[Task]:
    """The theory tasks to run in the driver before fanning out: the first of each kind of
    family and kernel group, so that the kernels their spine laws need (sampled laws,
    quadratures) are compiled once, here, not side by side in the workers (nothing is
    wasted: their shards are the sweep's)."""
    here, seen = [], set()
    for t in tasks:
        if isinstance(t, TheoryTask) and not getattr(t.family, "batched", False):
            what = (type(t.family).__name__, _kernel_group(t.family.spec()))
            if what not in seen:
                seen.add(what)
                here.append(t)
    return here


def _check_written(out: Path, res: TaskResult) -> None:
    path = out / "shards" / shard_name(res.point, res.chunk)
    if not path.is_file():
        raise UserError(f"a worker finished task (point {res.point}, chunk {res.chunk}) but "
                        f"{path} does not exist here: the output folder must be on a file "
                        "system shared by the driver and every worker")


@contextlib.contextmanager
def _parallel_backend(backend: str | None, scheduler: Any, jobs: int | None) -> Iterator[int]:
    """Enter the joblib backend chosen by ``backend``; yields the ``n_jobs`` to use. After
    an error or Ctrl-C inside, a loky pool's workers are ended (:func:`_end_loky_pool`)."""
    from joblib import parallel_config

    if backend in (None, "loky"):                 # joblib's default backend is loky
        try:
            with parallel_config(backend="loky"):
                yield jobs or 1
        except BaseException:
            _end_loky_pool()
            raise
    else:
        with _dask_client(scheduler, jobs) as client, parallel_config(backend="dask", client=client):
            yield jobs or -1


def _end_loky_pool() -> None:
    """Kill the workers of joblib's reusable loky pool, if one was started, and wait for its
    manager to release the pool's semaphores: the command that ends next (at once, after
    Ctrl-C) leaves nothing to loky's resource tracker, which would warn of "leaked semlock
    objects" on stderr."""
    from joblib.externals.loky import reusable_executor

    pool = getattr(reusable_executor, "_executor", None)
    if pool is not None:
        pool.shutdown(wait=True, kill_workers=True)


@contextlib.contextmanager
def _dask_client(scheduler: Any, jobs: int | None) -> Iterator[Any]:
    """A ``distributed.Client``: the one given, one for an address, or a LocalCluster's."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise UserError("backend 'dask' needs dask.distributed: pip install 'dask[distributed]' "
                        "(or pip install -e '.[dask]' in the brwsim checkout)") from None
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
