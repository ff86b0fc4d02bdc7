"""The engine: one entry point from a compiled family (a :class:`Spec`, whole) to the kernels.

Everything that turns user-level numbers into a kernel call lives here, below the
policies and :func:`brwsim.simulate`: budget and batch validation, the 64-bit key of a
seed and of a node, the starting threshold of a pass and the status codes a pass returns.
:func:`run_iterations` (single trees) and :func:`run_forest` (batches sharing a budget)
and :func:`run_policy` and :func:`grow_root` (a policy's kernels) are the only places that
call a tree kernel, and :func:`law` the only place that takes a
:class:`~brwsim.kernels.spec.Spec` apart into the :class:`~brwsim.kernels.spec.Law` every
kernel takes first.
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from brwsim.beside import cold
from brwsim.errors import UserError
from brwsim.interrupt import answering
from brwsim.keys import check_path, node_key, seed_key
from brwsim.kernels.spec import Law, Out, Roots, Spec
from brwsim.kernels.aim import start_threshold
from brwsim.kernels.forest import forest_chunk
from brwsim.kernels.tree import (NO_DEPTH_CAP, TOO_FEW, grow_tree, new_workspace, pass_callees,
                                 simulate_chunk)
from brwsim.validate import MAX_BUDGET, MAX_BUDGETS, echo


__all__ = ["MAX_BUDGET", "MAX_BUDGETS", "MAX_BATCH", "validate_budgets", "validate_batch",
           "seed_key", "node_key", "check_path", "start_threshold", "check_grow_status", "run_iterations",
           "run_forest", "law", "run_policy", "grow_root", "first_run", "compile_pass_callees"]


MAX_BATCH = 1 << 16


def law(spec: Spec) -> Law:
    """A compiled family's distribution law as every kernel takes it first."""
    return spec.law


def run_policy(kernel: Any, spec: Spec, roots: Roots, *args: Any) -> Any:
    """A policy's chunk kernel over a chunk of roots: ``kernel(law, head capacity, roots,
    *args)``; ``args`` are the kernel's own (its shape or parameters, budgets and
    :class:`~brwsim.kernels.spec.Out`)."""
    return kernel(law(spec), spec.head_cap, roots, *args)


def grow_root(spec: Spec, roots: Roots, i: int, *args: Any) -> Any:
    """The optimal tree below root ``i`` of ``roots`` (:func:`~brwsim.kernels.tree.grow_tree`;
    ``args``: budgets, depth cap, starting threshold, workspace, outputs and column)."""
    return grow_tree(law(spec), spec.head_cap, roots.keys[i], roots.mode, roots.ci[i],
                     roots.cf[i], *args)


def first_run() -> bool:
    """Whether numba's cache lacks the optimal tree's kernel (for any family): a run will
    compile it, the longest wait of a first run (:mod:`brwsim.beside`)."""
    return cold(simulate_chunk)


def validate_budgets(budgets: Any) -> np.ndarray:
    """Budgets as a sorted array of distinct positive int64, or a :class:`UserError`."""
    if isinstance(budgets, (str, bytes)):
        raise UserError(f"budgets must be a list of positive integers, got {echo(budgets)}")
    try:
        arr = np.asarray(budgets, dtype=np.float64).ravel()
    except (TypeError, ValueError, OverflowError):
        raise UserError(f"budgets must be positive integers, got {echo(budgets)}") from None
    if arr.size == 0:
        raise UserError("budgets must not be empty")
    if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)) or np.any(arr < 1):
        bad = arr[~(np.isfinite(arr) & (arr == np.round(arr)) & (arr >= 1))][0]
        raise UserError(f"budgets must be positive integers (P >= 1), got {bad:g}")
    if arr.max() > MAX_BUDGET:
        raise UserError(f"budget {arr.max():g} exceeds the supported maximum 2**26")
    out = np.unique(arr.astype(np.int64))
    if out.size > MAX_BUDGETS:
        raise UserError(f"{out.size} distinct budgets exceed the supported maximum {MAX_BUDGETS}")
    return out


def validate_batch(batch: Any) -> int:
    """A batch size as a positive int (at most :data:`MAX_BATCH`), or a :class:`UserError`."""
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise UserError(f"batch must be a positive integer (B >= 1), got {batch!r}")
    if batch > MAX_BATCH:
        raise UserError(f"batch {batch} exceeds the supported maximum {MAX_BATCH}")
    return int(batch)


def check_grow_status(code: int, max_depth: int = NO_DEPTH_CAP) -> None:
    """Raise the user-facing error of a negative ``grow_tree`` status (nothing otherwise)."""
    if code == TOO_FEW:
        raise UserError(f"fewer than P nodes of positive path probability exist within depth "
                        f"{max_depth}: lower the budget or raise max_depth")
    if code < 0:
        raise UserError("more than 2**28 nodes tie at one path probability; use a budget "
                        "that ends on a full level of this lattice family")


_WORKSPACE = threading.local()


def _workspace(p_max: int, head_cap: int) -> tuple:
    """This thread's tree-kernel workspace for a largest budget ``p_max``, kept from its
    last call when that one had the same (p_max, head_cap): a run's calls (chunks of
    trees) then reuse the memory the first one touched (one workspace per thread: 44 MB
    once touched at P_max = 2^20 on zipf(1.5, 128000, 0.4)). Its flags (the thresholds'
    aim, the ties seen) are reset by every call, so a chunk's passes do not depend on the
    chunks before it (a sweep's ``nodes_visited`` does not depend on its scheduling)."""
    key = (p_max, head_cap)
    if getattr(_WORKSPACE, "key", None) != key:
        _WORKSPACE.ws = None                 # (released before the new one is made)
        _WORKSPACE.ws = new_workspace(p_max, head_cap)
        _WORKSPACE.key = key
    return _WORKSPACE.ws


def run_iterations(spec: Spec, budgets: np.ndarray, key: np.uint64, first: int, count: int,
                   t_start: float = math.nan, max_depth: int = NO_DEPTH_CAP
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, float]:
    """Iterations ``first .. first + count - 1`` of one family: the numba call, no checks.

    ``max_depth`` caps the optimal tree's depth (the top P among nodes of depth <= it).

    Returns
    -------
    accepted, expected_accepted, depth : numpy.ndarray
        Arrays of shape (len(budgets), count).
    visited : int
        Nodes visited by all threshold passes (the work done).
    t_end : float
        Final threshold, a good start for the next call.
    """
    out = Out.new(budgets.size, count)
    if not math.isfinite(t_start):
        t_start = start_threshold(budgets[-1])
    ws = _workspace(int(budgets[-1]), spec.head_cap)
    _WORKSPACE.key = None         # an interrupted call may still write into ws: never reuse it
    visited, t_end, ws = answering(simulate_chunk, law(spec), spec.head_cap, key, first,
                                   count, budgets, max_depth, t_start, out, ws)
    _WORKSPACE.ws, _WORKSPACE.key = ws, (int(budgets[-1]), spec.head_cap)
    check_grow_status(visited, max_depth)
    return out.acc, out.exp, out.dep, int(visited), float(t_end)


def compile_pass_callees(spec: Spec, budgets: np.ndarray) -> None:
    """Compile (or load) what the optimal tree calls once a pass is done (scoring, aiming,
    wider buffers; :func:`~brwsim.kernels.tree.pass_callees`) for a run of ``spec`` at
    ``budgets``, without growing a tree: in a process beside the run
    (:mod:`brwsim.beside`), ahead of the tree kernel that calls them."""
    for kernel, sig in pass_callees(_workspace(int(budgets[-1]), spec.head_cap), spec.head_cap,
                                    budgets, Out.new(budgets.size, 1)):
        kernel.compile(sig)


def run_forest(spec: Spec, budgets: np.ndarray, key: np.uint64, first: int, count: int, batch: int,
               t_start: float = math.nan, max_depth: int = NO_DEPTH_CAP, split: bool = True
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int, float]:
    """Iterations ``first .. first + count - 1`` of forests of ``batch`` roots: the numba call.

    The budget P is shared by the batch: the allocation is the top P by path probability
    over the forest. With ``split`` the equal split (request r gets
    floor(P/B) + (r < P mod B) nodes of its own tree) is scored on the same roots.

    Returns
    -------
    accepted, expected_accepted, depth : numpy.ndarray
        Forest totals (and the deepest node), shape (len(budgets), count).
    accepted_split, expected_accepted_split : numpy.ndarray
        The equal split's totals (uninitialised when ``split`` is False).
    visited, visited_split : int
        Nodes visited by the shared passes and by the split's extra single-root passes.
    t_end : float
        Final threshold, a good start for the next call.
    """
    out = Out.new(budgets.size, count)
    out_s = Out.new(budgets.size, count)     # (its depth is not written)
    if not math.isfinite(t_start):
        t_start = start_threshold(budgets[-1] / batch)
    visited, visited1, t_end = answering(forest_chunk, law(spec), spec.head_cap, key, first,
                                         count, batch, budgets, max_depth, t_start, split,
                                         out, out_s)
    check_grow_status(visited, max_depth)
    return (out.acc, out.exp, out.dep, out_s.acc, out_s.exp, int(visited), int(visited1),
            float(t_end))


