"""Proven bounds of context-dependent environments (brwsim.theory.contextual) and the labels
that never show an i.i.d. marginal's value under a bound's or prediction's name."""

from __future__ import annotations

import math

import numpy as np
import pytest

from brwsim import (CorrelatedEntropy, Dirichlet, EntropyTarget, Geometric,
                    MarkovRegime, Mixture, Tempered, parse_family, simulate)
from brwsim.cli.common import bound_check
from brwsim.theory import NoTheory, prediction, spine_steps, theory_curves, upper_bound
from brwsim.theory.contextual import DepthSpine, RegimeSpine, context_values
from tests.conftest import mean_se

EASY, HARD = Geometric(0.05), Dirichlet(0.3, 50)
P = np.array([1, 4, 16, 64, 256, 1024, 4096, 16384, 65536])
H = 2e-3                                           # one grid for both sides of a comparison

# the issue's families (MC of the false marginal "bound" and of E[X] in issue 22)
ISSUE = {
    "markovregime": "markovregime(families=[geometric(r=0.02), dirichlet(alpha=0.3, vocab=50)], "
                    "weights=[0.6, 0.4], persistence=0.95)",
    "depthdrift": "depthdrift(families=[dirichlet(alpha=0.3, vocab=50), geometric(r=0.02)])",
    "correlatedentropy": "correlatedentropy(entropies=[0.1, 3.0], rho=0.95)",
}


def test_regime_without_memory_is_the_iid_mixture():
    """persistence 0: every child's regime is a fresh draw, the i.i.d. mixture exactly."""
    regime = MarkovRegime([EASY, HARD], weights=[0.6, 0.4], persistence=0.0)
    mix = Mixture([EASY, HARD], [0.6, 0.4])
    np.testing.assert_allclose(upper_bound(regime, P, h=H).value, upper_bound(mix, P, h=H).value,
                               rtol=1e-9)
    np.testing.assert_allclose(prediction(regime, P, h=H), prediction(mix, P, h=H), rtol=1e-9)


def test_regime_of_one_law_is_that_law():
    regime = MarkovRegime([HARD, HARD], weights=[0.3, 0.7], persistence=0.8)
    np.testing.assert_allclose(upper_bound(regime, P, h=H).value,
                               upper_bound(HARD, P, h=H).value, rtol=1e-9)


def test_depth_spine_matches_the_regime_solver_on_a_forced_chain():
    """Two independent solvers: the matrix Newton inverse of a regime chain that moves
    from regime 0 to regime 1 for good, against the convolution of the depth spine."""
    laws = [spine_steps(HARD), spine_steps(Geometric(0.3))]
    depth = context_values(DepthSpine(laws), P, H, "floor")[0]
    chain = context_values(RegimeSpine(laws, [[0.0, 1.0], [0.0, 1.0]], [1.0, 0.0]), P, H,
                           "floor")[0]
    np.testing.assert_allclose(depth, chain, rtol=1e-9)
    one = context_values(DepthSpine(laws[1:]), P, H, "floor")[0]
    np.testing.assert_allclose(one, upper_bound(Geometric(0.3), P, h=H).value, rtol=1e-9)


def test_one_entropy_value_is_the_iid_family():
    ce = CorrelatedEntropy([0.7], rho=0.9)
    np.testing.assert_allclose(upper_bound(ce, P, h=H).value,
                               upper_bound(EntropyTarget([0.7]), P, h=H).value, rtol=1e-9)
    with pytest.raises(NoTheory, match="dominating law"):
        prediction(ce, P)


def test_depthdrift_at_p1_is_above_the_exact_top1():
    """At P = 1 the optimal tree is the root's top child: E[X] = E[max q] of families[0]."""
    dd = parse_family(ISSUE["depthdrift"])
    top1 = float(simulate(HARD, [1], 2000, seed=3).expected_accepted.values.mean())
    assert upper_bound(dd, [1]).value[0] >= top1 - 0.01


def test_no_theory_for_a_tempered_context_family():
    fam = Tempered(MarkovRegime([EASY, HARD], weights=[0.6, 0.4], persistence=0.9), 1.3)
    with pytest.raises(NoTheory, match="context-dependent"):
        upper_bound(fam, [1, 16])
    curves = theory_curves(fam, [1, 16])
    for name in ("prediction", "prediction_se", "upper_bound", "upper_bound_se",
                 "prediction_asymptotic"):
        assert np.isnan(curves.values[name]).all()
        assert "context-dependent" in curves.reasons[name]


def test_datasets_store_the_contextual_bound_and_nan_with_reasons():
    ds = simulate(parse_family(ISSUE["markovregime"]), [1, 16], 4, seed=1)
    assert np.isfinite(ds["upper_bound"].values).all()
    assert "reason" not in ds["upper_bound"].attrs
    assert np.isnan(ds["paper_bound"].values).all()
    assert "i.i.d." in ds["paper_bound"].attrs["reason"]
    assert np.isnan(ds["prediction_asymptotic"].values).all()
    assert ds["prediction_asymptotic"].attrs["reason"]
    ds = simulate(parse_family("ngram(corpus=prose, order=3)"), [1, 16], 4, seed=1)
    for name in ("upper_bound", "prediction"):
        assert np.isnan(ds[name].values).all()
        assert "context-dependent" in ds[name].attrs["reason"]


def test_the_old_marginal_value_was_not_a_bound():
    """The issue's measurement: the marginal law's 'bound' at P = 4096 was 7.30 against
    Monte Carlo 25.46 +- 0.50; the contextual bound is above it."""
    fam = parse_family(ISSUE["markovregime"])
    old = upper_bound(spine_steps(fam), [4096]).value[0]
    assert old == pytest.approx(7.30, abs=0.01)
    assert upper_bound(fam, [4096]).value[0] >= 25.46 - 4 * 0.50


@pytest.mark.parametrize("mean, se, bound, want", [
    (3.40, 0.01, 3.4172, "below"), (3.4384, 0.02, 3.4172, "within SE"),
    (3.60, 0.02, 3.4172, "ABOVE (bug)"), (3.0, 0.1, math.nan, "n/a")])
def test_bound_check_labels(mean, se, bound, want):
    assert bound_check(mean, se, bound) == want


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ISSUE))
def test_contextual_bound_is_above_monte_carlo(name):
    """Bound >= MC - 4 SE at P = 1..65536 (log grid); modest iterations (one-sided test)."""
    fam = parse_family(ISSUE[name])
    budgets = [1, 8, 64, 512, 4096, 65536]
    bound = upper_bound(fam, budgets).value
    e = simulate(fam, budgets, 40, seed=11).expected_accepted.values
    for i, p in enumerate(budgets):
        m, se = mean_se(e[i])
        assert bound[i] >= m - 4 * se, (p, bound[i], m, se)


@pytest.mark.parametrize("mode", ["split", "floor"])
def test_the_dominated_spine_takes_the_largest_distribution_function_cell_by_cell(mode):
    """The largest of the laws' distribution functions, from their nonzero cells only, is
    bit for bit the one from cumulative sums over the whole grid."""
    from brwsim.theory.contextual import DominatedSpine, _renewal_from
    from brwsim.theory.laws import SpineSteps

    rng = np.random.default_rng(5)
    laws = [Geometric(r).spine_law() for r in rng.uniform(0.02, 0.98, 60)]
    laws.append(SpineSteps.atoms(rng.uniform(0.1, 4.0, 7), 0.9 * rng.dirichlet(np.ones(7))))
    h, size = 0.004, 6000
    cdf = None
    for law in laws:
        c = law.cells(h, size, mode)
        m = law.mass if math.isfinite(law.mass) and law.mass >= c.sum() else c.sum()
        c = np.cumsum(c) / m
        cdf = c if cdf is None else np.maximum(cdf, c)
    f = np.diff(np.concatenate([[0.0], np.minimum(cdf, 1.0)]))
    got = DominatedSpine(laws).density(laws, h, size, mode)
    np.testing.assert_array_equal(got, _renewal_from(f, root=False))
