"""Predicted acceptance schedules in the forms serving engines take for synthetic acceptance.

Serving engines can replace real verification by a forced acceptance pattern, so that a
server is benchmarked at a chosen acceptance length (InferenceX pins its AgentX runs to
golden curves this way). This module turns brwsim's prediction for a family and a drafting
policy into those settings, so a server can be benchmarked at brwsim's speed-of-light:

``vllm``
    a complete ``--speculative-config`` JSON (``vllm-project/vllm``, ``vllm/config/speculative.py``;
    checked against commit 002e77c and the 0.28.0 release): ``rejection_sample_method="synthetic"``
    with ``synthetic_acceptance_rates``, the per-position *unconditional* rates (entry i is
    the probability that the first i + 1 draft tokens are all accepted; length
    ``num_speculative_tokens``, non-increasing), and a drafter (``method`` and its keys;
    by default the weight-free ``ngram`` proposer). The synthetic sampler lives in vLLM's
    shared rejection sampler, so it composes with every proposer; it can only accept
    tokens that were drafted, so a proposer that drafts fewer than K tokens (ngram without
    a prompt match) accepts fewer: pass your model's drafter (``{"method": "eagle3",
    "model": ...}``) for the exact schedule.
``sglang``
    environment variables (``sgl-project/sglang``, ``python/sglang/srt/environ.py``, commit
    21ff4b0, and the EAGLE verify path that reads them): ``SGLANG_SIMULATE_ACC_LEN`` (the
    mean acceptance length, bonus token included), ``SGLANG_SIMULATE_ACC_METHOD``
    (``match-expected``) and ``SGLANG_SIMULATE_ACC_TOKEN_MODE=real-draft-token`` (the
    drafted tokens are kept; the default ``fixed`` emits a fixed token id, which breaks
    per-request latency and output checks); ``real-draft-token`` requires
    ``--speculative-eagle-topk 1``. The simulated accept index has ``num_steps + 1``
    slots, so a length above ``--speculative-num-steps + 1`` is silently clamped: the
    server arguments needed (``--speculative-num-steps K``, ``--speculative-eagle-topk 1``,
    ``--speculative-num-draft-tokens K + 1``) are written alongside.
``tensorrt_llm``
    ``TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS`` (``NVIDIA/TensorRT-LLM``,
    ``tensorrt_llm/_torch/speculative/interface.py``): accepted *draft* tokens, the bonus
    token excluded, so acceptance length - 1. Written as an **integer**, the nearest one
    (halves round up): ``get_force_num_accepted_tokens`` parses it with ``int()`` on the
    two-model path and in releases before fractional forcing (a value such as ``"2.25"``
    then fails, with only a warning, and forcing is off), and the environment registry
    declares it ``int``. The fractional value (AL - 1, which the one-model path of
    releases with ``get_force_num_accepted_tokens_float``, e.g. commit 00b6d5a, takes as
    "integer part always, fraction the probability of one more") is written next to it
    as ``fractional_value``, with the acceptance length the integer implies.

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

__all__ = ["Schedule", "ENGINES", "CHECKED_AGAINST", "VLLM_DEFAULT_DRAFTER", "predicted_schedule",
           "schedule_from_rates", "engine_settings"]

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


#: The engine versions each setting of :func:`engine_settings` was checked against.
CHECKED_AGAINST = {
    "vllm": "vllm-project/vllm vllm/config/speculative.py @ 002e77c; vLLM 0.28.0 "
            "(rejection_sample_method='synthetic', synthetic_acceptance_rates)",
    "sglang": "sgl-project/sglang python/sglang/srt/environ.py @ 21ff4b0 and its EAGLE verify "
              "path (SGLANG_SIMULATE_ACC_TOKEN_MODE in {'fixed', 'real-draft-token'})",
    "tensorrt_llm": "NVIDIA/TensorRT-LLM tensorrt_llm/_torch/speculative/interface.py: int() in "
                    "get_force_num_accepted_tokens (two-model path, older releases); "
                    "get_force_num_accepted_tokens_float on the one-model path @ 00b6d5a",
}

#: The default vLLM drafter of :func:`engine_settings`: needs no weights.
VLLM_DEFAULT_DRAFTER = {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 8}


def _round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def engine_settings(schedule: Schedule, engines=ENGINES, digits: int = 4,
                    vllm_drafter: dict[str, Any] | None = None) -> dict[str, Any]:
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
    vllm_drafter : dict, optional
        The drafter keys of vLLM's ``speculative_config`` (``method``, ``model``, ...);
        default :data:`VLLM_DEFAULT_DRAFTER`.

    Returns
    -------
    dict
        ``{"vllm": {"speculative_config": {...}, "serve_args": [...]}, "sglang": {"env":
        {...}, "server_args": {...}}, "tensorrt_llm": {"env": {...}, ...}}`` (the requested
        engines), plus ``"acceptance_length"``, ``"num_speculative_tokens"`` and
        ``"checked_against"`` (the engine version of each setting).
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
    drafter = dict(VLLM_DEFAULT_DRAFTER if vllm_drafter is None else vllm_drafter)
    if not isinstance(drafter.get("method"), str) or not drafter["method"]:
        raise UserError(f"vllm_drafter needs a 'method' (e.g. 'ngram', 'eagle3'), got {vllm_drafter!r}")
    k = int(schedule.rates.size)
    rates = np.minimum.accumulate(np.round(schedule.rates, digits))
    al = round(1.0 + float(rates.sum()), digits)
    out: dict[str, Any] = {"acceptance_length": al, "num_speculative_tokens": k,
                           "checked_against": {e: CHECKED_AGAINST[e] for e in engines}}
    if "vllm" in engines:
        import json

        cfg = {**drafter, "num_speculative_tokens": k, "rejection_sample_method": "synthetic",
               "synthetic_acceptance_rates": [float(r) for r in rates]}
        out["vllm"] = {"speculative_config": cfg,
                       "serve_args": ["--speculative-config", json.dumps(cfg, separators=(",", ":"))]}
    if "sglang" in engines:
        out["sglang"] = {
            "env": {"SGLANG_SIMULATE_ACC_LEN": f"{al:.{digits}f}",
                    "SGLANG_SIMULATE_ACC_METHOD": "match-expected",
                    "SGLANG_SIMULATE_ACC_TOKEN_MODE": "real-draft-token"},
            # the simulated length is clamped to num_steps + 1: K steps hold the schedule
            "server_args": {"--speculative-num-steps": k, "--speculative-eagle-topk": 1,
                            "--speculative-num-draft-tokens": k + 1}}
    if "tensorrt_llm" in engines:
        frac = round(al - 1.0, digits)
        n_int = _round_half_up(frac)
        out["tensorrt_llm"] = {
            "env": {"TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS": str(n_int)},
            "rounding": "nearest integer to acceptance_length - 1, halves up (the variable is "
                        "parsed with int(); accepted draft tokens, bonus token excluded)",
            "integer_acceptance_length": n_int + 1,
            "fractional_value": f"{frac:.{digits}f}",
            "max_draft_len_needed": max(n_int, math.ceil(frac)),
        }
    return out
