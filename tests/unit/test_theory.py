"""Tests of brwsim.theory: the paper's bound, spine-step laws, renewal predictions.

Each family carries its own spine-step law (``Family.spine_law``); the exact laws of
Dirichlet, Zipf, Peaked and the sampled laws are tested in ``test_spine_laws.py``. The
brute-force Monte Carlo is a heapq best-first search of the top-P nodes.
"""

from __future__ import annotations

import heapq
import math

import numpy as np
import pytest
from scipy import special, stats

from brwsim.errors import UserError
from brwsim.theory import (
    SpineSteps,
    paper_bound,
    prediction,
    renewal_functions,
    spine_steps,
)


# --- families (each carries its own spine law)
from brwsim import Dirichlet, Empirical, Fixed, Geometric, Uniform  # noqa: E402


def dirichlet_steps(alpha, k, dx=2e-3, xmax=80.0):
    """Spine law of Dirichlet(alpha, k) by quadrature: -log Beta(alpha + 1, (k - 1) alpha)."""
    edges = np.arange(0.0, xmax + dx, dx)
    cdf = stats.beta.sf(np.exp(-edges), alpha + 1, (k - 1) * alpha)  # P(-log B <= edge)
    return SpineSteps(edges[:-1] + dx / 2, np.diff(cdf), exact=False)


def exponential_steps(mu, dx=1e-3, xmax=40.0):
    edges = np.arange(0.0, xmax + dx, dx)
    return SpineSteps(edges[:-1] + dx / 2, np.diff(-np.expm1(-edges / mu)), exact=False)


# --- brute force
def best_first(draw, budgets, n_iter, rng):
    """E[X | T_P] per iteration and budget, by a heapq best-first search of the top P nodes.

    `draw(rng, n)` returns n node distributions (rows sorted descending); popped node i takes
    row i + 1 (row 0 is the root's). Children enter lazily: a popped node pushes its own
    first child and its next sibling, so the heap holds O(P) entries.
    """
    budgets = np.asarray(budgets)
    p_max = int(budgets.max())
    out = np.empty((n_iter, budgets.size))
    s_popped = np.empty(p_max)
    for it in range(n_iter):
        with np.errstate(divide="ignore"):
            steps = (-np.log(draw(rng, p_max + 1))).tolist()
        width = len(steps[0])
        heap = [(steps[0][0], 0.0, 0, 0)]  # (S(child), S(parent), parent's row, rank)
        for i in range(p_max):
            s, s_parent, row, rank = heapq.heappop(heap)
            s_popped[i] = s
            if rank + 1 < width and steps[row][rank + 1] != math.inf:
                heapq.heappush(
                    heap, (s_parent + steps[row][rank + 1], s_parent, row, rank + 1)
                )
            heapq.heappush(heap, (s + steps[i + 1][0], s, i + 1, 0))
        out[it] = np.cumsum(np.exp(-s_popped))[budgets - 1]
    return out


def exact_tree(probs, budgets):
    """E[X] of a deterministic family (the same q at every node): one best-first run."""
    row = np.asarray(probs, dtype=float)[None, :]
    return best_first(lambda rng, n: np.repeat(row, n, axis=0), budgets, 1, None)[0]


def dirichlet_draw(alpha, k):
    return lambda rng, n: -np.sort(-rng.dirichlet(np.full(k, alpha), size=n), axis=1)


def rows_draw(rows):
    rows = np.asarray(rows, dtype=float)
    return lambda rng, n: rows[rng.integers(0, len(rows), size=n)]


# --- the paper's bound
def test_paper_bound_by_hand():
    assert paper_bound(1.0, 2.0, math.e**2) == pytest.approx(6.0)
    assert paper_bound(0.5, 0.5, 1) == 0.0
    # (mu + mu2) log P / mu^2 with mu = 2, mu2 = 6: 2 log P
    P = np.array([2.0, 64.0, 2.0**20])
    np.testing.assert_allclose(paper_bound(2.0, 6.0, P), 2 * np.log(P))
    assert isinstance(paper_bound(1.0, 1.0, 8), float)


@pytest.mark.parametrize(
    "mu, mu2, P",
    [
        (0.0, 1.0, 8),
        (-1.0, 1.0, 8),
        (np.nan, 1.0, 8),
        (1.0, np.nan, 8),
        (1.0, -0.1, 8),
        (1.0, 1.0, 0.5),
        (1.0, 1.0, np.nan),
        (1.0, 1.0, [4, 0]),
    ],
)
def test_paper_bound_rejects_bad_input(mu, mu2, P):
    with pytest.raises(UserError):
        paper_bound(mu, mu2, P)


# --- spine steps
def test_exact_atoms_of_parametric_families():
    u = spine_steps(Uniform(5))
    assert u.values.tolist() == [
        pytest.approx(math.log(5))
    ] and u.mass == pytest.approx(1.0)
    assert u.lattice_span == pytest.approx(math.log(5))

    r = 0.7
    g = spine_steps(Geometric(r))
    entropy = (-(1 - r) * math.log(1 - r) - r * math.log(r)) / (1 - r)
    assert g.mass == pytest.approx(1.0, abs=1e-15) and g.mu == pytest.approx(
        entropy, rel=1e-12
    )
    assert g.lattice_span is None  # log(0.3) / log(0.7) is irrational

    rows = [[0.5, 0.3, 0.1, 0.0], [0.25, 0.25, 0.25, 0.25]]
    e = spine_steps(Empirical(rows))
    assert e.mass == pytest.approx(0.95)
    assert e.mu == pytest.approx(
        -(0.5 * np.log(0.5) + 0.3 * np.log(0.3) + 0.1 * np.log(0.1) + np.log(0.25)) / 2
    )


@pytest.mark.parametrize(
    "family, span",
    [
        (Geometric(0.5), math.log(2)),
        (
            Geometric((math.sqrt(5) - 1) / 2),
            -math.log((math.sqrt(5) - 1) / 2),
        ),  # 1 - r = r^2
        (Fixed([0.5, 0.25, 0.125, 0.125]), math.log(2)),
        (Fixed([1 / 3] * 3), math.log(3)),
        (Empirical([[0.5, 0.5, 0, 0], [0.25] * 4]), math.log(2)),
        (Fixed([0.6, 0.3]), None),
        (Empirical([[0.5, 0.5], [0.6, 0.4]]), None),
    ],
)
def test_lattice_detection(family, span):
    got = spine_steps(family).lattice_span
    assert (got is None) if span is None else got == pytest.approx(span, rel=1e-12)


def test_spine_steps_rejects_bad_laws():
    with pytest.raises(UserError):
        SpineSteps([0.1, 0.2], [0.7, 0.7])  # mass > 1
    with pytest.raises(UserError):
        SpineSteps([-0.1], [1.0])
    with pytest.raises(UserError):
        spine_steps(object())


def test_malthusian_parameter():
    theta, nu = spine_steps(Fixed([0.6, 0.3])).malthusian()
    assert 0.6**theta + 0.3**theta == pytest.approx(1.0, abs=1e-12)
    assert nu == pytest.approx(
        -(0.6**theta * math.log(0.6) + 0.3**theta * math.log(0.3))
    )
    assert spine_steps(Fixed([0.6, 0.4])).malthusian() == (
        1.0,
        pytest.approx(0.6730116670),
    )
    with pytest.raises(UserError):
        spine_steps(Fixed([0.9])).malthusian()  # a path: one child per node


# --- renewal functions
def test_exponential_renewal_functions():
    """Exp(mean mu) steps: U(t) = t / mu (n >= 1), M(t) = (e^t - 1) / mu, E[X] = log(1 + mu P)/mu."""
    mu = 0.5
    steps = exponential_steps(mu)
    t = np.array([0.3, 1.0, 5.0, 12.0])
    U, M = renewal_functions(steps, t)
    np.testing.assert_allclose(U, t / mu, atol=1e-5)
    np.testing.assert_allclose(M, np.expm1(t) / mu, rtol=1e-5)
    P = np.array([1, 10, 1000, 2**20])
    np.testing.assert_allclose(prediction(steps, P), np.log1p(mu * P) / mu, atol=1e-5)
    # mu2 = 2 mu^2: the asymptotic is log(mu P) / mu, off by log1p(1 / (mu P)) / mu
    np.testing.assert_allclose(
        prediction(steps, P, "asymptotic"), np.log(mu * P) / mu, atol=1e-5
    )


@pytest.mark.parametrize("k", [2, 3, 7])
def test_uniform_is_exact(k):
    """Full levels k + ... + k^d give E[X] = d; a partial level adds r / k^(d+1)."""
    full = np.cumsum(float(k) ** np.arange(1, 8))
    np.testing.assert_allclose(
        prediction(Uniform(k), full), np.arange(1, 8), rtol=1e-12
    )
    partial = full[:4] + 1
    np.testing.assert_allclose(
        prediction(Uniform(k), partial),
        np.arange(1, 5) + 1 / float(k) ** np.arange(2, 6),
        rtol=1e-12,
    )
    U, M = renewal_functions(Uniform(k), [math.log(k) * 3])
    assert (U[0], M[0]) == (pytest.approx(3.0), pytest.approx(full[2]))
    with pytest.raises(UserError, match="lattice"):
        prediction(Uniform(k), [64], method="asymptotic")


@pytest.mark.parametrize(
    "family, probs",
    [
        (Fixed([0.6, 0.3]), [0.6, 0.3]),  # sub-stochastic, non-lattice
        (Fixed([0.5, 0.3, 0.2]), [0.5, 0.3, 0.2]),
        (Fixed([0.5, 0.25, 0.125, 0.125]), [0.5, 0.25, 0.125, 0.125]),  # lattice: exact
        (Geometric(0.7), 0.3 * 0.7 ** np.arange(104)),
    ],
)
def test_deterministic_families_match_the_exact_tree(family, probs):
    """With the same q at every node the tree is not random: the prediction is exact."""
    P = np.array([1, 2, 3, 5, 16, 64, 256, 1024, 4096])
    err = np.abs(prediction(family, P) - exact_tree(probs, P))
    assert err.max() < 2e-4


def test_grid_convergence():
    """Halving the grid step changes the prediction by < 1e-4 tokens up to P = 2^20."""
    P = 2.0 ** np.arange(0, 21, 4)
    for law in (spine_steps(Fixed([0.6, 0.4])), dirichlet_steps(0.5, 8)):
        a, b = prediction(law, P, h=1e-3), prediction(law, P, h=5e-4)
        assert np.abs(a - b).max() < 1e-4


def test_asymptotic_agrees_with_numerical_at_large_budgets():
    P = 2.0 ** np.array([16, 18, 20])
    law = dirichlet_steps(0.5, 8)
    mom = Dirichlet(0.5, 8).moments()
    assert law.mu == pytest.approx(mom.mu, abs=1e-6) and law.mu2 == pytest.approx(
        mom.mu2, abs=1e-5
    )
    np.testing.assert_allclose(
        prediction(law, P, "asymptotic"), prediction(law, P), atol=1e-3
    )
    sub = spine_steps(Fixed([0.6, 0.3]))  # m = 0.9: E[X] -> m / (1 - m) = 9
    np.testing.assert_allclose(
        prediction(sub, P, "asymptotic"), prediction(sub, P), atol=1e-3
    )
    assert np.all(np.diff(prediction(sub, P)) > 0) and prediction(sub, P)[-1] < 9
    assert prediction(sub, [1e40], "asymptotic")[0] == pytest.approx(9.0, abs=1e-3)


@pytest.mark.parametrize("budgets", [[0], [1, np.nan], [np.inf], []])
def test_prediction_rejects_bad_budgets(budgets):
    with pytest.raises(UserError):
        prediction(Uniform(2), budgets)


def test_prediction_rejects_bad_method():
    with pytest.raises(UserError):
        prediction(Uniform(2), [4], method="exact")


# --- Monte Carlo
BUDGETS = np.array([1, 4, 16, 64, 128, 256])
ROWS = [[0.9, 0.1, 0, 0], [0.4, 0.3, 0.2, 0.1], [0.5, 0.5, 0, 0]]
SUB_ROWS = [[0.8, 0.1, 0, 0], [0.4, 0.3, 0.2, 0.1], [0.5, 0.45, 0, 0]]
RANDOM_FAMILIES = {
    # name: (steps for the prediction, draw for the Monte Carlo, iterations)
    "dirichlet(0.5)x8": (lambda: dirichlet_steps(0.5, 8), dirichlet_draw(0.5, 8), 3000),
    "dirichlet(2)x4": (lambda: dirichlet_steps(2.0, 4), dirichlet_draw(2.0, 4), 3000),
    "empirical": (lambda: spine_steps(Empirical(ROWS)), rows_draw(ROWS), 4000),
    "empirical m=0.95": (
        lambda: spine_steps(Empirical(SUB_ROWS)),
        rows_draw(SUB_ROWS),
        3000,
    ),
}


@pytest.fixture(scope="module")
def monte_carlo():
    out = {}
    for seed, (name, (_, draw, n_iter)) in enumerate(RANDOM_FAMILIES.items()):
        x = best_first(draw, BUDGETS, n_iter, np.random.default_rng(100 + seed))
        out[name] = (x.mean(axis=0), x.std(axis=0, ddof=1) / math.sqrt(n_iter))
    return out


@pytest.mark.parametrize("name", list(RANDOM_FAMILIES))
def test_prediction_matches_monte_carlo(name, monte_carlo):
    """|prediction - MC| <= max(0.02, 3 SE) for P >= 64; the paper's bound is above MC."""
    steps = RANDOM_FAMILIES[name][0]()
    mean, se = monte_carlo[name]
    pred = prediction(steps, BUDGETS)
    big = BUDGETS >= 64
    for P, m, s, p in zip(BUDGETS, mean, se, pred):
        print(
            f"{name:18s} P={P:4d} MC={m:.4f}+-{s:.4f} prediction={p:.4f} ({(p - m) / s:+.1f} SE)"
        )
    assert np.all(np.abs(pred - mean)[big] <= np.maximum(0.02, 3 * se[big]))
    assert np.all(paper_bound(steps.mu, steps.mu2, BUDGETS[1:]) > mean[1:])


def test_monte_carlo_comparison_can_fail(monte_carlo):
    """Negative control: a neighbouring family's prediction is rejected by the same check."""
    mean, se = monte_carlo["dirichlet(0.5)x8"]
    wrong = prediction(dirichlet_steps(0.6, 8), BUDGETS)
    assert np.all(
        np.abs(wrong - mean)[BUDGETS >= 64] > np.maximum(0.02, 3 * se[BUDGETS >= 64])
    )


def test_entropy_target_spine_steps_are_exact_atoms_or_sampled_when_too_many():
    from brwsim.families import EntropyTarget

    for fam in (EntropyTarget([0.4, 1.2, 1.2, 2.5], shape="geometric"),
                EntropyTarget([0.7, 1.9], shape="zipf", vocab=3000)):
        steps = spine_steps(fam)
        mom = fam.moments()
        assert steps.exact and steps.mass == pytest.approx(1.0, abs=1e-12)
        assert steps.mu == pytest.approx(mom.mu, rel=1e-9)
        assert steps.mu2 == pytest.approx(mom.mu2, rel=1e-9)
    big = EntropyTarget(np.linspace(0.5, 3.0, 200), shape="zipf", vocab=32000)
    sampled = spine_steps(big)                             # 6.4M atoms: sampled instead
    exact_mu = float(np.mean(big.entropies))
    assert not sampled.exact and abs(sampled.mu - exact_mu) < 4 * sampled.moments.mu_se
