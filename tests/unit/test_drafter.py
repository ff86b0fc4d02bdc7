"""The drafter policy: a second checkpoint drafts, the target transformer family verifies.

Trees are checked against the optimal pass (the target as its own draft) and against a
plain-Python reference that recomputes every distribution from the whole token prefix
(``Transformer.probs``, no KV cache) and builds the trees with heapq and sorting.
"""

from __future__ import annotations

import heapq
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from brwsim import UserError, Zipf, generate, simulate
from brwsim.cli import main
from brwsim.families.transformer import Transformer
from brwsim.policies import DraftModel, parse_policy
from tests.unit.tinyckpt import write_gpt2

SEED = 7
BUDGETS = [1, 2, 4, 8, 16]
ROOTS = 4


@pytest.fixture(scope="module")
def target():
    return Transformer("target")


@pytest.fixture(scope="module")
def draft():
    return Transformer("draft")


def _ranks(p):
    """Tokens by rank (probability descending, ties by ascending token id)."""
    return np.lexsort((np.arange(p.size), -p))


class _Ref:
    """Both models' distributions at a token sequence, recomputed from the whole prefix."""

    def __init__(self, target, draft, temperature=1.0):
        self.target, self.draft, self.beta = target, draft, 1.0 / temperature
        self.memo = {}

    def at(self, seq):
        seq = tuple(seq)
        if seq not in self.memo:
            ctx = self.target.context(np.array(seq))
            tp = self.target.probs(ctx)
            dp = self.draft.probs(ctx, self.beta)
            self.memo[seq] = (np.log(tp), np.log(dp), _ranks(dp))
        return self.memo[seq]


def _best_ref(ref, root, p_max):
    """Best-first by the draft's path probability; ties by depth, then the draft rank path.

    Returns (true path log-probability, depth) of the nodes in tree order."""
    heap = []

    def push(seq, est, tlp, drank_path):
        tl, dl, order = ref.at(seq)
        for k, tok in enumerate(order):
            heapq.heappush(heap, (est - dl[tok], len(drank_path) + 1, drank_path + (k,),
                                  seq + (int(tok),), tlp + tl[tok]))

    push(tuple(root), 0.0, 0.0, ())
    out = []
    while len(out) < p_max:
        est, depth, dpath, seq, tlp = heapq.heappop(heap)
        out.append((tlp, depth))
        push(seq, est, tlp, dpath)
    return out


def _chain_ref(ref, root, p_max):
    seq, tlp, out = tuple(root), 0.0, []
    for i in range(p_max):
        tl, _dl, order = ref.at(seq)
        tok = int(order[0])
        tlp += tl[tok]
        seq += (tok,)
        out.append((tlp, i + 1))
    return out


def _dynamic_ref(ref, root, depth, topk):
    """EAGLE layers on the draft's path values; all candidates in tree order."""
    cands = []                           # (draft position, depth, generation index, seq, tlp)

    def expand(seq, est, tlp, d):
        tl, dl, order = ref.at(seq)
        new = []
        for tok in order[:topk]:
            c = (est - dl[tok], d + 1, len(cands), seq + (int(tok),), tlp + tl[tok])
            cands.append(c)
            new.append(c)
        return new

    layer = expand(tuple(root), 0.0, 0.0, 0)
    for _ in range(1, depth):
        layer = sorted(layer)[:topk]
        nxt = []
        for est, d, _g, seq, tlp in layer:
            nxt += expand(seq, est, tlp, d)
        layer = nxt
    return [(c[4], c[1]) for c in sorted(cands)]


def _scores(nodes, budgets):
    """E[X | T] and depth of the first P nodes for each budget P."""
    return (np.array([sum(math.exp(t) for t, _ in nodes[:p]) for p in budgets]),
            np.array([max(d for _, d in nodes[:p]) for p in budgets]))


def _run(target, policy, budgets=BUDGETS, iterations=ROOTS):
    ds = simulate(target, budgets=budgets, iterations=iterations, seed=SEED,
                  policies=["optimal()", policy])
    return ds


def test_the_target_as_its_own_draft_is_the_optimal_tree(target):
    ds = simulate(target, budgets=[1, 3, 8, 16, 40], iterations=6, seed=SEED,
                  policies=["optimal()", "drafter(path=target, shape=best)"])
    for var in ("expected_accepted", "accepted", "depth"):
        a = ds[var].values
        np.testing.assert_array_equal(a[0], a[1], err_msg=var)


@pytest.mark.parametrize("shape", ["best", "chain", "dynamic"])
def test_trees_match_the_prefix_recomputing_reference(target, draft, shape):
    policy = {"best": "drafter(path=draft)", "chain": "drafter(path=draft, shape=chain)",
              "dynamic": "drafter(path=draft, shape=dynamic, depth=3, topk=3)"}[shape]
    ds = _run(target, policy)
    ref = _Ref(target, draft)
    for i in range(ROOTS):
        root = target.root_tokens(SEED, i)
        if shape == "best":
            nodes = _best_ref(ref, root, BUDGETS[-1])
        elif shape == "chain":
            nodes = _chain_ref(ref, root, BUDGETS[-1])
        else:
            nodes = _dynamic_ref(ref, root, 3, 3)
        e, d = _scores(nodes, [min(p, len(nodes)) for p in BUDGETS])
        np.testing.assert_allclose(ds["expected_accepted"].values[1, :, i], e, rtol=0, atol=1e-9)
        np.testing.assert_array_equal(ds["depth"].values[1, :, i], d)
    opt = ds["expected_accepted"].values[0]
    assert (ds["expected_accepted"].values[1] <= opt * (1 + 1e-12)).all()
    if shape == "chain":                 # a chain's accepted tokens are a prefix of it
        acc = ds["accepted"].values[1]
        assert (np.diff(acc, axis=0) >= 0).all() and (acc <= np.array(BUDGETS)[:, None]).all()


@pytest.mark.parametrize("shape", ["best", "chain"])
def test_contexts_past_the_carry_restart_as_the_reference(draft, shape):
    """A short window and carry: nodes deeper than carry + 1 rerun over their last window."""
    target = Transformer("target", window=6, carry=2)
    ds = _run(target, f"drafter(path=draft, shape={shape})", budgets=[4, 12], iterations=2)
    ref = _Ref(target, draft)
    build = _best_ref if shape == "best" else _chain_ref
    for i in range(2):
        e, d = _scores(build(ref, target.root_tokens(SEED, i), 12), [4, 12])
        np.testing.assert_allclose(ds["expected_accepted"].values[1, :, i], e, rtol=0, atol=1e-9)
        np.testing.assert_array_equal(ds["depth"].values[1, :, i], d)
    if shape == "chain":
        assert ds["depth"].values[1, -1].max() == 12    # past three restarts


def test_draft_temperature_changes_the_tree_as_the_reference(target, draft):
    ds = _run(target, "drafter(path=draft, temperature=2.0)", budgets=[4, 16], iterations=2)
    ref = _Ref(target, draft, temperature=2.0)
    for i in range(2):
        e, _ = _scores(_best_ref(ref, target.root_tokens(SEED, i), 16), [4, 16])
        np.testing.assert_allclose(ds["expected_accepted"].values[1, :, i], e, rtol=0, atol=1e-9)


def test_string_form_and_parameters():
    p = parse_policy("drafter(path=draft, shape=dynamic, depth=4, topk=5, total=20)")
    assert isinstance(p, DraftModel)
    assert repr(p) == ("drafter(path='draft', shape='dynamic', temperature=1.0, depth=4, "
                       "topk=5, total=20)")
    assert parse_policy(repr(p)) == p
    assert repr(parse_policy("drafter(path=draft)")) == \
        "drafter(path='draft', shape='best', temperature=1.0)"


def test_generation_runs(target):
    ds = generate(target, "drafter(path=draft, shape=chain)", budget=4, tokens=12, seed=SEED)
    assert ds.attrs["calls"] >= 3
    assert (ds["accepted"].values <= 4).all() and (ds["depth"].values == 4).all()
    # the target as its own draft generates exactly the optimal run's calls, through
    # preset roots that carry tokens past the window (window 6, carry 3)
    fam = Transformer("target", window=6, carry=3)
    own = generate(fam, "drafter(path=target)", budget=8, tokens=60, seed=SEED)
    opt = generate(fam, "optimal()", budget=8, tokens=60, seed=SEED)
    for var in ("accepted", "expected_accepted", "depth"):
        np.testing.assert_array_equal(own[var].values, opt[var].values, err_msg=var)


@pytest.fixture(scope="module")
def bad_drafts(tmp_path_factory):
    base = tmp_path_factory.mktemp("drafts")
    return {"vocab": write_gpt2(base / "vocab300", vocab=300, d=16, layers=1, heads=2),
            "short": write_gpt2(base / "npos16", vocab=256, d=16, layers=1, heads=2, npos=16)}


@pytest.mark.parametrize("case, needle", [
    ("family", "must be a transformer family"),
    ("vocab", "the draft's vocabulary (300 tokens) differs from the target's (256 tokens)"),
    ("missing", "not found"),
    ("short", "window + carry = 64 exceeds the draft model's 16 positions"),
])
def test_errors(target, bad_drafts, tmp_path, case, needle):
    path = {"vocab": bad_drafts["vocab"], "short": bad_drafts["short"],
            "missing": tmp_path / "nowhere", "family": "draft"}[case]
    family = Zipf(1.1, vocab=10) if case == "family" else target
    with pytest.raises(UserError) as err:
        simulate(family, budgets=[1, 4], iterations=2, policies=[f"drafter(path={str(path)!r})"])
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_errors_through_the_cli(bad_drafts, tmp_path, capsys):
    before = sorted(os.listdir(tmp_path))
    code = main(["run", "--family", "zipf(s=1.1, vocab=10)", "--budgets", "1,4",
                 "--iterations", "2", "--quiet", "--out", str(tmp_path / "run.nc"),
                 "--policy", "drafter(path=draft)"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "transformer family" in err
    # the python -m form, with the vocabulary mismatch
    env = dict(os.environ, BRWSIM_COMPILE_NOTICE="0",
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.run([sys.executable, "-m", "brwsim.cli", "run", "--family",
                           "transformer(path=target)", "--budgets", "1,4", "--iterations", "2",
                           "--quiet", "--policy", f"drafter(path={str(bad_drafts['vocab'])!r})"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "vocabulary (300 tokens)" in lines[0], proc.stderr
    assert sorted(os.listdir(tmp_path)) == before


def test_bad_parameters():
    for text, needle in [("drafter(path=draft, shape=tree)", "shape must be one of"),
                         ("drafter(path=draft, depth=3)", "apply to shape='dynamic' only"),
                         ("drafter(path=draft, temperature=0)", "temperature"),
                         ("drafter(path=draft, shape=dynamic, topk=0)", "topk")]:
        with pytest.raises(UserError, match=needle):
            parse_policy(text)
    with pytest.raises(UserError, match="policies are not supported with batch"):
        simulate(Transformer("target"), budgets=[4], iterations=2, batch=2,
                 policies=["drafter(path=draft)"])
