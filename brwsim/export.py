"""Predicted acceptance schedules in the forms serving engines take for synthetic acceptance.

Serving engines can replace real verification by a forced acceptance pattern, so that a
server is benchmarked at a chosen acceptance length (InferenceX pins its AgentX runs to
golden curves this way). This module turns brwsim's prediction for a family and a drafting
policy into those settings, so a server can be benchmarked at brwsim's speed-of-light:

``vllm``
    ``--speculative-config`` keys (``vllm-project/vllm``, ``vllm/config/speculative.py``,
    commit 002e77c): ``rejection_sample_method="synthetic"`` with
    ``synthetic_acceptance_rates``, the per-position *unconditional* rates (entry i is the
    probability that the first i + 1 draft tokens are all accepted; length
    ``num_speculative_tokens``, non-increasing), or the mean ``synthetic_acceptance_length``
    in [1, K + 1], which vLLM resolves to the minimum-variance schedule.
``sglang``
    environment variables (``sgl-project/sglang``, ``python/sglang/srt/environ.py``, commit
    21ff4b0): ``SGLANG_SIMULATE_ACC_LEN`` (the mean acceptance length, bonus token included)
    and ``SGLANG_SIMULATE_ACC_METHOD`` (``match-expected``, the current default).
``tensorrt_llm``
    ``TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS`` (``NVIDIA/TensorRT-LLM``,
    ``tensorrt_llm/_torch/speculative/interface.py``, commit 00b6d5a): accepted *draft*
    tokens, the bonus token excluded, so acceptance length - 1; fractional on the one-model
    path (integer part always accepted, the fraction is the probability of one more), read
    as an integer on the two-model path.

Only vLLM's rates carry the whole distribution of the accepted count; the other two take
its mean. A tree policy's schedule is the distribution of its accepted path length; an
engine that replays it drafts a chain of that many tokens, so the verification cost of a
P-node tree is not reproduced, only the accepted tokens per call.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from brwsim.errors import UserError
from brwsim.families import Family, parse_family
from brwsim.policies import Chain, Policy, parse_policy
from brwsim.simulate import simulate
from brwsim.validate import check_range, echo

__all__ = ["Schedule", "ENGINES", "predicted_schedule", "schedule_from_rates", "engine_settings"]

#: Engines :func:`engine_settings` writes for.
ENGINES = ("vllm", "sglang", "tensorrt_llm")
#: Most decimal places :func:`engine_settings` writes.
MAX_DIGITS = 15


class Schedule(NamedTuple):
    """An acceptance schedule of K draft positions.

    Attributes
    ----------
    rates : numpy.ndarray
        Unconditional per-position rates, ``rates[i] = P(X >= i + 1)`` (non-increasing).
    acceptance_length : float
        Mean tokens per target call, ``1 + sum(rates)`` (bonus token included).
    acceptance_length_se : float
        Monte Carlo standard error of ``acceptance_length`` (0 for a given schedule).
    """

    rates: np.ndarray
    acceptance_length: float
    acceptance_length_se: float

    @property
    def conditional(self) -> np.ndarray:
        """Per-position acceptance P(X >= x | X >= x - 1), NaN after a zero rate."""
        prev = np.concatenate([[1.0], self.rates[:-1]])
        out = np.full(self.rates.size, np.nan)
        np.divide(self.rates, prev, out=out, where=prev > 0)
        return out


def schedule_from_rates(rates) -> Schedule:
    """A schedule from given unconditional rates (each in [0, 1], non-increasing).

    Raises
    ------
    brwsim.errors.UserError
        On an empty, out-of-range or increasing list.
    """
    try:
        r = np.asarray(rates, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise UserError(f"rates must be a list of probabilities, got {rates!r}") from None
    if r.size == 0 or not np.all(np.isfinite(r)) or np.any(r < 0) or np.any(r > 1):
        raise UserError("rates must be a non-empty list of probabilities in [0, 1]")
    if np.any(np.diff(r) > 0):
        raise UserError("unconditional rates must be non-increasing (P(X >= x) cannot grow "
                        "with x)")
    return Schedule(r, 1.0 + float(r.sum()), 0.0)


def predicted_schedule(family, policy="chain()", budget: int = 4, iterations: int = 20000,
                       seed: int = 0, positions: int | None = None) -> Schedule:
    """The accepted-count distribution of a policy's tree of ``budget`` nodes, by Monte Carlo.

    Parameters
    ----------
    family : Family or str
        The environment (a family or its string form).
    policy : Policy or str, default "chain()"
        The drafting policy; ``"optimal()"`` is the speed-of-light.
    budget : int, default 4
        Draft nodes P (root excluded); for a chain, the engine's num_speculative_tokens.
    iterations : int, default 20000
        Independent calls simulated.
    seed : int, default 0
        Root seed.
    positions : int, optional
        Number of positions K of the schedule (default: ``budget`` for a chain, else the
        deepest accepted path seen, at least 1), at most ``budget``. Rates beyond K are cut
        (an engine with K draft slots cannot accept more).

    Returns
    -------
    Schedule
    """

    fam = parse_family(family) if isinstance(family, str) else family
    if not isinstance(fam, Family):
        raise UserError(f"family must be a brwsim family or its string form, got {family!r}")
    pol = parse_policy(policy) if isinstance(policy, str) else policy
    if not isinstance(pol, Policy):
        raise UserError(f"policy must be a brwsim policy or its string form, got {policy!r}")
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 1:
        raise UserError(f"budget must be an integer >= 1, got {budget!r}")
    if isinstance(iterations, bool) or not isinstance(iterations, (int, np.integer)) \
            or iterations < 2:
        raise UserError(f"iterations must be an integer >= 2, got {iterations!r}")
    if positions is not None:  # an accepted path holds at most ``budget`` draft tokens
        positions = check_range("positions", positions, 1, int(budget), integer=True,
                                why="an accepted path holds at most budget tokens")
    ds = simulate(fam, [int(budget)], int(iterations), seed=seed, policies=[pol])
    x = np.asarray(ds.accepted.values).reshape(-1).astype(np.int64)
    if positions is None:
        positions = int(budget) if isinstance(pol, Chain) else max(1, int(x.max()))
    xk = np.minimum(x, positions)
    rates = np.array([(xk >= i).mean() for i in range(1, positions + 1)])
    return Schedule(rates, 1.0 + float(xk.mean()), float(xk.std(ddof=1) / math.sqrt(xk.size)))


def engine_settings(schedule: Schedule, engines=ENGINES, digits: int = 4) -> dict[str, Any]:
    """The settings that make each engine accept like ``schedule``.

    Parameters
    ----------
    schedule : Schedule
        From :func:`predicted_schedule` or :func:`schedule_from_rates`.
    engines : sequence of str, default all of :data:`ENGINES`
        Which engines to write for.
    digits : int, default 4
        Decimal places of the written numbers, 0 to :data:`MAX_DIGITS` (rates are kept
        non-increasing).

    Returns
    -------
    dict
        ``{"vllm": {"speculative_config": {...}}, "sglang": {"env": {...}},
        "tensorrt_llm": {"env": {...}}}`` (the requested engines), plus
        ``"acceptance_length"`` and ``"num_speculative_tokens"``.
    """
    if not isinstance(schedule, Schedule):
        raise UserError(f"schedule must be a brwsim.export.Schedule, got {schedule!r}")
    digits = check_range("digits", digits, 0, MAX_DIGITS, integer=True,
                         why="float64 holds about 15 significant digits")
    if isinstance(engines, str) or not isinstance(engines, (list, tuple)) \
            or not all(isinstance(e, str) for e in engines):
        raise UserError(f"engines must be a list of engine names ({', '.join(ENGINES)}), "
                        f"got {echo(engines)}")
    bad = [e for e in engines if e not in ENGINES]
    if bad or isinstance(engines, str):
        raise UserError(f"unknown engine(s) {bad or engines!r}; known: {', '.join(ENGINES)}")
    k = int(schedule.rates.size)
    rates = np.minimum.accumulate(np.round(schedule.rates, digits))
    al = round(1.0 + float(rates.sum()), digits)
    out: dict[str, Any] = {"acceptance_length": al, "num_speculative_tokens": k}
    if "vllm" in engines:
        out["vllm"] = {"speculative_config": {
            "num_speculative_tokens": k, "rejection_sample_method": "synthetic",
            "synthetic_acceptance_rates": [float(r) for r in rates]}}
    if "sglang" in engines:
        out["sglang"] = {"env": {"SGLANG_SIMULATE_ACC_LEN": f"{al:.{digits}f}",
                                 "SGLANG_SIMULATE_ACC_METHOD": "match-expected"}}
    if "tensorrt_llm" in engines:
        out["tensorrt_llm"] = {"env": {
            "TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS": f"{al - 1.0:.{digits}f}"}}
    return out
