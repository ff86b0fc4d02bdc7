"""Batched tree evaluation: the numpy backend, trees in rounds, roots along sampled answers.

References: ``tinyckpt.reference_logits`` (each node's whole prefix recomputed in float64
numpy, written from the architectures' definitions) and the node-at-a-time numba pass
(``simulate`` with the default backend), whose trees the rounds must reproduce.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from brwsim import Transformer, UserError, simulate
from brwsim.backends.base import TreeEvaluator
from brwsim.backends.contexts import AnswerRoots
from brwsim.backends import numpyforward
from brwsim.backends.numpyforward import NumpyEvaluator
from brwsim.backends.rounds import optimal_tree, optimal_trees, score_budgets
from brwsim.families.transformer import shipped_checkpoint
from brwsim.keys import node_key, seed_key
from brwsim.kernels.rng import PATH, purpose_key, unit

from tests.unit.tinyckpt import reference_logits, write_gpt2, write_llama

TEXT = ("The quick brown fox jumps over the lazy dog. A stitch in time saves nine. "
        "All that glitters is not gold. Better late than never. ") * 4


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    base = tmp_path_factory.mktemp("ckpt")
    return {"gpt2": write_gpt2(base / "gpt2"),
            "llama": write_llama(base / "llama", bias=True, vocab=270, scale=0.5),
            "tied": write_llama(base / "tied", tied=True, kv_heads=1)}


def _ref_lp(folder, tokens):
    z = reference_logits(folder, tokens)
    return z - (z.max() + math.log(np.exp(z - z.max()).sum()))


def _assert_reference(folder, ctx, parents, toks, out):
    """Each node's row of ``out`` = its whole prefix (context, then its path) recomputed
    from scratch, to 1e-12."""
    for i in range(toks.size):
        path, j = [], i
        while j >= 0:
            path.append(toks[j])
            j = parents[j]
        want = _ref_lp(folder, np.concatenate([ctx, path[::-1]]))
        assert np.abs(out[i] - want).max() < 1e-12, i


@pytest.mark.parametrize("arch, form", [("gpt2", "union"), ("llama", "union"),
                                        ("tied", "union"), ("llama", "own"), ("gpt2", "own")])
def test_extend_equals_recomputing_the_prefix(ckpts, arch, form, monkeypatch):
    """start + extend in batches (parents inside a batch too) = every node's whole prefix
    recomputed from scratch, to 1e-12 in float64; a later start reuses the common prefix.
    Both forms of a batch's tree attention (the union of its ancestors; each row its own
    padded path), contexts run in several blocks and the LM head's rows in several blocks
    give the same numbers."""
    monkeypatch.setattr(numpyforward, "_OWN_RATIO", 10 ** 6 if form == "union" else 0)
    monkeypatch.setattr(numpyforward, "_CHUNK", 512 if form == "union" else 7)
    monkeypatch.setattr(numpyforward, "_OUT_ROWS", 256 if form == "union" else 2)
    monkeypatch.setattr(numpyforward, "_EXP_ROWS", 16 if form == "union" else 3)
    folder = ckpts[arch]
    ev = NumpyEvaluator.from_folder(str(folder), "float64")
    assert isinstance(ev, TreeEvaluator)
    rng = np.random.default_rng(3)
    ctx = rng.integers(0, 256, 40)
    assert np.abs(ev.start(ctx) - _ref_lp(folder, ctx)).max() < 1e-12
    parents = np.array([-1, -1, 0, 0, 2, 1, 4, 6, -1])
    toks = rng.integers(0, 256, parents.size)
    out = np.vstack([ev.extend(parents[:1], toks[:1]), ev.extend(parents[1:5], toks[1:5]),
                     ev.extend(parents[5:], toks[5:])])
    _assert_reference(folder, ctx, parents, toks, out)
    ev.start(ctx)                              # node at a time: the same numbers
    for i in range(parents.size):
        one = ev.extend(parents[i:i + 1], toks[i:i + 1])[0]
        assert np.abs(one - out[i]).max() < 1e-12, i
    longer = np.concatenate([ctx, [7, 8, 9]])
    assert np.abs(ev.start(longer) - _ref_lp(folder, longer)).max() < 1e-12
    single = ev.extend(np.array([-1]), np.array([5]))[0]
    assert np.abs(single - _ref_lp(folder, np.concatenate([longer, [5]]))).max() < 1e-12


def test_returned_log_probabilities_are_never_overwritten_while_held(ckpts):
    """extend reuses its output blocks, but never one the caller still holds (whole, or
    a row of it): held outputs keep their values through many later calls, and a block
    whose every view was dropped is handed out again."""
    ev = NumpyEvaluator.from_folder(str(ckpts["tied"]), "float64")
    rng = np.random.default_rng(4)
    ev.start(rng.integers(0, 256, 12))
    whole = ev.extend(np.array([-1, -1]), rng.integers(0, 256, 2))
    row = ev.extend(np.array([0, 1, 1]), rng.integers(0, 256, 3))[2]
    kept = whole.copy(), row.copy()
    for _ in range(6):                          # released at once
        ev.extend(np.array([-1]), rng.integers(0, 256, 1))
    assert np.array_equal(whole, kept[0]) and np.array_equal(row, kept[1])
    outs = numpyforward._Outputs(8)
    a = outs.block(3)
    address = a.__array_interface__["data"][0]
    assert not np.shares_memory(outs.block(3), a)           # held: another block
    del a
    assert outs.block(2).__array_interface__["data"][0] == address
    view = outs.block(2)[1]
    assert all(not np.shares_memory(outs.block(2), view) for _ in range(3))


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_root_slots_extend_together(ckpts, arch, monkeypatch):
    """Three roots in three slots, their batches in one extend_slots call (one of them in
    each row's own-path form, one after a start that reused a prefix) = each node's
    prefix recomputed from scratch, to 1e-12 in float64; the slots keep their roots."""
    folder = ckpts[arch]
    ev = NumpyEvaluator.from_folder(str(folder), "float64")
    rng = np.random.default_rng(8)
    ctxs = [rng.integers(0, 256, n) for n in (9, 30, 17)]
    trees = [(np.array([-1, 0, 0, 1]), rng.integers(0, 256, 4)),
             (np.array([-1]), rng.integers(0, 256, 1)),
             (np.array([-1, -1, 1, 2, 3, 4, 5]), rng.integers(0, 256, 7))]
    for j, c in enumerate(ctxs):
        ev.use_slot(j)
        if j == 2:
            ev.start(ctxs[2][:10])
        assert np.abs(ev.start(c) - _ref_lp(folder, c)).max() < 1e-12
    assert ev.slot == 2
    monkeypatch.setattr(numpyforward, "_OWN_RATIO", 1)       # the deep tree: own paths
    first = ev.extend_slots([(j, p[:2], t[:2]) for j, (p, t) in enumerate(trees)])
    rest = ev.extend_slots([(j, p[2:], t[2:]) for j, (p, t) in enumerate(trees) if p.size > 2])
    outs = [np.vstack([first[0], rest[0]]), first[1], np.vstack([first[2], rest[1]])]
    for c, (parents, toks), out in zip(ctxs, trees, outs):
        _assert_reference(folder, c, parents, toks, out)
    with pytest.raises(UserError, match="distinct"):
        ev.extend_slots([(0, [-1], [1]), (0, [-1], [2])])
    with pytest.raises(UserError, match="never used"):
        ev.extend_slots([(5, [-1], [1])])
    with pytest.raises(UserError, match="parent"):       # checked before any slot changes
        ev.extend_slots([(0, [-1], [1]), (1, [9], [2])])
    ev.use_slot(0)
    assert np.abs(ev.extend(np.array([-1]), np.array([3]))[0] - _ref_lp(
        folder, np.concatenate([ctxs[0], [3]]))).max() < 1e-12


def test_lockstep_trees_equal_one_at_a_time(ckpts):
    """optimal_trees of four roots, three in flight at a time (the first to finish hands
    its slot to the fourth) = optimal_tree of each alone (identical trees, positions to
    float64 rounding), and slot 0 is current after."""
    ev = NumpyEvaluator.from_folder(str(ckpts["llama"]), "float64")
    rng = np.random.default_rng(2)
    ctxs = [rng.integers(0, 256, n) for n in (5, 12, 20, 3)]
    keys = [node_key(9, i, ()) for i in range(4)]
    together = optimal_trees(ev, ctxs, 40, keys, beta=0.8, slots=3)   # a slot is reused
    assert ev.slot == 0
    for c, k, a in zip(ctxs, keys, together):
        b = optimal_tree(ev, c, 40, k, beta=0.8)
        for f in ("depth", "onpath", "tokens", "ranks", "parents"):
            np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
        np.testing.assert_allclose(a.pos, b.pos, rtol=1e-13)


def test_float32_within_float32_rounding(ckpts):
    f64 = NumpyEvaluator.from_folder(str(ckpts["llama"]), "float64")
    f32 = NumpyEvaluator.from_folder(str(ckpts["llama"]), "float32")
    ctx = np.arange(30) % 256
    a, b = f64.start(ctx), f32.start(ctx)
    assert b.dtype == np.float64 and np.abs(a - b).max() < 1e-4
    par, tok = np.array([-1, 0, 0]), np.array([3, 4, 5])
    assert np.abs(f64.extend(par, tok) - f32.extend(par, tok)).max() < 1e-4


@pytest.mark.parametrize("which", ["target", "llama"])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_rounds_equal_the_numba_pass(ckpts, which, temperature):
    """The same trees as the node-at-a-time numba pass (whole window + path contexts):
    E[X | T_P] at every budget 1..64 to 1e-12, X_P and depth equal."""
    folder = shipped_checkpoint("target") if which == "target" else ckpts["llama"]
    budgets = np.arange(1, 65)
    ref = simulate(Transformer(folder, prompts=TEXT, window=12, carry=100,
                               temperature=temperature), budgets, 3, seed=7)
    fam = Transformer(folder, prompts=TEXT, window=12, carry=100, temperature=temperature,
                      backend="numpy", dtype="float64", contexts="window")
    ds = simulate(fam, budgets, 3, seed=7)
    assert np.abs(ds.expected_accepted.values - ref.expected_accepted.values).max() < 1e-12
    assert (ds.accepted.values == ref.accepted.values).all()
    assert (ds.depth.values == ref.depth.values).all()
    assert ds.attrs["family"] == repr(fam) and "backend='numpy'" in repr(fam)


def test_rounds_do_not_depend_on_batching(ckpts):
    """Rounds of 1 node (plain best-first) and of 64 give identical trees (positions to
    float64 rounding: BLAS sums in an order that depends on the batch's shape); every
    budget's prefix is the top P."""
    ev = NumpyEvaluator.from_folder(str(ckpts["gpt2"]), "float64")
    ctx = np.arange(10, 22)
    key = node_key(4, 0, ())
    a = optimal_tree(ev, ctx, 50, key, round_max=1, round_min=1)
    b = optimal_tree(ev, ctx, 50, key, round_max=64, t_start=20.0)
    assert a.rounds > b.rounds and b.evaluated >= 50
    for f in ("depth", "onpath", "tokens", "ranks", "parents"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    np.testing.assert_allclose(a.pos, b.pos, rtol=1e-13)
    assert np.all(np.diff(a.pos) >= -1e-12)
    acc, exp, dep = score_budgets(a, np.array([1, 10, 50]))
    assert exp[0] == pytest.approx(math.exp(-a.pos[0]))
    assert dep[-1] == a.depth.max() and acc[-1] == a.onpath.sum()


def test_answer_roots_follow_the_sampled_answer(ckpts):
    """A root's context is its prompt then the first k tokens of one keyed answer per
    prompt, each token drawn by inverse CDF over ranks of the recomputed distribution."""
    folder = ckpts["llama"]
    ev = NumpyEvaluator.from_folder(str(folder), "float64")
    prompts = [np.array([3, 1, 4, 1, 5]), np.array([9, 2, 6])]
    roots = AnswerRoots(ev, prompts, seed_key(11), 6, per_prompt=2)
    seen = []
    for it in range(8):
        rk = node_key(11, it, ())
        ctx = roots.context(it, rk)
        p = prompts[(it // 2) % 2]
        k = roots.k_of(it, rk)
        assert 0 <= k <= 6 and ctx.size == p.size + k
        np.testing.assert_array_equal(ctx[:p.size], p)
        seen.append(((it // 2) % 2, ctx[p.size:]))
    full = [roots.answer(i, 6) for i in range(2)]
    for i, part in seen:
        np.testing.assert_array_equal(part, full[i][:part.size])
    # the first tokens of answer 0, drawn by hand from the reference distributions
    akey = None
    for j in range(3):
        lq = _ref_lp(folder, np.concatenate([prompts[0], full[0][:j]]))
        order = np.lexsort((np.arange(lq.size), -lq))
        cum = np.cumsum(np.exp(lq[order]))
        if akey is None:
            from brwsim.backends.contexts import _ANSWER
            from brwsim.kernels.rng import mix, root_key

            akey = np.uint64(purpose_key(np.uint64(root_key(
                np.uint64(mix(np.uint64(seed_key(11)) ^ _ANSWER)), np.uint64(0))), PATH))
        r = int(np.searchsorted(cum, unit(akey, j)))
        assert full[0][j] == order[r]


def test_family_answer_contexts_run(ckpts):
    fam = Transformer(ckpts["gpt2"], prompts=["Hello there", "General Kenobi"],
                      backend="numpy", answer=4)
    ds = simulate(fam, [1, 8], 2, seed=1)
    assert ds.expected_accepted.shape == (2, 2) and np.all(ds.expected_accepted.values > 0)
    assert fam.root_context(seed_key(1), 0)[:5].tolist() == list(b"Hello")
    assert fam.root_context(seed_key(1), 4)[:7].tolist() == list(b"General")


@pytest.mark.parametrize("kw, match", [
    (dict(backend="jax"), "backend must be"),
    (dict(dtype="float32"), "not available with backend=numba"),
    (dict(backend="numpy", dtype="bfloat16"), "not available with backend=numpy"),
    (dict(backend="numpy", device="cuda"), "device 'cuda'"),
    (dict(contexts="answer"), "contexts must be"),
    (dict(prompts=["a", "b"]), "needs contexts='answer'"),
    (dict(backend="numpy", prompts=[[999]]), "prompt 0"),
])
def test_bad_backend_settings(ckpts, kw, match):
    with pytest.raises(UserError, match=match):
        Transformer(ckpts["gpt2"], **kw)


def test_torch_missing_names_the_extra(ckpts, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)
    fam = Transformer(ckpts["gpt2"], prompts=["Hi"], backend="torch")
    with pytest.raises(UserError, match=r"pip install 'brwsim\[torch\]'"):
        fam.evaluator()


def test_batched_runs_refuse_policies_and_batches(ckpts):
    fam = Transformer(ckpts["gpt2"], prompts=["Hi"], backend="numpy")
    with pytest.raises(UserError, match="not available with backend=numpy"):
        simulate(fam, [4], 1, policies=["chain()"])
    with pytest.raises(UserError, match="batch > 1"):
        simulate(fam, [4], 1, batch=2)


def test_context_features_are_the_final_normed_states():
    """context_features: one row per context position, the same with or without a shared
    prefix already cached, and the last row gives start()'s log-probabilities."""
    folder = shipped_checkpoint("target")
    ctx = np.arange(40) % 200
    longer = np.concatenate([ctx, [5, 6, 7]])
    a = NumpyEvaluator.from_folder(folder, "float64")
    first = a.context_features(ctx)
    both = a.context_features(longer)                 # reuses the cached prefix
    b = NumpyEvaluator.from_folder(folder, "float64")
    fresh = b.context_features(longer)
    assert first.shape == (40, fresh.shape[1])
    np.testing.assert_array_equal(both[:40], first)
    np.testing.assert_allclose(both, fresh, rtol=0, atol=1e-13)
    z = fresh[-1] @ b.lm_head().T
    z = z - z.max()
    np.testing.assert_allclose(z - np.log(np.exp(z).sum()), b.start(longer), rtol=0, atol=1e-12)


SMOLLM2_HF = "/tmp/models/smollm2-hf"


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir(SMOLLM2_HF), reason="no SmolLM2 Hugging Face folder")
def test_smollm2_float64_and_float32_equal_true_float64_transformers():
    """SmolLM2-135M-Instruct: the numpy backend's start and tree batches against
    transformers run in true float64 (the torch backend: norms and rotary angles in
    float64 too), to 1e-9 in float64 and 1e-4 in float32, at a 600-token context (two
    blocks of start) with a tree whose batches hold whole subtrees."""
    pytest.importorskip("transformers")
    from brwsim.backends.torchforward import TorchEvaluator

    ref = TorchEvaluator(SMOLLM2_HF, dtype="float64")
    rng = np.random.default_rng(5)
    ctx = rng.integers(0, 49152, 600)
    parents = np.array([-1, -1, 0, 0, 2, 1, 4, 6, -1, 3])
    toks = rng.integers(0, 49152, parents.size)
    want = [ref.start(ctx)]
    want.append(np.vstack([ref.extend(parents[:3], toks[:3]), ref.extend(parents[3:], toks[3:])]))
    del ref
    for dtype, tol in (("float64", 1e-9), ("float32", 1e-4)):
        ev = NumpyEvaluator.from_folder(SMOLLM2_HF, dtype)
        assert np.abs(ev.start(ctx) - want[0]).max() < tol
        got = np.vstack([ev.extend(parents[:3], toks[:3]), ev.extend(parents[3:], toks[3:])])
        assert np.abs(got - want[1]).max() < tol, dtype
        del ev
