"""A sweep compiles each kernel once in the driver before fanning out (issue 39): one
warm-up call per kernel group and kind of call, and the first theory task of each kind of
family run in the driver."""

from __future__ import annotations

from brwsim.sweep import execute
from brwsim.sweep.config import load_config


def _tasks(tmp_path, extra=None):
    cfg = load_config({"sweep": {"iterations": 4, "chunk": 2, "budgets": [1, 4],
                                 "prediction": "numerical", **(extra or {}),
                                 "family": [{"name": "zipf", "s": [1.1, 1.2], "vocab": 10},
                                            {"name": "dirichlet", "alpha": [0.1, 0.3],
                                             "vocab": 50}]}})
    (tmp_path / "shards").mkdir()
    return list(execute._tasks(cfg, tmp_path / "shards", False))


def test_one_warm_up_call_per_kernel_group_and_policy(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(execute, "run_iterations", lambda spec, *a: calls.append(
        ("optimal", execute._kernel_group(spec), a[0].tolist(), a[-1])))
    monkeypatch.setattr(execute, "run_policy", lambda pol, spec, *a: calls.append(
        (repr(pol), execute._kernel_group(spec), a[0].tolist(), a[-1])))
    tasks = _tasks(tmp_path, {"policy": [{"name": "optimal"}, {"name": "chain"}]})
    execute._warm_numba(tasks)
    groups = {execute._kernel_group(t.spec) for t in tasks if isinstance(t, execute.ChunkTask)}
    # every (call, group) once, one tree at the smallest budget
    assert len(calls) == len(set((c[0], c[1]) for c in calls)) == 2 * len(groups)
    assert {c[0] for c in calls} == {"optimal", "chain()"}
    assert all(c[2] == [1] and c[3] == 1 for c in calls)


def test_first_theory_task_of_each_family_kind_runs_in_the_driver(tmp_path):
    tasks = _tasks(tmp_path)
    here = execute._theory_here(tasks)
    assert [type(t.family).__name__ for t in here] == ["Zipf", "Dirichlet"]
    assert all(isinstance(t, execute.TheoryTask) for t in here)
    assert [t.point for t in here] == sorted(t.point for t in here)
