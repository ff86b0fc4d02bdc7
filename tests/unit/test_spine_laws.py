"""Exact and sampled spine-step laws (brwsim.theory) and the proven upper bound.

References nobody here wrote: numpy's Dirichlet/Beta samplers (independent Monte Carlo
of the size-biased law), scipy's incomplete beta function, and direct summation over the
listed atoms of a Zipf law.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from brwsim import (
    Dirichlet,
    Empirical,
    EntropyTarget,
    Fixed,
    Geometric,
    Mixture,
    Peaked,
    SoftmaxNormal,
    Tempered,
    Uniform,
    Zipf,
)
from brwsim.theory import (
    paper_bound,
    prediction,
    prediction_with_se,
    spine_steps,
    upper_bound,
)
from brwsim.theory.beta_laws import _beta_step_cdf, beta_step_law, tempered_beta_law
from brwsim.theory.laws import SpineSteps, SumLaw
from brwsim.theory.sampled import SampledLaw
from brwsim.theory.zipf_laws import ZipfLaw

H = 1e-3


def _coarse(f: np.ndarray, width: int) -> np.ndarray:
    """Sum grid masses over blocks of ``width`` cells."""
    n = f.size // width * width
    return f[:n].reshape(-1, width).sum(axis=1)


def _mc_law(samples: list[np.ndarray], width: float, n_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Histogram of the size-biased steps (-log q_i weighted by q_i) and its standard error."""
    per = np.zeros((len(samples), n_bins))
    for k, q in enumerate(samples):
        q = q[q > 0]
        idx = np.minimum((-np.log(q) / width).astype(int), n_bins)
        keep = idx < n_bins
        per[k] = np.bincount(idx[keep], weights=q[keep], minlength=n_bins)
    return per.mean(axis=0), per.std(axis=0, ddof=1) / math.sqrt(len(samples))


@pytest.mark.parametrize("alpha,k", [(0.05, 200), (0.3, 50), (1.0, 20)])
def test_dirichlet_law_matches_numpy_monte_carlo(alpha, k):
    """The Beta(alpha + 1, (K - 1) alpha) law against numpy's Dirichlet, bin by bin (5 SE)."""
    law = spine_steps(Dirichlet(alpha, k))
    rng = np.random.default_rng(7)
    samples = list(rng.dirichlet(np.full(k, alpha), size=20_000))
    mc, se = _mc_law(samples, 0.25, 40)
    exact = _coarse(law.cells(H, 10_001, "floor"), 250)[:40]
    assert np.all(np.abs(exact - mc) <= 5 * se + 2e-5)
    # a neighbouring alpha is rejected by the same check (negative control)
    other = _coarse(spine_steps(Dirichlet(alpha * 1.3, k)).cells(H, 10_001, "floor"), 250)[:40]
    assert np.any(np.abs(other - mc) > 5 * se + 2e-5)


def test_dirichlet_law_cells_preserve_mass_and_moments():
    fam = Dirichlet(0.05, 32000)
    law, mom = spine_steps(fam), fam.moments()
    f = law.cells(H, 64_000, "split")
    x = np.arange(f.size) * H
    assert f.sum() == pytest.approx(1.0, abs=1e-9)
    assert f @ x == pytest.approx(mom.mu, abs=H)          # split keeps the mean to O(h^2) per atom
    g = law.cells(H, 64_000, "floor")
    assert g.sum() == pytest.approx(1.0, abs=1e-9) and g @ x <= mom.mu


def test_beta_cdf_blocks_match_betaincc_at_every_point():
    for a, b in [(1.05, 9.95), (4.5, 0.5), (0.5, 4.0), (0.05, 1599.95), (9.0, 0.5)]:
        x = np.arange(20_001) * H
        exact = special.betaincc(a, b, np.exp(-x))
        got = _beta_step_cdf(a, b, x)
        assert np.abs(got - exact).max() < 1e-9
        assert np.abs(np.diff(got) - np.diff(exact)).sum() < 1e-8


@pytest.mark.parametrize("s,vocab", [(1.1, 5000), (0.0, 300), (1.8, 40_000)])
def test_zipf_cells_equal_the_listed_atoms(s, vocab):
    """ZipfLaw (no atoms listed) gives the same grid masses as splitting every atom."""
    q = np.arange(1, vocab + 1, dtype=float) ** -s
    q /= q.sum()
    atoms = SpineSteps(-np.log(q), q)
    law = ZipfLaw(s, vocab)
    for mode in ("split", "floor"):
        np.testing.assert_allclose(law.cells(H, 30_000, mode), atoms.cells(H, 30_000, mode),
                                   atol=1e-9)


def test_zipf_spread_quadrature_matches_a_fine_midpoint_rule():
    fam = Zipf(1.2, 3000, spread=0.3)
    mom = fam.moments()
    n = 512
    ss = 0.9 + (np.arange(n) + 0.5) / n * 0.6
    ref = SumLaw([ZipfLaw(s, 3000) for s in ss], np.full(n, 1 / n), mom.mu, mom.mu2)
    B = [1, 64, 4096, 2 ** 20]
    np.testing.assert_allclose(prediction(fam, B), prediction(ref, B), atol=2e-5)


def test_peaked_law_and_moments_match_monte_carlo():
    fam = Peaked(2.0, 0.7, 1.1, 400)
    rng = np.random.default_rng(3)
    samples = [fam.sample_full(rng) for _ in range(20_000)]
    mc, se = _mc_law(samples, 0.25, 40)
    exact = _coarse(spine_steps(fam).cells(H, 10_001, "floor"), 250)[:40]
    assert np.all(np.abs(exact - mc) <= 5 * se + 2e-5)
    mom = fam.moments()
    h = np.array([-(q[q > 0] * np.log(q[q > 0])).sum() for q in samples])
    m2 = np.array([(q[q > 0] * np.log(q[q > 0]) ** 2).sum() for q in samples])
    n = len(samples)
    assert abs(mom.mu - h.mean()) < 5 * h.std() / math.sqrt(n)
    assert abs(mom.mu2 - m2.mean()) < 5 * m2.std() / math.sqrt(n)
    assert abs(mom.h2 - (h * h).mean()) < 5 * (h * h).std() / math.sqrt(n)
    assert mom.exact and mom.mu_se == 0


def test_mixture_and_tempered_laws_are_exact_where_derivable():
    mix = Mixture([Dirichlet(0.3, 50), Geometric(0.5)], [0.3, 0.7])
    f = spine_steps(mix).cells(H, 20_000)
    ref = (0.3 * spine_steps(Dirichlet(0.3, 50)).cells(H, 20_000)
           + 0.7 * spine_steps(Geometric(0.5)).cells(H, 20_000))
    np.testing.assert_allclose(f, ref, atol=1e-14)
    for tempered, same in [(Tempered(Geometric(0.6), 0.5), Geometric(0.36)),
                           (Tempered(Zipf(1.2, 1000, 0.2), 2.0), Zipf(0.6, 1000, 0.1)),
                           (Tempered(Tempered(Uniform(3), 2.0), 0.3), Uniform(3))]:
        law = spine_steps(tempered)
        assert law.exact
        np.testing.assert_allclose(prediction(tempered, [1, 64, 4096]),
                                   prediction(same, [1, 64, 4096]), rtol=1e-12)
        assert tempered.moments().exact
    fixed = Tempered(Fixed([0.5, 0.3]), 0.5)     # the lumped tail token is tempered too
    q = np.array([0.25, 0.09, 0.04])
    q /= q.sum()
    np.testing.assert_allclose(prediction(fixed, [1, 8]), prediction(Fixed(q[:2]), [1, 8]))


def test_sampled_law_agrees_with_the_exact_law_within_its_standard_error():
    fam = Dirichlet(0.3, 50)
    exact = prediction(fam, [1, 64, 4096])
    sampled = SampledLaw(fam, seed=4)
    assert not sampled.exact and sampled.mass == pytest.approx(1.0, abs=1e-8)
    pred = prediction_with_se(sampled, [1, 64, 4096])
    assert np.all(pred.se > 0)
    assert np.all(np.abs(pred.value - exact) <= 5 * pred.se)
    mom = fam.moments()
    assert abs(sampled.moments.mu - mom.mu) < 5 * sampled.moments.mu_se
    assert abs(sampled.moments.h2 - mom.h2) < 5 * sampled.moments.h2_se
    assert np.all(prediction_with_se(fam, [1, 64]).se == 0)


def _tempered_top_mass(a, b, beta, c, x):
    """E[r; -log r < x] by direct quadrature over the Beta(a, b) top-1 mass m (reference),
    in ``v = (1 - m)^b``, where the density ``m^(a-1) (1-m)^(b-1) dm`` is ``m^(a-1) dv / b``."""
    from scipy import integrate

    lo = 1.0 / (1.0 + (math.expm1(x) / c) ** (1.0 / beta))     # r(lo) = e^-x

    def f(v):
        one_m = v ** (1.0 / b)
        m = 1.0 - one_m
        r = 1.0 / (1.0 + c * (one_m / m) ** beta) if m > 0 else 0.0
        return r * m ** (a - 1.0) / b

    val, _ = integrate.quad(f, 0.0, (1.0 - lo) ** b, epsabs=1e-16, epsrel=1e-12, limit=500)
    return val / special.beta(a, b)


@pytest.mark.parametrize("a,b,beta,c", [(8.0, 0.5, 1 / 0.7, 0.19), (2.0, 0.7, 2.0, 0.05),
                                        (8.0, 0.5, 1 / 1.5, 3.0), (0.5, 3.0, 0.5, 20.0)])
def test_tempered_beta_law_matches_direct_quadrature(a, b, beta, c):
    law = tempered_beta_law(a, b, beta, math.log(c))
    cum = np.concatenate([[0.0], np.cumsum(law.cells(H, 20_000, "floor"))])
    for j in (1, 2, 3, 10, 17, 100, 257, 1000, 5000, 20_000):
        ref = _tempered_top_mass(a, b, beta, c, j * H)
        assert cum[j] == pytest.approx(ref, rel=1e-7, abs=1e-15)
    # the count measure is the law of -log r: P(-log r < x) = P(B > lo(x)), scipy's betaincc
    x = np.arange(20_001) * H
    lo = 1.0 / (1.0 + (np.expm1(x[1:]) / c) ** (1.0 / beta))
    assert np.abs(law._count_cdf(x)[1:] - special.betaincc(a, b, lo)).max() < 1e-9


def test_tempered_beta_law_at_beta_one_is_the_beta_law():
    for a, b in [(8.0, 0.5), (2.0, 0.7), (0.5, 4.0)]:
        ref = beta_step_law(a + 1.0, b, a, b, a / (a + b), 1.0, math.nan, math.nan)
        law = tempered_beta_law(a, b, 1.0 + 1e-13, 0.0)    # the general path
        assert law.mass == pytest.approx(a / (a + b), rel=1e-12)
        for mode, tol in (("split", 1e-8), ("floor", 1e-10)):
            diff = np.cumsum(law.cells(H, 20_000, mode)) - np.cumsum(ref.cells(H, 20_000, mode))
            assert np.abs(diff).max() < tol


@pytest.mark.parametrize("fam", [Tempered(Peaked(8.0, 0.5, 1.2, 3000), 0.7),
                                 Tempered(Peaked(2.0, 0.7, 1.1, 400), 1.5),
                                 Tempered(Peaked(0.5, 3.0, 0.8, 2), 2.0)], ids=repr)
def test_tempered_peaked_law_is_exact_and_matches_numpy_monte_carlo(fam):
    """Tempered Peaked keeps its shape (a tempered top-1 mass and a Zipf(s / T) rest): its
    exact law, moments and E[max q] against numpy's Beta sampler (5 SE), and its prediction
    against the law sampled in numba from the kernels (5 SE)."""
    law = spine_steps(fam)
    assert law.exact and fam.moments().exact
    rng = np.random.default_rng(11)
    samples = [fam.sample_full(rng) for _ in range(20_000)]
    mc, se = _mc_law(samples, 0.25, 40)
    exact = _coarse(law.cells(H, 10_001, "floor"), 250)[:40]
    assert np.all(np.abs(exact - mc) <= 5 * se + 2e-5)
    mom, n = fam.moments(), len(samples)
    h = np.array([-(q[q > 0] * np.log(q[q > 0])).sum() for q in samples])
    m2 = np.array([(q[q > 0] * np.log(q[q > 0]) ** 2).sum() for q in samples])
    top = np.array([q[0] for q in samples])
    for value, draws in ((mom.mu, h), (mom.mu2, m2), (mom.h2, h * h), (fam.top1_mean(), top)):
        assert abs(value - draws.mean()) < 5 * draws.std() / math.sqrt(n)
    budgets = [1, 64, 4096, 2 ** 20]
    sampled = prediction_with_se(SampledLaw(fam, seed=2), budgets)
    pred = prediction_with_se(fam, budgets)
    assert np.all(pred.se == 0)
    assert np.all(np.abs(pred.value - sampled.value) <= 5 * sampled.se + 1e-9)


def test_tempered_llm_mixture_is_exact():
    from brwsim import parse_family
    from brwsim.families import DEFAULT_FAMILY

    fam = Tempered(parse_family(DEFAULT_FAMILY), 0.7)
    assert spine_steps(fam).exact and fam.moments().exact and fam.top1_mean() is not None


def test_families_without_an_exact_law_are_sampled_and_report_their_error():
    for fam in (SoftmaxNormal(1.5, 300), Tempered(Dirichlet(0.3, 20), 0.7)):
        law = spine_steps(fam)
        assert isinstance(law, SampledLaw)
        pred = prediction_with_se(fam, [4, 64])
        assert np.all(pred.se > 0) and np.all(pred.se < 0.05)
        assert not fam.moments().exact


def _paired(walk: SampledLaw, ref: SampledLaw, budgets) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error of the batch-wise prediction differences of two laws."""
    d = np.array([prediction(a, budgets) - prediction(b, budgets)
                  for a, b in zip(walk.replicates(), ref.replicates())])
    return d.mean(axis=0), d.std(axis=0, ddof=1) / math.sqrt(d.shape[0])


@pytest.mark.parametrize("fam, n", [(SoftmaxNormal(1.0, 8000), 1600),
                                    (Tempered(SoftmaxNormal(2.0, 8000), 1.5), 1600),
                                    (Tempered(Dirichlet(0.1, 32000), 0.7), 400)], ids=repr)
def test_walked_order_statistic_tails_match_generating_every_rank(fam, n):
    """The mean-field walk against every rank, on the same seeds (so the same heads): the
    difference is within 5 paired SE, and that SE is well below the law's own."""
    budgets = [1, 64, 4096, 2 ** 20]
    walk = SampledLaw(fam, seed=3, batches=40, n_distributions=n)
    ref = SampledLaw(fam, seed=3, batches=40, n_distributions=n, walk=False)
    assert walk.work[1] > 0 and ref.work[1] == 0 and 4 * walk.work[0] < ref.work[0]
    bias, se = _paired(walk, ref, budgets)
    own = prediction_with_se(SampledLaw(fam, seed=4), budgets).se
    assert np.all(np.abs(bias) <= 5 * se + 1e-12)
    assert np.all(np.abs(bias) <= own)
    de = walk._ent - ref._ent
    assert abs(de.mean()) <= 5 * de.std(ddof=1) / math.sqrt(de.size) + 1e-12
    assert walk.mass == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("fam", [EntropyTarget([0.7, 2.0, 4.0], shape="zipf", vocab=50_000),
                                 EntropyTarget([9.5, 10.5], shape="geometric"),
                                 Tempered(Peaked(8.0, 0.5, 1.2, 50_000), 0.7)], ids=repr)
def test_walked_deterministic_tails_are_exact(fam):
    """Zipf and geometric tails are walked in closed form: the same law as every rank, up to
    the wide steps of the far tail (which only lower the floor grid)."""
    budgets = [1, 64, 4096, 2 ** 20]
    walk = SampledLaw(fam, seed=5, batches=4, n_distributions=40)
    ref = SampledLaw(fam, seed=5, batches=4, n_distributions=40, walk=False)
    assert walk.work[1] > 0 and 4 * (walk.work[0] + walk.work[1]) < ref.work[0]
    # walked moments are those of the grid points the mass went to
    np.testing.assert_allclose(walk._ent, ref._ent, rtol=0, atol=1e-6)
    assert ref.h == pytest.approx(walk.h, rel=1e-4)      # h = mu / 100 from the pilot
    for mode in ("split", "floor"):
        a, b = (np.cumsum(law.cells(law.h, 64_000, mode)) for law in (walk, ref))
        assert np.sum(np.abs(a - b)) * walk.h < 2e-4     # mass displaced (nats)
    np.testing.assert_allclose(prediction(walk, budgets), prediction(ref, budgets),
                               rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(upper_bound(walk, budgets).value,
                               upper_bound(ref, budgets).value, rtol=1e-4)


def test_walked_entropytarget_agrees_with_its_exact_law():
    fam = EntropyTarget([0.7, 2.0, 4.0], shape="zipf", vocab=100_000)
    budgets = [1, 64, 4096]
    exact = prediction(fam, budgets)
    pred = prediction_with_se(SampledLaw(fam, seed=6), budgets)
    assert np.all(np.abs(pred.value - exact) <= 5 * pred.se)


def test_walked_floor_grid_stays_below_the_split_grid():
    """Every walked deposit puts the floor grid's mass at or below the split grid's."""
    law = SampledLaw(SoftmaxNormal(1.0, 8000), seed=2)
    assert law.work[1] > 0
    for b in range(law.batches):
        floor, split = law._grids["floor"][b], law._grids["split"][b]
        assert np.all(np.cumsum(floor) >= np.cumsum(split) - 1e-12)
    budgets = [1, 64, 4096, 2 ** 20]
    assert np.all(upper_bound(law, budgets).value >= prediction(law, budgets))


# --- the proven upper bound


def test_upper_bound_is_exact_on_full_levels_of_a_lattice():
    np.testing.assert_allclose(upper_bound(Uniform(3), [3, 12, 39]).value, [1, 2, 3], atol=1e-9)
    np.testing.assert_allclose(upper_bound(Geometric(0.5), [1]).value, [0.5], atol=1e-9)


def test_upper_bound_dominates_the_exact_value_of_deterministic_families():
    """A deterministic family's optimal E[X] by enumeration (heapq) is below the bound."""
    import heapq

    for probs in ([0.5, 0.3, 0.15], [0.6, 0.4], [0.7, 0.2, 0.05, 0.05]):
        q = np.array(probs)
        heap, popped = [(-q[0], 0, 0)], []
        # nodes by path probability: a node is (p, parent id, rank)
        for _ in range(2000):
            p, _, r = heapq.heappop(heap)
            popped.append(-p)
            parent_p = -p / q[r]
            if r + 1 < q.size:
                heapq.heappush(heap, (-parent_p * q[r + 1], 0, r + 1))
            heapq.heappush(heap, (p * q[0], 0, 0))
        exact = np.cumsum(popped)
        B = np.array([1, 2, 5, 17, 100, 999, 2000])
        ub = upper_bound(Fixed(probs), B).value
        assert np.all(ub >= exact[B - 1] - 1e-9)
        assert np.all(ub <= exact[B - 1] + 0.01)


def test_upper_bound_slope_is_one_over_mu_and_below_the_papers_bound():
    for fam in (Dirichlet(0.05, 200), Geometric(0.7), Peaked(4, 0.5, 1.1, 32000)):
        mom = fam.moments()
        B = np.array([2 ** 12, 2 ** 20])
        ub = upper_bound(fam, B).value
        slope = (ub[1] - ub[0]) / (8 * math.log(2))
        assert slope == pytest.approx(1 / mom.mu, rel=0.03)   # -> 1/mu as P grows
        P = np.array([2, 16, 1024, 2 ** 16])
        paper = paper_bound(mom.mu, mom.mu2, P)
        assert np.all(upper_bound(fam, P).value[paper > 0] < paper[paper > 0])


def test_prediction_is_the_bound_up_to_the_grid():
    """The mean-measure fill is min_t of the bound: the floor grid only moves it by O(h)."""
    for fam in (Dirichlet(0.3, 200), Peaked(4, 0.5, 1.1, 32000), Empirical([[0.5, 0.3], [0.9]])):
        B = [1, 64, 4096, 2 ** 16]
        ub, pr = upper_bound(fam, B).value, prediction(fam, B)
        assert np.all(ub >= pr - 1e-9)
        assert np.all(ub - pr <= 0.003 * np.maximum(pr, 1))


def test_exact_small_budget_matches_monte_carlo_at_p1(family):
    """E[max q] is E[X | T_1] exactly; families without a closed form refuse."""
    from brwsim import simulate
    from brwsim.errors import UserError
    from brwsim.theory import exact_small_budget

    try:
        exact = exact_small_budget(family)
    except UserError:
        assert family.top1_mean() is None
        return
    ds = simulate(family, [1], 4000, seed=2)
    e = ds.expected_accepted.values[0]
    assert abs(e.mean() - exact) <= 5 * e.std(ddof=1) / math.sqrt(e.size) + 1e-12
