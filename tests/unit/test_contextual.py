"""Context-dependent environments, generation runs and moments along paths."""

from __future__ import annotations

import numpy as np
import pytest

from brwsim import (CorrelatedEntropy, DepthDrift, Dirichlet, EntropyTarget, Geometric, MarkovRegime,
                    Mixture, UserError, Zipf, parse_family, simulate)
from brwsim.environment import node_logprobs, path_uniform
from brwsim.generate import generate, path_moments
from brwsim.reference import best_first, env_provider
from tests.conftest import mean_se

EASY, HARD = Geometric(0.05), Dirichlet(0.3, 200)
CONTEXTUAL = [MarkovRegime([EASY, HARD], weights=[0.6, 0.4], persistence=0.9),
              DepthDrift.tempered(Zipf(1.3, 1000), [1.0, 1.3, 1.8]),
              CorrelatedEntropy([0.2, 0.5, 1.0, 2.0, 3.0], 0.9)]


@pytest.mark.parametrize("fam", CONTEXTUAL, ids=lambda f: f.name)
def test_contextual_trees_match_reference(fam):
    budgets = [1, 5, 30]
    ds = simulate(fam, budgets, 3, seed=4)
    for it in range(3):
        e, a, d = best_first(env_provider(fam, 4, it, k=256), budgets,
                             lambda p, it=it: path_uniform(4, it, p))
        np.testing.assert_allclose(ds.expected_accepted.values[:, it], e, atol=1e-12)
        assert list(ds.accepted.values[:, it]) == a


def _diff_within_se(a, b):
    (ma, sa), (mb, sb) = mean_se(a), mean_se(b)
    assert abs(ma - mb) <= 4.5 * np.hypot(sa, sb), (ma, mb, sa, sb)


def test_persistence_zero_is_the_iid_mixture():
    regime = MarkovRegime([EASY, HARD], weights=[0.6, 0.4], persistence=0.0)
    mix = Mixture([EASY, HARD], [0.6, 0.4])
    a = simulate(regime, [16], 3000, seed=1).expected_accepted.values[0]
    b = simulate(mix, [16], 3000, seed=2).expected_accepted.values[0]
    _diff_within_se(a, b)


def test_rho_zero_is_the_iid_entropy_target():
    ent = [0.2, 0.5, 1.0, 2.0, 3.0]
    a = simulate(CorrelatedEntropy(ent, 0.0), [16], 3000, seed=1).expected_accepted.values[0]
    b = simulate(EntropyTarget(ent), [16], 3000, seed=2).expected_accepted.values[0]
    _diff_within_se(a, b)


def test_persistence_changes_the_answer():
    """Long easy stretches make trees deeper: a negative control for the test above."""
    lo = simulate(MarkovRegime([EASY, HARD], weights=[0.6, 0.4], persistence=0.0), [64], 1500, seed=1)
    hi = simulate(MarkovRegime([EASY, HARD], weights=[0.6, 0.4], persistence=0.95), [64], 1500, seed=1)
    assert float(hi.expected_accepted.mean()) > float(lo.expected_accepted.mean()) + 0.5


def test_regime_is_carried_along_paths():
    fam = MarkovRegime([Geometric(0.1), Geometric(0.6)], transition=[[1.0, 0.0], [0.0, 1.0]])
    for it in range(10):
        top = np.exp(node_logprobs(fam, 0, it, (), 1))[0]
        deep = np.exp(node_logprobs(fam, 0, it, (0, 1, 0, 2), 1))[0]
        assert top == pytest.approx(deep)         # absorbing regimes never switch


def test_depth_drift_uses_depth():
    fam = DepthDrift([Geometric(0.1), Geometric(0.5)])
    assert np.exp(node_logprobs(fam, 0, 0, (), 1))[0] == pytest.approx(0.9)
    assert np.exp(node_logprobs(fam, 0, 0, (0,), 1))[0] == pytest.approx(0.5)
    assert np.exp(node_logprobs(fam, 0, 0, (0, 0, 0), 1))[0] == pytest.approx(0.5)


@pytest.mark.parametrize("text", ["markovregime(families=[geometric(0.1), zipf(s=1.2, vocab=100)], "
                                  "weights=[0.5, 0.5], persistence=0.8)",
                                  "depthdrift(families=[geometric(0.1), geometric(0.3)])",
                                  "correlatedentropy(entropies=[0.5, 1.0], rho=0.5)"])
def test_string_forms(text):
    fam = parse_family(text)
    assert repr(parse_family(repr(fam))) == repr(fam)


@pytest.mark.parametrize("make,needle", [
    (lambda: MarkovRegime([EASY, HARD], weights=[0.5, 0.5], persistence=1.0), "persistence"),
    (lambda: MarkovRegime([EASY, HARD], transition=[[0.5, 0.4], [0.5, 0.5]]), "rows"),
    (lambda: MarkovRegime([EASY, HARD]), "transition"),
    (lambda: CorrelatedEntropy([0.5], 1.0), "rho"),
    (lambda: Mixture([CONTEXTUAL[0], EASY]), "context"),
    (lambda: DepthDrift([]), "non-empty"),
])
def test_invalid_contextual(make, needle):
    with pytest.raises(UserError, match=needle):
        make()


def test_generate_iid_agrees_with_simulate():
    fam = Dirichlet(0.05, 200)
    g = generate(fam, None, 64, 6000, seed=1)
    sim = simulate(fam, [64], 2500, seed=2).accepted.values[0]
    _diff_within_se(g.accepted.values, sim)
    assert g.attrs["tokens_per_call"] == pytest.approx(1 + g.accepted.values.mean())


def test_generate_counts_tokens_and_carries_regime():
    fam = MarkovRegime([EASY, HARD], weights=[0.5, 0.5], persistence=0.95)
    g = generate(fam, None, 32, 3000, seed=3)
    assert g.attrs["tokens_produced"] >= 3000
    assert g.attrs["tokens_produced"] - (g.accepted.values[-1] + 1) < 3000
    assert set(np.unique(g.root_context.values)) <= {0, 1}
    # regimes persist: consecutive calls share their regime far more often than 50%
    same = np.mean(g.root_context.values[1:] == g.root_context.values[:-1])
    assert same > 0.7


def test_path_moments_iid_match_family_moments():
    fam = Dirichlet(0.3, 50)
    pm = path_moments(fam, 1500, 6, seed=1)
    m = fam.moments()
    assert abs(pm.mu - m.mu) < 4.5 * max(pm.mu_se, 1e-3)
    assert abs(pm.mu2 - m.mu2) < 4.5 * max(pm.mu2_se, 1e-3)
    assert pm.rows.shape == (9000, 64)


@pytest.mark.parametrize("fam", [CONTEXTUAL[0], CONTEXTUAL[2], Dirichlet(0.05, 200)], ids=lambda f: f.name)
def test_generate_policy_path_matches_optimal_path(fam):
    """noisy(sigma=0) builds the optimal trees: its Python-driven run equals the numba run."""
    a = generate(fam, None, 32, 1500, seed=2)
    b = generate(fam, "noisy(sigma=0)", 32, 1500, seed=2)
    for v in ("accepted", "expected_accepted", "depth", "root_context", "root_latent"):
        np.testing.assert_array_equal(a[v].values, b[v].values)


def test_generate_with_a_practical_policy_agrees_with_simulate():
    fam = Dirichlet(0.1, 100)
    g = generate(fam, "kary(k=2)", 16, 3000, seed=1)
    sim = simulate(fam, [16], 2000, seed=3, policies=["kary(k=2)"]).accepted.values[0, 0]
    _diff_within_se(g.accepted.values, sim)
    with pytest.raises(UserError, match="policy"):
        generate(fam, 3.5, 16, 100)
