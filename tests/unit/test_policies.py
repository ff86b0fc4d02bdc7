"""Drafting policies: exact cases, plain-Python references, the optimality property."""

from __future__ import annotations

import functools
import heapq
import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brwsim import Dirichlet, Fixed, Uniform, UserError, Zipf
from brwsim.environment import node_key, node_logprobs, path_uniform
from brwsim.kernels.policies import HEAD_K, NOISE
from brwsim.kernels.rng import child_key, normal, purpose_key
from brwsim.policies import (POLICIES, Chain, Dynamic, Expansion, KAry, Noisy, Optimal, Policy,
                             Sequoia, parse_policy, run_policy)
from brwsim.simulate import seed_key
from tests.conftest import FAMILY_TABLE

BUDGETS = np.array([1, 3, 10, 50, 200], np.int64)


def run(policy, family, budgets, seed=0, iterations=4, first=0):
    return run_policy(policy, _spec(family), np.asarray(budgets, np.int64), seed_key(seed), first,
                      iterations)


@functools.lru_cache(maxsize=None)
def _spec_cached(text):
    from brwsim import parse_family

    return parse_family(text).spec()


def _spec(family):
    return _spec_cached(repr(family))


# ---------------------------------------------------------------------------------------
# Plain-Python scoring of explicit trees on the counter-based environment

class Env:
    """Node log-probabilities and the sampled path of one iteration, read node by node."""

    def __init__(self, family, seed, iteration, k=64):
        self.spec = _spec(family)
        self.seed, self.it, self.k = seed, iteration, k
        self.cache = {}

    def lq(self, path):
        if path not in self.cache:
            self.cache[path] = node_logprobs(self.spec, self.seed, self.it, path, self.k)
        return self.cache[path]

    def logp(self, path):
        return sum(self.lq(path[:i])[path[i]] for i in range(len(path)))

    def sampled_path(self, max_depth):
        """Rank paths of the target's path nodes (cum_{r-1} < U <= cum_r), to max_depth."""
        out, path = set(), ()
        while len(path) < max_depth:
            u = path_uniform(self.seed, self.it, path)
            cum, nxt = 0.0, None
            for r, v in enumerate(self.lq(path)):
                cum += math.exp(v)
                if u <= cum:
                    nxt = path + (r,)
                    break
            if nxt is None:
                break
            out.add(nxt)
            path = nxt
        return out

    def score(self, trees):
        """(E[X | T], X, depth) of each tree (a list of rank paths)."""
        deepest = max((len(p) for t in trees for p in t), default=0)
        on = self.sampled_path(deepest)
        return ([math.fsum(math.exp(self.logp(p)) for p in t) for t in trees],
                [sum(p in on for p in t) for t in trees],
                [max(len(p) for p in t) for t in trees])


def check_against(policy, family, budgets, trees_of, seed=5, iterations=3, atol=1e-12):
    """Kernel output equals the plain-Python score of the trees ``trees_of(env, budgets)``."""
    acc, exp, dep = run(policy, family, budgets, seed, iterations)
    for it in range(iterations):
        env = Env(family, seed, it)
        e, x, d = env.score(trees_of(env, budgets))
        np.testing.assert_allclose(exp[:, it], e, rtol=0, atol=atol)
        assert acc[:, it].tolist() == x
        assert dep[:, it].tolist() == d


# ---------------------------------------------------------------------------------------
# Exact cases

@pytest.mark.parametrize("probs", [[0.6, 0.3], [0.5, 0.3, 0.15], [0.9, 0.05]])
def test_chain_on_fixed_is_geometric_sum(probs):
    budgets = [1, 2, 5, 17, 64]
    acc, exp, dep = run(Chain(), Fixed(probs), budgets, seed=2, iterations=20)
    q1 = max(probs)
    for b, p in enumerate(budgets):
        np.testing.assert_allclose(exp[b], sum(q1 ** d for d in range(1, p + 1)), rtol=0,
                                   atol=1e-12)
        assert np.all(dep[b] == p)
    for it in range(20):                  # X = leading run of rank-0 samples along the chain
        run_len = 0
        while run_len < budgets[-1] and path_uniform(2, it, (0,) * run_len) <= q1:
            run_len += 1
        assert acc[:, it].tolist() == [min(run_len, p) for p in budgets]


@pytest.mark.parametrize("k", [2, 3, 5])
def test_kary_on_uniform_equals_optimal(k):
    budgets = [1, k, k + 1, k + k * k - 1, k + k * k, 3 * k * k + 7]
    opt = run(Optimal(), Uniform(k), budgets, seed=4, iterations=6)
    pol = run(KAry(k), Uniform(k), budgets, seed=4, iterations=6)
    np.testing.assert_allclose(pol[1], opt[1], rtol=0, atol=1e-12)
    # ties break by depth, then rank path: breadth-first order, so the very same trees
    np.testing.assert_array_equal(pol[0], opt[0])
    np.testing.assert_array_equal(pol[2], opt[2])


@pytest.mark.parametrize("family", [Dirichlet(0.5, 10), Zipf(1.1, 500, spread=0.3),
                                    Uniform(2)], ids=repr)
def test_dynamic_unbounded_equals_optimal(family):
    budgets = [1, 4, 9, 12]
    opt = run(Optimal(), family, budgets, seed=6, iterations=4)
    pol = run(Dynamic(depth=12, topk=12), family, budgets, seed=6, iterations=4)
    np.testing.assert_allclose(pol[1], opt[1], rtol=0, atol=1e-12)
    if not isinstance(family, Uniform):   # no ties: the same trees
        np.testing.assert_array_equal(pol[0], opt[0])
        np.testing.assert_array_equal(pol[2], opt[2])


@pytest.mark.parametrize("name", sorted(FAMILY_TABLE))
def test_noisy_zero_is_optimal_bit_for_bit(name):
    family = FAMILY_TABLE[name]
    opt = run(Optimal(), family, BUDGETS, seed=3, iterations=4)
    pol = run(Noisy(0.0), family, BUDGETS, seed=3, iterations=4)
    for a, b in zip(pol, opt):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("probs", [[0.5, 0.3, 0.15], [0.7, 0.2], [0.4, 0.4, 0.1]])
def test_sequoia_on_its_own_vector_equals_optimal(probs):
    budgets = [1, 2, 6, 20, 100]
    opt = run(Optimal(), Fixed(probs), budgets, seed=1, iterations=3)
    pol = run(Sequoia(probs), Fixed(probs), budgets, seed=1, iterations=3)
    np.testing.assert_allclose(pol[1], opt[1], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(pol[0], opt[0])
    np.testing.assert_array_equal(pol[2], opt[2])


def test_negative_control_chain_is_worse_than_optimal():
    """The optimality checks can fail: a chain loses clearly where branching pays."""
    opt = run(Optimal(), Fixed([0.5, 0.3, 0.15]), [4], iterations=1)
    pol = run(Chain(), Fixed([0.5, 0.3, 0.15]), [4], iterations=1)
    assert pol[1][0, 0] < opt[1][0, 0] - 0.1


# ---------------------------------------------------------------------------------------
# Shapes and plain-Python references

def test_static_shapes():
    assert KAry(2).shape(5) == [(0,), (1,), (0, 0), (0, 1), (1, 0)]
    assert Chain().shape(3) == [(0,), (0, 0), (0, 0, 0)]
    assert Expansion([3, 2]).shape(100) == [(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (1, 1),
                                            (2, 0), (2, 1)]
    assert Expansion([2, 1, 1]).shape(4) == [(0,), (1,), (0, 0), (1, 0)]
    # Sequoia: rank 1 only with rank 0 (its DP), even when rank 1 is more likely
    assert Sequoia([0.1, 0.6]).shape(1) == [(0,)]
    assert Sequoia([0.1, 0.6]).shape(2) == [(0,), (1,)]
    assert Sequoia([0.3, 0.35, 0.1, 0.05, 0.02]).shape(1) == [(0,)]     # issue 15's example
    assert Sequoia([0.6, 0.1], max_depth=1).shape(10) == [(0,), (1,)]


@pytest.mark.parametrize("probs,depth", [([0.5, 0.3, 0.15], None), ([0.45, 0.45, 0.1], None),
                                         ([0.6, 0.25, 0.1], 2)])
def test_sequoia_shape_is_brute_force_top_p(probs, depth):
    """The top P nodes of Fixed(a) (ties by depth, then rank path) by full enumeration."""
    a = np.asarray(probs)
    max_d = depth or 8
    nodes = [p for d in range(1, max_d + 1) for p in itertools.product(range(a.size), repeat=d)]
    key = lambda p: (-math.prod(a[list(p)]), len(p), p)  # noqa: E731
    for size in (1, 5, 12, 30):
        want = sorted(nodes, key=key)[:size]
        got = Sequoia(probs, max_depth=depth).shape(size)
        assert sorted(got) == sorted(want)
        np.testing.assert_allclose(sum(math.prod(a[list(p)]) for p in got),
                                   sum(math.prod(a[list(p)]) for p in want), rtol=1e-13)


STATIC = [Chain(), KAry(2), KAry(4), Expansion([3, 2, 2]), Expansion([1, 5]),
          Sequoia([0.5, 0.2, 0.1, 0.05], max_depth=3), Sequoia([0.1, 0.6, 0.2])]


@pytest.mark.parametrize("policy", STATIC, ids=repr)
@pytest.mark.parametrize("family", [Dirichlet(0.3, 20), Fixed([0.6, 0.3])], ids=repr)
def test_static_policies_against_python(policy, family):
    """Past the vocabulary a shape node has probability 0 (Fixed([0.6, 0.3]) with rank 2+)."""
    budgets = [1, 2, 7, 30]

    def trees(env, budgets):
        return [policy.shape(b) for b in budgets]

    check_against(policy, family, budgets, trees)
    if getattr(policy, "nested", True):
        shape = policy.shape(max(budgets))
        assert all(policy.shape(b) == shape[:b] for b in budgets)


def _dynamic_trees(depth, topk, total):
    def trees(env, budgets):
        cand = []                          # (S, depth, generation index, path)

        def expand(s, path):
            lq = env.lq(path)
            for r in range(topk):
                if lq[r] == -math.inf:
                    break
                cand.append((s - lq[r], len(path) + 1, len(cand), path + (r,)))
            return len(cand)

        start, end = 0, expand(0.0, ())
        for _ in range(depth - 1):
            layer = sorted(cand[start:end])[:topk]
            start = end
            for s, _, _, path in layer:
                end = expand(s, path)
        ranked = [c[3] for c in sorted(cand)]
        return [ranked[:min(b, total or b)] for b in budgets]
    return trees


@pytest.mark.parametrize("depth,topk,total", [(1, 3, None), (3, 2, None), (4, 3, 9), (6, 10, None)])
def test_dynamic_against_python(depth, topk, total):
    check_against(Dynamic(depth, topk, total), Dirichlet(0.3, 20), [1, 3, 8, 25, 80],
                  _dynamic_trees(depth, topk, total))


def _noise(key, r):
    """The drafter's standard normal for the child of rank r of the node ``key``."""
    ck = np.uint64(child_key(np.uint64(key), np.uint64(r)))
    return normal(np.uint64(purpose_key(ck, NOISE)), 0)


def _noisy_trees(sigma1, temp, gamma=0.0):
    """Best-first by the drafter's estimate, written out from the docstring of Noisy."""
    beta = 1.0 / temp

    def trees(env, budgets):
        def children(path, s):
            sigma = sigma1 * (len(path) + 1) ** gamma      # the children's depth
            lq = env.lq(path)
            key = np.uint64(node_key(env.seed, env.it, path))
            finite = int(np.sum(lq > -math.inf))
            nh = min(finite, HEAD_K)
            est = [beta * lq[r] + sigma * _noise(key, r) for r in range(nh)]
            log_z = np.logaddexp.reduce(est)
            m = 1.0 - sum(math.exp(v) for v in lq[:nh])       # in the kernel's order
            if finite > HEAD_K:                                 # flat tail at q_K
                log_m = max(math.log(m) if m > 1e-13 else -math.inf, lq[nh])
                log_z = np.logaddexp(log_z, log_m + (beta - 1) * lq[nh] + sigma ** 2 / 2)
            elif m > 1e-13:                                     # missing mass: one token
                log_z = np.logaddexp(log_z, beta * math.log(m) + sigma ** 2 / 2)
            est += [beta * v + sigma ** 2 / 2 for v in lq[nh:finite]]
            return [(s - min(e - log_z, 0.0), path + (r,)) for r, e in enumerate(est)]

        heap = [(s, 1, p) for s, p in children((), 0.0)]
        heapq.heapify(heap)
        order = []
        while len(order) < max(budgets):
            s, d, p = heapq.heappop(heap)
            order.append(p)
            for c in children(p, s):
                heapq.heappush(heap, (c[0], d + 1, c[1]))
        assert max(max(p) for p in order) < env.k - 1   # the provider's ranks sufficed
        return [order[:b] for b in budgets]
    return trees


@pytest.mark.parametrize("sigma,temp,gamma,family", [
    (0.7, 1.0, 0.0, Dirichlet(0.3, 20)), (0.3, 1.7, 0.0, Dirichlet(0.3, 20)),
    (1.5, 0.6, 0.0, Fixed([0.6, 0.3])), (0.5, 1.3, 0.0, Zipf(1.5, 150)),
    (0.5, 1.0, 0.0, Uniform(100)), (0.4, 1.0, 0.7, Dirichlet(0.3, 20)),
    (0.3, 1.4, 1.2, Zipf(1.5, 150)), (0.8, 0.7, 0.5, Fixed([0.6, 0.3]))], ids=repr)
def test_noisy_against_python(sigma, temp, gamma, family):
    """Zipf(1.5, 150) and Uniform(100) have tails beyond the K = 64 scored ranks."""
    budgets = [1, 4, 15, 40]
    acc, exp, dep = run(Noisy(sigma, temp, gamma), family, budgets, seed=9, iterations=3)
    for it in range(3):
        env = Env(family, 9, it, k=256)
        e, x, d = env.score(_noisy_trees(sigma, temp, gamma)(env, budgets))
        np.testing.assert_allclose(exp[:, it], e, rtol=0, atol=1e-12)
        assert acc[:, it].tolist() == x
        assert dep[:, it].tolist() == d


def _contextual():
    """Context-dependent environments: a child's law depends on its parent's level."""
    ctx = pytest.importorskip("brwsim.families")
    return [ctx.MarkovRegime([Dirichlet(0.3, 20), Fixed([0.9, 0.05])], weights=[0.5, 0.5],
                             persistence=0.8),
            ctx.DepthDrift([Dirichlet(0.3, 20), Zipf(1.2, 100), Fixed([0.6, 0.3])]),
            ctx.CorrelatedEntropy([0.3, 1.0, 2.0], rho=0.8)]


@pytest.mark.parametrize("index", range(3))
def test_policies_follow_contexts(index):
    """Every builder hands a node its parent's context: the same trees as node-by-node reads."""
    family = _contextual()[index]
    budgets = [1, 5, 20, 60]
    for a, b in zip(run(Noisy(0.0), family, budgets, seed=4),
                    run(Optimal(), family, budgets, seed=4)):
        np.testing.assert_array_equal(a, b)
    for policy in (KAry(3), Sequoia([0.5, 0.2, 0.1], max_depth=4)):
        check_against(policy, family, budgets,
                      lambda env, budgets: [policy.shape(max(budgets))[:b] for b in budgets])
    check_against(Dynamic(4, 3), family, budgets, _dynamic_trees(4, 3, None))
    acc, exp, dep = run(Noisy(0.6, 1.3), family, budgets, seed=9, iterations=3)
    for it in range(3):
        env = Env(family, 9, it, k=128)
        e, x, d = env.score(_noisy_trees(0.6, 1.3)(env, budgets))
        np.testing.assert_allclose(exp[:, it], e, rtol=0, atol=1e-12)
        assert acc[:, it].tolist() == x and dep[:, it].tolist() == d


@pytest.mark.parametrize("policy", [Noisy(0.0, T=0.1), Noisy(0.5, T=0.1)], ids=repr)
def test_noisy_drafter_certain_along_a_path(policy):
    """Estimates that round to 1 put infinitely many nodes at one estimated position."""
    family = Fixed([0.999999, 0.000001])
    opt = run(Optimal(), family, [5, 60], iterations=2)
    pol = run(policy, family, [5, 60], iterations=2)
    np.testing.assert_allclose(pol[1], opt[1], rtol=0, atol=1e-12)
    assert np.all(pol[2] == np.array([[5], [60]]))


ALL = [Optimal(), Chain(), KAry(3), Expansion([4, 2]), Sequoia([0.5, 0.2]), Dynamic(3, 4, 20),
       Noisy(0.5), Noisy(0.2, T=2.0), Noisy(0.3, T=1.5, gamma=0.8), Sequoia([0.2, 0.5, 0.1])]


@pytest.mark.parametrize("policy", ALL, ids=repr)
def test_chunks_do_not_change_results(policy):
    fam = Dirichlet(0.3, 20)
    whole = run(policy, fam, [2, 10, 40], seed=8, iterations=6)
    parts = [run(policy, fam, [2, 10, 40], seed=8, iterations=n, first=f)
             for f, n in [(0, 2), (2, 4)]]
    for w, a, b in zip(whole, *parts):
        np.testing.assert_array_equal(w, np.concatenate([a, b], axis=1))


# ---------------------------------------------------------------------------------------
# No policy beats the optimal tree (property test)

_FAMILIES = st.one_of(
    st.lists(st.floats(0.02, 1.0), min_size=1, max_size=6).map(
        lambda w: Fixed(list(0.97 * np.asarray(w) / sum(w)))),
    st.builds(Dirichlet, st.sampled_from([0.1, 0.5, 2.0]), st.sampled_from([3, 12, 40])),
    st.builds(Uniform, st.integers(2, 4)),
)
_POLICIES = st.one_of(
    st.just(Chain()),
    st.builds(KAry, st.integers(1, 5)),
    st.builds(Expansion, st.lists(st.integers(1, 4), min_size=1, max_size=4)),
    st.builds(Sequoia, st.lists(st.floats(0.0, 0.19), min_size=1, max_size=5).filter(any),
              st.one_of(st.none(), st.integers(1, 5))),
    st.builds(Dynamic, st.integers(1, 6), st.integers(1, 6),
              st.one_of(st.none(), st.integers(1, 60))),
    st.builds(Noisy, st.floats(0.0, 2.0), st.floats(0.4, 2.5),
              st.one_of(st.just(0.0), st.floats(0.0, 1.5))),
)


@settings(max_examples=200, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(family=_FAMILIES, policy=_POLICIES,
       budgets=st.lists(st.integers(1, 60), min_size=1, max_size=4, unique=True).map(sorted),
       seed=st.integers(0, 2 ** 32))
def test_no_policy_beats_optimal(family, policy, budgets, seed):
    opt = run(Optimal(), family, budgets, seed, iterations=3)
    acc, exp, dep = run(policy, family, budgets, seed, iterations=3)
    assert np.all(exp <= opt[1])           # exact: same nodes, same fixed-point sums
    if getattr(policy, "nested", True):    # an unsorted Sequoia's DP trees need not nest
        assert np.all(np.diff(exp, axis=0) >= 0) and np.all(np.diff(acc, axis=0) >= 0)
    assert np.all(acc <= dep) and np.all(exp <= np.asarray(budgets)[:, None])


# ---------------------------------------------------------------------------------------
# Construction, validation, string forms

INVALID = [
    (lambda: KAry(0), "k"), (lambda: KAry(2.5), "k"), (lambda: Expansion([]), "widths"),
    (lambda: Expansion([2, 0]), r"widths\[1\]"), (lambda: Expansion("22"), "widths"),
    (lambda: Sequoia([]), "acceptance"), (lambda: Sequoia([0.7, 0.6]), "acceptance"),
    (lambda: Sequoia([1.5]), "acceptance"), (lambda: Sequoia([0.0, 0.0]), "acceptance"),
    (lambda: Sequoia([0.5, float("nan")]), "acceptance"),
    (lambda: Sequoia([0.5], max_depth=0), "max_depth"), (lambda: Dynamic(0, 3), "depth"),
    (lambda: Dynamic(2, 0), "topk"), (lambda: Dynamic(2, 2, total=0), "total"),
    (lambda: Dynamic(10 ** 6, 100), "2\\*\\*26"), (lambda: Noisy(-1.0), "sigma"),
    (lambda: Noisy(float("nan")), "sigma"), (lambda: Noisy(0.5, T=0), "T"),
    (lambda: Noisy(0.5, gamma=-0.1), "gamma"),
    (lambda: run_policy(Sequoia([0.2, 0.5]), _spec(Fixed([0.5])), [4000], 0, 0, 1), "max_depth"),
    (lambda: run_policy("chain", None, [1], 0, 0, 1), "policy"),
]


@pytest.mark.parametrize("make,needle", INVALID)
def test_invalid_parameters_raise_clear_errors(make, needle):
    with pytest.raises(UserError, match=needle):
        make()


@pytest.mark.parametrize("policy", ALL + [Sequoia([0.6, 0.2], max_depth=4), Dynamic(6, 10),
                                          Noisy(0.0)], ids=repr)
def test_string_forms_round_trip(policy):
    assert policy.name in POLICIES
    again = parse_policy(repr(policy))
    assert again == policy and repr(again) == repr(policy)


@pytest.mark.parametrize("text,want", [
    ("optimal", Optimal()), ("Chain()", Chain()), ("kary(4)", KAry(4)),
    ("expansion(widths=[4, 2, 2])", Expansion([4, 2, 2])),
    ("sequoia([0.5, 0.2], max_depth=none)", Sequoia([0.5, 0.2])),
    ("dynamic(depth=6, topk=10, total=60)", Dynamic(6, 10, 60)),
    ("noisy(0.5, T=2)", Noisy(0.5, 2.0)),
    ("noisy(0.5, T=2, gamma=0)", Noisy(0.5, 2.0)),
    ("noisy(sigma=0.5, gamma=0.4)", Noisy(0.5, 1.0, 0.4)),
])
def test_parse_policy(text, want):
    got = parse_policy(text)
    assert isinstance(got, Policy) and got == want


@pytest.mark.parametrize("text,needle", [
    ("kary(4", "cannot parse policy"), ("nosuch(1)", "unknown policy"), ("kary(k=2, j=3)", "kary"),
    ("3", "not a policy"), ("chain() extra", "end of the policy"), ("kary(0)", "k must"),
    ("dirichlet(0.1, 10)", "unknown policy"), ("kary(k=2) $", "cannot parse policy"),
])
def test_parse_policy_errors(text, needle):
    with pytest.raises(UserError, match=needle):
        parse_policy(text)


def test_sequoia_from_family():
    pol = Sequoia.from_family(Dirichlet(0.3, 20), size=8, samples=200)
    assert len(pol.acceptance) == 8 and np.all(np.diff(pol.acceptance) <= 0)
    assert pol.acceptance.sum() <= 1.0


def test_policy_gap_is_the_paired_ratio_with_its_delta_method_se():
    from brwsim import policy_gap, simulate

    ds = simulate(Dirichlet(0.1, 50), [4, 32], 200, seed=3,
                  policies=[Optimal(), parse_policy("chain()"), parse_policy("noisy(sigma=0)")])
    g = policy_gap(ds)
    e = ds.expected_accepted.values
    r = e[1].mean(-1) / e[0].mean(-1)
    np.testing.assert_allclose(g.fraction_of_optimal[1], r, rtol=1e-12)
    se = (e[1] - r[:, None] * e[0]).std(-1, ddof=1) / np.sqrt(200) / e[0].mean(-1)
    np.testing.assert_allclose(g.fraction_se[1], se, rtol=1e-12)
    np.testing.assert_allclose(g.fraction_of_optimal[2], 1.0)    # noisy(0) is the optimum
    np.testing.assert_allclose(g.fraction_se[2], 0.0, atol=1e-15)
    assert (g.fraction_of_optimal[1] < 1).all()
    with pytest.raises(UserError, match="policy dimension"):
        policy_gap(simulate(Dirichlet(0.1, 50), [4], 10, seed=3))


def test_depth_capped_optimal_in_generation_runs_and_string_form():
    from brwsim import generate

    pol = parse_policy("optimal(max_depth=3)")
    assert pol == Optimal(max_depth=3) and repr(pol) == "optimal(max_depth=3)"
    assert repr(parse_policy("optimal()")) == "optimal()"
    fam = Dirichlet(0.05, 40)
    capped = generate(fam, pol, 64, 400, seed=1)
    free = generate(fam, "optimal()", 64, 400, seed=1)
    assert capped.depth.values.max() <= 3 and capped.accepted.values.max() <= 3
    assert free.depth.values.max() > 3                      # the cap binds on this family
    with pytest.raises(UserError, match="max_depth"):
        Optimal(max_depth=0)


# ---------------------------------------------------------------------------------------
# Depth-degrading drafter

@pytest.mark.parametrize("name", sorted(FAMILY_TABLE))
def test_noisy_gamma_zero_is_todays_drafter_bit_for_bit(name):
    """gamma = 0 against a copy of the kernel call without the gamma argument's effect."""
    family = FAMILY_TABLE[name]
    for sigma, temp in [(0.5, 1.0), (1.0, 1.6)]:
        base = run(Noisy(sigma, temp), family, BUDGETS, seed=3, iterations=4)
        zero = run(Noisy(sigma, temp, gamma=0.0), family, BUDGETS, seed=3, iterations=4)
        tiny = run(Noisy(sigma, temp, gamma=1e-300), family, BUDGETS, seed=3, iterations=4)
        for a, b, c in zip(base, zero, tiny):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(a, c)       # d**1e-300 == 1.0: the other branch
    assert repr(Noisy(0.5, 1.0, 0.0)) == repr(Noisy(0.5)) and "gamma" not in repr(Noisy(0.5))


def test_noisy_gamma_degrades_deep_nodes_only():
    """Depth-1 noise is sigma for every gamma; a larger gamma loses more E[X] at depth."""
    fam = Dirichlet(0.1, 50)
    e0 = run(Noisy(0.5), fam, [1, 64], seed=2, iterations=300)[1].mean(axis=1)
    e1 = run(Noisy(0.5, gamma=1.0), fam, [1, 64], seed=2, iterations=300)[1].mean(axis=1)
    # P = 1 is the first-level argmax, whose noise is sigma * 1**gamma for any gamma
    assert e0[0] == e1[0]
    assert e1[1] < e0[1] - 0.05


# ---------------------------------------------------------------------------------------
# Peer conventions: Sequoia's DP and EAGLE's topK_genrate, ported independently

def _sequoia_dp_port(p, max_budget, max_depth):
    """Sequoia's tree_search.py DP (Infini-AI-Lab/Sequoia @ 0ff3ff7), ported to plain Python.

    ``p`` is Sequoia's vector layout (p[0] unused, p[b] the b-th child's acceptance);
    returns ``results[m][l]`` = T[m][l].max(), the best expected number of accepted
    tokens, root included, of a tree of m nodes (root included) and at most l levels.
    """
    neg = -math.inf
    nb = len(p) - 1
    T = [[[neg] * (nb + 1) for _ in range(max_depth + 1)] for _ in range(max_budget + 1)]
    for l in range(1, max_depth + 1):
        T[1][l][0] = 1.0
    for m in range(2, max_budget + 1):
        for l in range(2, max_depth + 1):
            best_below = max(T[m - 1][l - 1])
            T[m][l][1] = 1 + p[1] * best_below if best_below > neg else neg
            for b in range(2, nb + 1):
                max_value = neg
                for y in range(1, m):
                    below = max(T[m - y][l - 1])
                    if T[y][l][b - 1] > neg and below > neg:
                        max_value = max(max_value, T[y][l][b - 1] + p[b] * below)
                T[m][l][b] = max_value
    return [[max(T[m][l]) for l in range(max_depth + 1)] for m in range(max_budget + 1)]


def _positional_value(acceptance, paths):
    return 1.0 + math.fsum(math.prod(acceptance[r] for r in p) for p in paths)


@pytest.mark.parametrize("acc,depth", [
    ([0.3, 0.35, 0.1, 0.05, 0.02], None), ([0.3, 0.01, 0.6], 3), ([0.05, 0.5, 0.2, 0.1], 4),
    ([0.0, 0.4, 0.3], 5), ([0.5, 0.3, 0.15], 3), ([0.2, 0.2, 0.3, 0.1], None)])
def test_sequoia_matches_its_dp(acc, depth):
    """The tree of every budget reaches the value of Sequoia's own DP (ported above).

    The shape is valid for the DP's constraint (rank r only with ranks 0..r-1, depth <=
    max_depth, exactly P nodes) and its positional value equals the DP's optimum.
    """
    pol = Sequoia(acc, max_depth=depth)
    p_max = 24
    levels = (depth if depth is not None else p_max) + 1
    results = _sequoia_dp_port([0.0] + list(acc), p_max + 1, levels)
    for P in range(1, p_max + 1):
        tree = pol.shape(P)
        nodes = set(tree)
        assert len(nodes) == P == len(tree)
        for path in tree:
            assert path[:-1] in nodes or len(path) == 1
            assert path[-1] == 0 or path[:-1] + (path[-1] - 1,) in nodes
            assert depth is None or len(path) <= depth
        np.testing.assert_allclose(_positional_value(acc, tree), results[P + 1][levels],
                                   rtol=1e-12)


def test_sequoia_unsorted_takes_rank_zero_on_a_random_environment():
    """P = 1 with [.3, .35, .1, .05, .02]: the DP (and so the policy) drafts rank 0."""
    fam = Dirichlet(0.1, 200)
    pol = run(Sequoia([0.3, 0.35, 0.1, 0.05, 0.02]), fam, [1], seed=4, iterations=400)
    chain = run(Chain(), fam, [1], seed=4, iterations=400)
    for a, b in zip(pol, chain):
        np.testing.assert_array_equal(a, b)


def test_sequoia_sorted_vector_heap_equals_dp():
    """A non-increasing vector: the best-first tree reaches the DP's value at every P."""
    acc = [0.45, 0.2, 0.1, 0.05]
    for depth in (None, 3):
        pol = Sequoia(acc, max_depth=depth)
        assert pol.nested
        levels = (depth or 30) + 1
        results = _sequoia_dp_port([0.0] + acc, 31, levels)
        for P in (1, 2, 5, 13, 30):
            np.testing.assert_allclose(_positional_value(acc, pol.shape(P)),
                                       results[P + 1][levels], rtol=1e-12)


def _eagle_topk_genrate(env, depth, top_k, total_token):
    """EAGLE's ``topK_genrate`` (SafeAILab/EAGLE @ cb7e084, eagle/model/cnets.py), in numpy.

    The drafter's log-softmax is the environment's true log q (the setting of
    :class:`Dynamic`). Returns the rank paths of the ``total_token - 1`` drafted tokens
    (the root is prepended by EAGLE and not drafted), after checking that EAGLE's parent
    index arithmetic points at each token's true parent.
    """
    total_tokens = total_token - 1                   # self.total_tokens = total_tokens - 1

    def topk(x, k):
        idx = np.argsort(-x, kind="stable")[:k]
        return idx, x[idx]

    lq = env.lq(())
    idx, vals = topk(lq, top_k)
    scores = vals
    scores_list = [scores]
    parents_list = [np.zeros(1, np.int64)]
    flat_paths = [(int(r),) for r in idx]            # aligned with scores_list, flattened
    cur = list(flat_paths)                           # the nodes fed to the next layer
    topk_cs_index = np.arange(top_k)
    for i in range(depth):
        bias1 = top_k if i > 0 else 0
        bias2 = max(0, i - 1)
        bias = 1 + top_k ** 2 * bias2 + bias1
        parents_list.append(topk_cs_index + bias)
        child_idx = np.empty((len(cur), top_k), np.int64)
        child_p = np.empty((len(cur), top_k))
        for j, path in enumerate(cur):
            child_idx[j], child_p[j] = topk(env.lq(path), top_k)
        cu_scores = child_p + scores[:, None]
        topk_cs_index, scores = topk(cu_scores.ravel(), top_k)
        layer_paths = [cur[j] + (int(child_idx[j, c]),) for j in range(len(cur))
                       for c in range(top_k)]
        flat_paths += layer_paths
        cur = [layer_paths[t] for t in topk_cs_index]
        scores_list.append(cu_scores.ravel())
    scores_all = np.concatenate(scores_list)
    top_index, _ = topk(scores_all, total_tokens)
    top_index = np.sort(top_index)
    draft_parents = np.concatenate(parents_list)[top_index // top_k]
    for t, par in zip(top_index, draft_parents):     # parent index - 1 = parent's flat index
        if par == 0:
            assert len(flat_paths[t]) == 1
        else:
            assert flat_paths[par - 1] == flat_paths[t][:-1]
    return [flat_paths[t] for t in top_index]


@pytest.mark.parametrize("depth,top_k,total_token", [(1, 3, 6), (3, 4, 20), (5, 3, 17),
                                                     (2, 5, 31)])
def test_dynamic_is_eagles_tree_with_the_documented_mapping(depth, top_k, total_token):
    """EAGLE (D, k, N) is Dynamic(depth=D + 1, topk=k, total=N - 1), at any P >= N - 1."""
    fam = Dirichlet(0.3, 20)
    pol = Dynamic(depth + 1, top_k, total_token - 1)
    budgets = [total_token - 1, total_token + 40]
    acc, exp, dep = run(pol, fam, budgets, seed=11, iterations=4)
    for it in range(4):
        env = Env(fam, 11, it)
        tree = _eagle_topk_genrate(env, depth, top_k, total_token)
        assert len(tree) == total_token - 1
        e, x, d = env.score([tree, tree])
        np.testing.assert_allclose(exp[:, it], e, rtol=0, atol=1e-13)
        assert acc[:, it].tolist() == x and dep[:, it].tolist() == d
    # the off-by-one readings differ: depth D layers, or N drafted tokens
    wrong = run(Dynamic(depth, top_k, total_token), fam, [total_token + 40], seed=11,
                iterations=4)[1]
    assert not np.allclose(wrong[0], exp[1])
