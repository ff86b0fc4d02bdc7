"""Batch-shared budgets: the forest kernel against exact answers, brute force and B = 1."""

from __future__ import annotations

import math

import numpy as np
import pytest

from brwsim import Dirichlet, Fixed, Geometric, Uniform, UserError, simulate, summarize
from brwsim.environment import _node_head
from brwsim.kernels.rng import PATH, child_key, purpose_key, root_key, unit
from brwsim.kernels.forest import request_key, split_budgets
from brwsim.kernels.tree import NO_DEPTH_CAP
from brwsim.simulate import run_forest, run_iterations, seed_key, validate_budgets


def test_batch_one_is_the_single_tree(family):
    """batch=1 is bit-identical to the default, and the forest kernel at B = 1 to the tree kernel."""
    b = validate_budgets([1, 3, 10, 50])
    ref = simulate(family, b, 12, seed=5)
    one = simulate(family, b, 12, seed=5, batch=1)
    for ds in (ref, one):
        del ds.attrs["date_created"], ds.attrs["history"]     # timestamps
    diff = [v for v in ref.variables if not ref[v].identical(one[v])]
    diff += [k for k in ref.attrs if ref.attrs[k] != one.attrs.get(k)]
    assert not diff, (diff, [(ref[v].values, one[v].values) for v in diff if v in ref.variables])
    acc, exp, dep, acc_s, exp_s, _, _, _ = run_forest(family.spec(), b, seed_key(5), 0, 12, 1)
    np.testing.assert_array_equal(acc, ref.accepted.values)
    np.testing.assert_array_equal(exp, ref.expected_accepted.values)
    np.testing.assert_array_equal(dep, ref.depth.values)
    np.testing.assert_array_equal(acc_s, ref.accepted.values)       # the split of one request
    np.testing.assert_array_equal(exp_s, ref.expected_accepted.values)


@pytest.mark.parametrize("fam", [Uniform(3), Fixed([0.5, 0.3, 0.15]), Geometric(0.6)],
                         ids=["uniform", "fixed", "geometric"])
@pytest.mark.parametrize("batch", [2, 4, 8])
def test_deterministic_family_is_b_times_one_tree(fam, batch):
    """Identical deterministic roots: E[X | F_P] = B E[X | T_{P/B}], exactly; the split too."""
    per = [1, 2, 5, 13, 40, 121]
    single = simulate(fam, per, 3, seed=2)
    ds = simulate(fam, [batch * p for p in per], 3, seed=2, batch=batch)
    want = batch * single.expected_accepted.values
    np.testing.assert_allclose(ds.expected_accepted.values, want, rtol=1e-13, atol=0)
    np.testing.assert_allclose(ds.expected_accepted_split.values, want, rtol=1e-13, atol=0)


@pytest.mark.parametrize("fam", [Dirichlet(0.3, 50), Dirichlet(0.05, 2000), Geometric(0.6),
                                 Fixed([0.6, 0.3])], ids=["dir50", "dir_lazy", "geo", "fixed"])
def test_sharing_never_worse_than_split(fam):
    """Per iteration, E[X | shared forest] >= E[X | equal split] on the same roots."""
    budgets = [1, 2, 3, 7, 16, 33, 100, 256]
    ds = simulate(fam, budgets, 40, seed=9, batch=5)
    shared, split = ds.expected_accepted.values, ds.expected_accepted_split.values
    assert np.all(shared >= split * (1 - 1e-13))
    assert np.all(np.diff(shared, axis=0) >= -1e-12)                 # nested budgets
    s = summarize(ds)
    assert np.all(s.sharing_gain.values >= 1 - 1e-12)


def test_split_rule_floor_plus_remainder():
    """P = 7 over B = 3: requests get 3, 2, 2 nodes; P < B leaves the last requests empty."""
    sb = split_budgets(np.array([2, 7, 9], np.int64), 3)
    np.testing.assert_array_equal(sb, [[1, 3, 3], [1, 2, 3], [0, 2, 3]])
    assert np.all(sb.sum(axis=0) == [2, 7, 9])


def test_request_keys_pure_function():
    """Request roots depend on (seed, iteration, request) only, not on B or chunking."""
    key = seed_key(11)
    b = validate_budgets([4, 12])
    big = run_forest(Dirichlet(0.3, 50).spec(), b, key, 0, 6, 4)
    small = run_forest(Dirichlet(0.3, 50).spec(), b, key, 3, 3, 4)
    for i in range(5):
        np.testing.assert_array_equal(big[i][:, 3:], small[i])
    keys = {int(request_key(key, it, r)) for it in range(50) for r in range(50)}
    assert len(keys) == 2500
    # request 0 is the single-tree root of the iteration
    assert all(int(request_key(key, it, 0)) == int(root_key(key, it)) for it in range(20))


# --- brute force -----------------------------------------------------------------------

def _brute_forest(fam, seed, iteration, batch, budgets, depth, vocab):
    """Enumerate every node of depth <= ``depth`` of the B roots, take the global top P.

    Order: smaller S = -log p, then smaller depth, then smaller request, then the
    lexicographically smaller rank path. Returns (E[X | F], X, forest depth) per budget.
    """
    spec = fam.spec()
    key = seed_key(seed)
    nodes = []            # (S, depth, request, path)
    uniforms = {}
    for r in range(batch):
        root = np.uint64(request_key(key, iteration, r))

        def walk(path, s, k):
            lq = np.empty(vocab)
            _node_head(spec.law, spec.head_cap, root, np.asarray(path, np.int64), vocab, lq)
            uniforms[(r, path)] = (float(unit(np.uint64(purpose_key(np.uint64(k), PATH)), 0)), lq)
            if len(path) == depth:
                return
            for rank in range(vocab):
                if lq[rank] == -math.inf:
                    break
                sc = s - lq[rank]
                child = path + (rank,)
                nodes.append((sc, len(child), r, child))
                walk(child, sc, np.uint64(child_key(np.uint64(k), np.uint64(rank))))

        walk((), 0.0, root)
    nodes.sort()
    out_e, out_x, out_d = [], [], []
    for p in budgets:
        top = nodes[:p]
        chosen = {(r, path) for _, _, r, path in top}
        x = 0
        for r in range(batch):
            path = ()
            while True:
                u, lq = uniforms[(r, path)]
                cum = np.cumsum(np.exp(lq))
                nxt = path + (int(np.searchsorted(cum, u)),)
                if (r, nxt) not in chosen:
                    break
                x += 1
                path = nxt
        out_e.append(math.fsum(math.exp(-s) for s, _, _, _ in top))
        out_x.append(x)
        out_d.append(max(d for _, d, _, _ in top))
    return out_e, out_x, out_d


@pytest.mark.parametrize("fam,vocab,depth", [(Dirichlet(0.5, 3), 3, 5), (Uniform(2), 2, 6),
                                             (Fixed([0.5, 0.3, 0.2]), 3, 4)],
                         ids=["dirichlet", "uniform_ties", "fixed_ties"])
def test_forest_matches_brute_force(fam, vocab, depth):
    """Depth-capped forests (every node enumerated): E[X | F], X and depth exactly."""
    budgets = [1, 2, 5, 11, 30, 60]
    batch, seed = 3, 4
    b = validate_budgets(budgets)
    acc, exp, dep, acc_s, exp_s, _, _, _ = run_forest(fam.spec(), b, seed_key(seed), 0, 3, batch,
                                                      max_depth=depth)
    for it in range(3):
        e, x, d = _brute_forest(fam, seed, it, batch, budgets, depth, vocab)
        np.testing.assert_allclose(exp[:, it], e, rtol=0, atol=1e-12)
        assert list(acc[:, it]) == x
        assert list(dep[:, it]) == d
        # the equal split: each request's own top P_r, brute-forced one root at a time
        sb = split_budgets(b, batch)
        e_split = np.zeros(len(budgets))
        for r in range(batch):
            er = _brute_request(fam, seed, it, r, sb[r], depth, vocab)
            e_split += er
        np.testing.assert_allclose(exp_s[:, it], e_split, rtol=0, atol=1e-12)


def _brute_request(fam, seed, it, r, budgets, depth, vocab):
    """E[X | T] of request r's own top-P tree (depth-capped enumeration)."""
    spec = fam.spec()
    root = np.uint64(request_key(seed_key(seed), it, r))
    vals = []

    def walk(path, s):
        if len(path) == depth:
            return
        lq = np.empty(vocab)
        _node_head(spec.law, spec.head_cap, root, np.asarray(path, np.int64), vocab, lq)
        for rank in range(vocab):
            if lq[rank] > -math.inf:
                vals.append(s - lq[rank])
                walk(path + (rank,), s - lq[rank])

    walk((), 0.0)
    vals.sort()
    return np.array([math.fsum(math.exp(-v) for v in vals[:p]) for p in budgets])


def test_uncapped_forest_matches_brute_force():
    """Without a depth cap, when the enumeration provably holds the top P (checked)."""
    fam, vocab, depth, batch, seed = Dirichlet(1.0, 3), 3, 6, 4, 8
    budgets = [1, 4, 9, 20]
    b = validate_budgets(budgets)
    acc, exp, dep, *_ = run_forest(fam.spec(), b, seed_key(seed), 0, 4, batch)
    checked = 0
    for it in range(4):
        e, x, d = _brute_forest(fam, seed, it, batch, budgets, depth, vocab)
        if max(d) >= depth:          # the top P might reach below the enumeration
            continue
        checked += 1
        np.testing.assert_allclose(exp[:, it], e, rtol=0, atol=1e-12)
        assert list(acc[:, it]) == x
    assert checked >= 2


def test_uniform_ties_go_to_the_first_request():
    """Uniform(2), B = 3, P = 6 + 2: the two depth-2 nodes both go to request 0."""
    _, acc, _ = _brute_forest(Uniform(2), 0, 0, 3, [8], 3, 2)
    ds = simulate(Uniform(2), [8], 20, seed=0, batch=3)
    np.testing.assert_allclose(ds.expected_accepted.values, 3 * 1.0 + 2 * 0.25, atol=1e-15)
    assert np.all(ds.depth.values == 2)
    assert ds.accepted.values[0, 0] == acc[0]


def test_bad_batch():
    for bad in [0, -1, 2.5, True, "4"]:
        with pytest.raises(UserError, match="batch"):
            simulate(Uniform(2), [4], 2, batch=bad)
    with pytest.raises(UserError, match="policies"):
        simulate(Uniform(2), [4], 2, batch=2, policies=["chain()"])


def test_summarize_per_request():
    ds = simulate(Dirichlet(0.3, 50), [4, 32], 30, seed=1, batch=4)
    s = summarize(ds)
    np.testing.assert_allclose(s.expected_per_request, ds.expected_accepted.mean("iteration") / 4)
    np.testing.assert_allclose(s.tokens_per_call, 1 + ds.accepted.mean("iteration") / 4)
    np.testing.assert_allclose(s.tokens_per_batch_call, 4 + ds.accepted.mean("iteration"))
    assert "paper_bound" not in ds and ds.attrs["batch"] == 4
