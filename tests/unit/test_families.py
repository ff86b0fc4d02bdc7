"""Family validation, exact samplers and moments (analytic against Monte Carlo)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from brwsim import (Dirichlet, Empirical, EntropyTarget, Family, Fixed, Geometric, Mixture, Peaked,
                    SoftmaxNormal, Tempered, Uniform, UserError, Zipf, parse_family)
from brwsim.families import DEFAULT_FAMILY, FAMILIES
from brwsim.families.base import distribution_moments

INVALID = [
    (lambda: Uniform(1), "k"), (lambda: Uniform(2.5), "k"),
    (lambda: Fixed([]), "probs"), (lambda: Fixed([0.7, 0.6]), "sum"),
    (lambda: Fixed([0.5, -0.1]), "non-negative"), (lambda: Fixed([float("nan")]), "finite"),
    (lambda: Fixed([1.0]), "probability 1"),
    (lambda: Geometric(1.0), "r"), (lambda: Geometric(-0.2), "r"),
    (lambda: Zipf(-1, 10), "s"), (lambda: Zipf(1, 1), "vocab"), (lambda: Zipf(1, 10, 2), "spread"),
    (lambda: Dirichlet(-0.05, 10), "alpha"), (lambda: Dirichlet(0, 10), "alpha"),
    (lambda: Dirichlet(float("nan"), 10), "alpha"), (lambda: Dirichlet(0.1, 0), "vocab"),
    (lambda: SoftmaxNormal(-1, 10), "sigma"), (lambda: Peaked(0, 1, 1, 10), "a"),
    (lambda: Peaked(1, 1, 1, 1), "vocab"),
    (lambda: Mixture([Uniform(2)], [1, 2]), "weights"), (lambda: Mixture([], []), "non-empty"),
    (lambda: Mixture([Uniform(2), Uniform(3)], [-1, 2]), "weights"),
    (lambda: EntropyTarget([0.5], "zipf"), "vocab"), (lambda: EntropyTarget([5.0], "zipf", 10), "entropies"),
    (lambda: EntropyTarget([-0.1]), "entropies"), (lambda: EntropyTarget([0.5], "cube"), "shape"),
    (lambda: Tempered(Uniform(2), 0), "T"), (lambda: Tempered("x", 1), "family"),
    (lambda: Empirical([[0.7, 0.6]]), "sums"), (lambda: Empirical([[0.5, float("nan")]]), "NaN"),
    (lambda: Empirical([[1.0], [1.0]]), "probability 1"),
]


@pytest.mark.parametrize("make,needle", INVALID)
def test_invalid_parameters_raise_clear_errors(make, needle):
    with pytest.raises(UserError, match=needle):
        make()


def test_every_family_reachable_by_name_and_round_trips(family):
    assert family.name in FAMILIES
    if family.name != "entropytarget":       # its frozen-distribution form is not re-parsed
        again = parse_family(repr(family))
        assert repr(again) == repr(family)


def test_default_family_parses():
    assert isinstance(parse_family(DEFAULT_FAMILY), Mixture)


@pytest.mark.parametrize("text,needle", [
    ("dirichlet(alpha=0.05", "expected"), ("nosuch(1)", "unknown family"),
    ("dirichlet(alpha=0.05, vocab=200, beta=1)", "beta"), ("3", "not a family"),
    ("zipf(s=1.5, vocab=10) extra", "end of the family"), ("__import__('os')", "cannot parse|unknown"),
])
def test_parse_errors(text, needle):
    with pytest.raises(UserError, match=needle):
        parse_family(text)


def test_sample_full_is_a_sorted_distribution(family):
    rng = np.random.default_rng(0)
    for _ in range(5):
        q = family.sample_full(rng)
        assert np.all(q >= 0) and np.all(np.diff(q) <= 0)
        assert q.sum() <= 1 + 1e-9


EXACT = [Uniform(4), Fixed([0.5, 0.3, 0.15]), Geometric(0.3), Dirichlet(0.05, 200), Dirichlet(0.7, 30),
         Zipf(1.2, 1000, spread=0.3), Zipf(0.8, 5000), EntropyTarget([0.3, 1.2, 2.5]),
         EntropyTarget([0.5, 2.0], "zipf", 500), Empirical([[0.5, 0.3], [0.9, 0.05, 0.01]]),
         Mixture([Dirichlet(0.1, 50), Geometric(0.4)], [0.3, 0.7])]


def _numpy_moments(fam, n: int, seed: int) -> dict[str, tuple[float, float]]:
    """mu, mu2, E[H^2] and their SE over n exact numpy samples (``sample_full``)."""
    rng = np.random.default_rng(seed)
    vals = np.array([distribution_moments(fam.sample_full(rng)) for _ in range(n)])
    h, m2 = vals[:, 0], vals[:, 1]
    out = {}
    for name, x in (("mu", h), ("mu2", m2), ("h2", h * h)):
        out[name] = (float(x.mean()), float(x.std(ddof=1) / math.sqrt(n)))
    return out


@pytest.mark.parametrize("fam", EXACT + [Peaked(2.0, 0.5, 1.1, 256)], ids=repr)
def test_exact_moments_match_monte_carlo(fam):
    exact = fam.moments()
    assert exact.exact and exact.mu_se == 0
    mc = _numpy_moments(fam, 4000, 1)
    for name in ("mu", "mu2", "h2"):
        value = getattr(exact, name)
        if not math.isnan(value):
            assert abs(value - mc[name][0]) <= 4.5 * mc[name][1] + 1e-10, name


def test_dirichlet_moment_formulas_by_hand():
    from scipy.special import digamma, polygamma
    m = Dirichlet(0.5, 4).moments()
    assert m.mu == pytest.approx(digamma(3) - digamma(1.5))
    assert m.mu2 == pytest.approx((digamma(1.5) - digamma(3)) ** 2 + polygamma(1, 1.5) - polygamma(1, 3))


def test_entropy_target_hits_the_entropy():
    for shape, vocab in (("geometric", None), ("zipf", 300)):
        fam = EntropyTarget([0.05, 0.7, 3.0], shape, vocab)
        rng = np.random.default_rng(0)
        hs = {round(distribution_moments(fam.sample_full(rng))[0], 9) for _ in range(60)}
        assert hs <= {0.05, 0.7, 3.0}


def test_entropy_target_from_frozen_distribution():
    fam = EntropyTarget(stats.gamma(a=2.0, scale=0.5))
    assert fam.moments().mu == pytest.approx(1.0, rel=1e-3)


def test_tempering_moves_entropy_the_right_way():
    base = Zipf(1.3, 2000)
    hot, cold = Tempered(base, 1.5).moments(), Tempered(base, 0.6).moments()
    assert cold.mu < base.moments().mu < hot.mu
    # Tempered Zipf is Zipf with exponent s/T: check against the closed form
    assert Tempered(base, 0.5).moments(n=200).mu == pytest.approx(Zipf(2.6, 2000).moments().mu, abs=1e-9)


def test_mixture_moments_are_weighted():
    a, b = Dirichlet(0.1, 50), Geometric(0.4)
    m = Mixture([a, b], [0.25, 0.75]).moments()
    assert m.mu == pytest.approx(0.25 * a.moments().mu + 0.75 * b.moments().mu)


def test_fixed_tail_mass_is_outside_any_tree():
    fam = Fixed([0.4, 0.2])                    # 0.4 of the mass is a token outside any tree
    from brwsim import simulate
    ds = simulate(fam, [1], 2000, seed=0)
    assert np.allclose(ds.expected_accepted.values, 0.4)
    x = ds.accepted.values[0]
    assert abs(x.mean() - 0.4) < 4.5 * math.sqrt(0.24 / x.size)


@pytest.mark.parametrize("text", [
    "entropytarget(entropies=stats.uniform(0.2, 0.25))",
    "entropytarget(entropies=lognorm(s=0.5, scale=1.5), shape=zipf, vocab=1000)",
    "correlatedentropy(entropies=gamma(a=2.0, scale=0.5), rho=0.9)",
])
def test_families_with_scipy_distributions_print_a_parsable_deterministic_form(text):
    """The string form names the distribution (no memory address) and parses back equal."""
    from brwsim import parse_family

    fam = parse_family(text)
    form = repr(fam)
    assert "object at" not in form and "stats." in form
    again = parse_family(form)
    assert again == fam and repr(again) == form
    np.testing.assert_array_equal(again.entropies, fam.entropies)
    assert repr(parse_family(text)) == form          # the same on every construction


def test_table_splines_are_scipys_cubic_spline():
    """The kernels' spline tables (not-a-knot) are scipy.interpolate.CubicSpline's, bit for bit."""
    from scipy import interpolate

    from brwsim.families.tables import _spline_coef

    rng = np.random.default_rng(1)
    for n in (4, 5, 1025, 4097):
        for x in (np.linspace(-60.0, 4.5, n), np.sort(rng.random(n)) * 3.0):
            y = np.sin(x) * np.exp(0.1 * x) + 0.01 * rng.random(n)
            ref = np.ascontiguousarray(interpolate.CubicSpline(x, y).c[::-1].T)
            assert np.array_equal(_spline_coef(x, y), ref)
