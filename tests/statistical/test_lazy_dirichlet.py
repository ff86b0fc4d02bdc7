"""Exact lazy Dirichlet nodes (binary aggregation) against the full numpy sampler.

``brwsim.kernels.dirichlet.dirichlet_init`` draws a node by splitting the vocabulary in halves
with Beta fractions and never splits a group below the caller's cut-off. ``Dirichlet``
uses it only where it was measured faster (small alpha, vocab 100-1024); its law is
checked here at every vocabulary (2 to 32000) and alpha 0.05-1 by forcing the component.
Nodes must have the law of ``Dirichlet.sample_full`` (top-1 and top-2 masses, two-sample
KS at alpha = 1e-3), trees the per-tree law of E[X | T_P] of the plain-Python reference
driven by the full sampler and the family's exact mean E[X | T_1] = E[q_(1)], and the
ranks above a cut-off must not depend on the cut-off (a node is a function of its key).
A negative control shows the KS test sees a 30% change of alpha.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from brwsim import Dirichlet
from brwsim.environment import node_logprobs
from brwsim.families.dirichlet import aggregation_component
from brwsim.kernels import dist as K
from brwsim.kernels.spec import compile_spec
from brwsim.reference import best_first, sampling_provider
from brwsim.simulate import run_iterations, seed_key, validate_budgets

N_NODES = 1500
CASES = [(a, v) for v in (2, 10, 200) for a in (0.05, 0.3, 1.0)] + [(0.05, 3000), (0.3, 32000)]


def _top2(q):
    return q[0], round(float(q[:2].sum()), 12)       # (exactly 1 at vocab 2, to rounding)


def _spec(fam):
    """The aggregation sampler's spec for ``fam``, whichever sampler the family picks."""
    return compile_spec([aggregation_component(fam.alpha, fam.vocab)])


def _lazy(fam, n=N_NODES):
    spec = _spec(fam)
    return np.array([_top2(np.exp(node_logprobs(spec, 1, i, (i % 3,), 2))) for i in range(n)])


def _exact(fam, n=N_NODES, seed=0):
    rng = np.random.default_rng(seed)
    return np.array([_top2(fam.sample_full(rng)) for _ in range(n)])


@pytest.mark.parametrize("alpha,vocab", CASES)
def test_lazy_nodes_match_the_full_sampler(alpha, vocab):
    fam = Dirichlet(alpha, vocab)
    lazy, exact = _lazy(fam), _exact(fam)
    for j, name in enumerate(("top-1", "top-2")):
        p = stats.ks_2samp(lazy[:, j], exact[:, j]).pvalue
        assert p > 1e-3, f"{name}: KS p = {p:.2g}"


def test_negative_control_detects_a_wrong_alpha():
    lazy = _lazy(Dirichlet(0.05, 200))
    exact = _exact(Dirichlet(0.065, 200))
    assert stats.ks_2samp(lazy[:, 0], exact[:, 0]).pvalue < 1e-3


@pytest.mark.parametrize("vocab", [10, 3000])
def test_whole_nodes_sum_to_one_in_rank_order(vocab):
    spec = _spec(Dirichlet(0.3, vocab))
    for it in range(20):
        lq = node_logprobs(spec, 5, it, (), vocab + 1)
        assert lq[-1] == -np.inf
        assert np.all(np.diff(lq[:vocab]) <= 0.0)
        assert abs(np.exp(lq).sum() - 1.0) < 1e-12


def test_ranks_above_a_cut_off_do_not_depend_on_it():
    """The tree pass asks for the ranks above q = lam / p(v) only; they are the same numbers."""
    import numba as nb

    from brwsim.kernels.rng import root_key

    @nb.njit
    def ranks(law, hc, key, min_logq, out):
        lf = np.empty((1, K.LEVEL_F))
        li = np.empty((1, K.LEVEL_I), np.int64)
        head = np.empty((1, hc))
        K.dist_init(law, key, 0, lf, li, head, min_logq, K.ROOT_DRAW, 0)
        for r in range(out.shape[0]):
            out[r] = K.dist_next(law.fpar, law.ipar, law.data, key, 0, lf, li, head)

    spec = _spec(Dirichlet(0.05, 3000))
    args = (spec.law, spec.head_cap)
    for i in range(30):
        key = np.uint64(root_key(np.uint64(9), np.int64(i)))
        full = np.empty(3001)
        ranks(*args, key, -np.inf, full)
        for cut in (-1.0, -4.0, -9.0):
            part = np.empty(3001)
            ranks(*args, key, cut, part)
            above = full >= cut
            np.testing.assert_array_equal(part[above], full[above])
            assert np.all(part[~above] < cut)


@pytest.mark.parametrize("alpha,vocab,p", [(0.05, 200, 64), (0.3, 10, 32), (1.0, 200, 16)])
def test_per_tree_law_matches_the_reference_with_full_sampling(alpha, vocab, p):
    fam = Dirichlet(alpha, vocab)
    lazy = run_iterations(_spec(fam), validate_budgets([p]), seed_key(21), 0, 1500)[1][0]
    rng = np.random.default_rng(22)
    exact = np.array([best_first(sampling_provider(fam, rng), [p])[0][0] for _ in range(400)])
    assert stats.ks_2samp(lazy, exact).pvalue > 1e-3
    se = np.sqrt(lazy.var(ddof=1) / lazy.size + exact.var(ddof=1) / exact.size)
    assert abs(lazy.mean() - exact.mean()) < 4.5 * se


@pytest.mark.parametrize("alpha,vocab", [(0.05, 200), (1.0, 10)])
def test_top1_tree_matches_the_exact_mean(alpha, vocab):
    """E[X | T_1] is the mean largest probability: against the same mean by numpy (1e5 nodes)."""
    fam = Dirichlet(alpha, vocab)
    lazy = run_iterations(_spec(fam), validate_budgets([1]), seed_key(23), 0, 20000)[1][0]
    rng = np.random.default_rng(24)
    top = np.sort(rng.dirichlet(np.full(vocab, alpha), size=100000), axis=1)[:, -1]
    se = np.sqrt(lazy.var(ddof=1) / lazy.size + top.var(ddof=1) / top.size)
    assert abs(lazy.mean() - top.mean()) < 4.5 * se


def test_the_family_picks_aggregation_where_it_is_faster():
    assert Dirichlet(0.05, 200).spec().kinds[0] == K.DIRICHLET
    assert Dirichlet(0.05, 1024).spec().kinds[0] == K.DIRICHLET
    for fam in (Dirichlet(0.3, 200), Dirichlet(0.05, 10), Dirichlet(0.05, 32000)):
        assert fam.spec().kinds[0] == K.ORDERSTAT
    assert compile_spec(Dirichlet(0.05, 200).components(1 / 0.7)).kinds[0] == K.ORDERSTAT
