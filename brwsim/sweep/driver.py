"""Parameter sweeps: config -> tasks keyed (point, chunk) -> joblib -> shards -> results.nc.

The driver (:func:`sweep`) validates the whole configuration, claims the output folder
(``DIR/config.json`` holds the configuration and its hash; ``DIR/.lock`` keeps a second
sweep out), keeps every usable shard of an earlier run, runs the missing tasks through
``joblib.Parallel`` and merges the shards into ``DIR/results.nc``, streaming one shard at
a time. Randomness is a function of (point key, global iteration index), so the merged
data are bit-identical whatever the worker count or backend, and after a crash the same
call finishes only the missing tasks. That holds for one code: every shard records the
commit that wrote it, ``results.nc`` counts the shards per code (attribute ``shard_code``),
and a merge of shards written by another code than the merging one (a sweep resumed after
an upgrade, a cluster whose workers run another install) warns (:class:`MixedCodeWarning`).

Layout of ``results.nc`` (one netCDF group per ``[[sweep.family]]`` block, named by its
label): dims ``<swept parameters...>, budget[, iteration], accepted_value``; see
``docs/sweeps.md`` and :func:`sweep`.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brwsim.sweep.claim import claim, exclusive, remove_temporaries, undo_claim
from brwsim.sweep.config import load_config
from brwsim.sweep.execute import StaleInputWarning, check_options, execute, plan_tasks, shard_codes
from brwsim.sweep.merge import merge
from brwsim.sweep.shards import running_code
from brwsim.validate import check_output_dir

__all__ = ["sweep", "SweepReport", "MixedCodeWarning", "StaleInputWarning"]


class MixedCodeWarning(UserWarning):
    """The merged shards were not all written by the code that merged them: the data are
    a mix of versions (each shard valid for its own), not one version's bit-identical run."""

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
    codes : dict of str to int
        Shards per code that wrote them (a git commit, else ``brwsim <version>``, else
        ``unknown`` for shards of a brwsim older than this record), most first; also the
        ``shard_code`` attribute of ``results.nc``.
    """

    path: Path
    tasks: int
    run: int
    reused: int
    discarded: int
    tree_nodes: int
    seconds: float
    codes: dict[str, int]


def sweep(config: Any, out_dir: str | os.PathLike[str], jobs: int | None = None,
          backend: str | None = None, scheduler: Any = None, summary_only: bool = False,
          quiet: bool = True, command: str = "") -> SweepReport:
    """Run (or finish) a parameter sweep and merge it into ``out_dir/results.nc``.

    Parameters
    ----------
    config : path-like, mapping or SweepConfig
        A TOML file (see :mod:`brwsim.sweep.config`), its parsed mapping, or a validated config.
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

    Warns
    -----
    StaleInputWarning
        When shards of an earlier run were made from input files (checkpoints, banks,
        corpora, prompts) whose SHA-256 has changed since: they are redone, and the
        message says how many and which file changed.
    MixedCodeWarning
        When some merged shards were written by another code than this process's (an
        earlier run of another commit, workers of another install): the message names
        each code with its number of shards. The data are merged all the same.
    """
    start = time.perf_counter()
    cfg = load_config(config)
    check_options(jobs, backend, scheduler)
    out = check_output_dir(out_dir, "--out")
    raw = not summary_only
    with exclusive(out) as state:
        try:
            claim(out, cfg, state)
            remove_temporaries(out)
            tasks, infos, discarded = plan_tasks(cfg, out, raw, state)
            n_total = len(tasks) + len(infos)
            nodes = execute(tasks, infos, out, n_total, jobs, backend, scheduler,
                             show=not quiet and sys.stderr.isatty())
            path = merge(out, cfg, infos, raw, command or f"brwsim.sweep({str(out)!r})")
        except BaseException:
            undo_claim(out, state)
            raise
    codes = shard_codes(infos)
    mine = running_code()
    if set(codes) != {mine}:
        counts = ", ".join(f"{code} ({n} shards)" for code, n in codes.items())
        warnings.warn(f"{path} merges shards written by other code than this run's ({mine}): "
                      f"{counts}; each shard is valid for its own code, but the data are not "
                      "one version's run", MixedCodeWarning, stacklevel=2)
    return SweepReport(path, n_total, len(tasks), n_total - len(tasks), discarded, nodes,
                       time.perf_counter() - start, codes)
