"""brwsim.export: predicted schedules and the engines' synthetic-acceptance settings."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from brwsim import Dirichlet, Fixed, UserError, simulate
from brwsim.cli import main
from brwsim.export import ENGINES, engine_settings, predicted_schedule, schedule_from_rates


def _vllm_length_to_rates(length, n):
    """vLLM's SpeculativeConfig._acceptance_length_to_rates (vllm-project/vllm @ 002e77c,
    vllm/config/speculative.py), ported: the minimum-variance schedule of a mean length."""
    num_drafts = length - 1
    num_full = int(num_drafts)
    return ([1.0] * num_full + [num_drafts - num_full] + [0.0] * (n - num_full - 1))[:n]


def test_chain_schedule_on_fixed_is_geometric():
    """Fixed([0.6, 0.3]): the chain's x-th token is accepted with 0.6^x (4.5 SE)."""
    n = 20000
    s = predicted_schedule(Fixed([0.6, 0.3]), "chain()", 5, iterations=n, seed=2)
    want = 0.6 ** np.arange(1, 6)
    se = np.sqrt(want * (1 - want) / n)
    assert np.all(np.abs(s.rates - want) < 4.5 * se)
    np.testing.assert_allclose(s.acceptance_length, 1 + s.rates.sum(), rtol=1e-12)
    assert abs(s.acceptance_length - (1 + want.sum())) < 4.5 * s.acceptance_length_se
    np.testing.assert_allclose(s.conditional[1:], s.rates[1:] / s.rates[:-1])


def test_optimal_schedule_matches_the_simulation_and_its_depth():
    fam = Dirichlet(0.1, 50)
    s = predicted_schedule(fam, "optimal()", 32, iterations=3000, seed=5)
    ds = simulate(fam, [32], 3000, seed=5)
    x = ds.accepted.values.ravel()
    assert s.rates.size == x.max()                 # the deepest accepted path
    np.testing.assert_allclose(s.acceptance_length, 1 + x.mean(), rtol=1e-12)
    assert np.all(np.diff(s.rates) <= 0) and s.rates[0] <= 1
    cut = predicted_schedule(fam, "optimal()", 32, iterations=3000, seed=5, positions=2)
    np.testing.assert_allclose(cut.rates, s.rates[:2])
    assert cut.acceptance_length == pytest.approx(1 + np.minimum(x, 2).mean())


def test_engine_settings_conventions():
    s = schedule_from_rates([0.9, 0.7, 0.45, 0.2])
    out = engine_settings(s)
    assert set(ENGINES) <= set(out) and out["num_speculative_tokens"] == 4
    al = out["acceptance_length"]
    assert al == pytest.approx(3.25)
    cfg = out["vllm"]["speculative_config"]
    assert cfg["rejection_sample_method"] == "synthetic"
    assert cfg["synthetic_acceptance_rates"] == [0.9, 0.7, 0.45, 0.2]
    assert float(out["sglang"]["env"]["SGLANG_SIMULATE_ACC_LEN"]) == pytest.approx(al)
    # TensorRT-LLM counts accepted draft tokens only: AL - 1, written as an integer
    trt = out["tensorrt_llm"]
    assert trt["env"]["TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"] == "2"      # round(2.25)
    assert int(trt["env"]["TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"]) == 2   # int() parses it
    assert float(trt["fractional_value"]) == pytest.approx(al - 1)
    assert trt["integer_acceptance_length"] == 3 and "int()" in trt["rounding"]
    # the same mean as vLLM's own resolution of a synthetic_acceptance_length
    assert 1 + sum(_vllm_length_to_rates(al, 4)) == pytest.approx(al)
    assert engine_settings(s, engines=["sglang"]).keys() == {"acceptance_length", "checked_against",
                                                            "num_speculative_tokens", "sglang"}


def test_rounding_keeps_rates_non_increasing():
    s = schedule_from_rates([0.333339, 0.333336, 0.1])
    r = engine_settings(s)["vllm"]["speculative_config"]["synthetic_acceptance_rates"]
    assert r == sorted(r, reverse=True)


@pytest.mark.parametrize("make,needle", [
    (lambda: schedule_from_rates([]), "rates"),
    (lambda: schedule_from_rates([0.5, 0.7]), "non-increasing"),
    (lambda: schedule_from_rates([1.2]), "rates"),
    (lambda: predicted_schedule(Fixed([0.5]), "chain()", 0), "budget"),
    (lambda: predicted_schedule(Fixed([0.5]), "bogus()", 2), "unknown policy"),
    (lambda: predicted_schedule(Fixed([0.5]), "chain()", 2, iterations=1), "iterations"),
    (lambda: predicted_schedule(Fixed([0.5]), "chain()", 2, positions=0), "positions"),
    (lambda: engine_settings(schedule_from_rates([0.5]), engines=["triton"]), "unknown engine"),
])
def test_bad_input_raises_user_error(make, needle):
    with pytest.raises(UserError, match=needle):
        make()


def test_cli_writes_json_and_rejects_bad_input(tmp_path, capsys):
    out = tmp_path / "acc.json"
    assert main(["export-acceptance", "--family", "fixed(probs=[0.6, 0.3])", "--budget", "3",
                 "--iterations", "500", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == data
    rates = data["vllm"]["speculative_config"]["synthetic_acceptance_rates"]
    assert len(rates) == 3 and math.isclose(data["acceptance_length"], 1 + sum(rates),
                                            abs_tol=1e-9)
    bad = tmp_path / "bad.json"
    assert main(["export-acceptance", "--budget", "3", "--policy", "bogus()", "--out",
                 str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown policy" in err and not bad.exists()


def test_integers_where_engines_parse_integers_and_halves_round_up():
    """Every value a consumer parses with int() is an integer string; 1.5 -> 2, 2.49 -> 2."""
    for rates, want in (([1.0, 0.5], "2"), ([1.0, 0.49], "1"), ([0.5, 0.0], "1"), ([0.2], "0")):
        env = engine_settings(schedule_from_rates(rates))["tensorrt_llm"]["env"]
        assert env["TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"] == want, rates
    out = engine_settings(schedule_from_rates([0.9, 0.7, 0.45, 0.2]))
    for key, value in out["sglang"]["server_args"].items():
        assert isinstance(value, int) and not isinstance(value, bool), key
    assert set(out["checked_against"]) == set(ENGINES)
    assert all(out["checked_against"][e] for e in ENGINES)


def test_sglang_token_mode_and_the_steps_that_hold_the_schedule():
    out = engine_settings(schedule_from_rates([0.9, 0.7, 0.45, 0.2]))["sglang"]
    assert out["env"]["SGLANG_SIMULATE_ACC_TOKEN_MODE"] == "real-draft-token"
    assert out["env"]["SGLANG_SIMULATE_ACC_METHOD"] == "match-expected"
    args = out["server_args"]
    # the simulated length is clamped to num_steps + 1; real-draft-token needs topk 1
    assert args["--speculative-num-steps"] + 1 >= float(out["env"]["SGLANG_SIMULATE_ACC_LEN"])
    assert args["--speculative-num-steps"] == 4 and args["--speculative-eagle-topk"] == 1
    assert args["--speculative-num-draft-tokens"] == 5


def test_vllm_speculative_config_is_complete_and_pasteable():
    s = schedule_from_rates([0.9, 0.7, 0.45, 0.2])
    out = engine_settings(s)["vllm"]
    cfg = out["speculative_config"]
    assert cfg["method"] == "ngram" and cfg["num_speculative_tokens"] == 4
    assert cfg["rejection_sample_method"] == "synthetic"
    assert len(cfg["synthetic_acceptance_rates"]) == cfg["num_speculative_tokens"]
    flag, text = out["serve_args"]
    assert flag == "--speculative-config" and json.loads(text) == cfg
    own = engine_settings(s, vllm_drafter={"method": "eagle3", "model": "my/eagle3"})["vllm"]
    assert own["speculative_config"]["model"] == "my/eagle3"
    with pytest.raises(UserError, match="method"):
        engine_settings(s, vllm_drafter={"model": "x"})
