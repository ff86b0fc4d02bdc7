"""Drafters on a batched target: ``drafter(kind=model|eagle|ngram)`` through ``simulate``,
greedy decoding (temperature 0), chat rendering and BOS.

References: the optimal tree built in rounds (:mod:`brwsim.backends.rounds`), which a
draft model equal to the target must reproduce node for node, sampled path included
(common random numbers); ``tinyckpt.reference_logits`` (each prefix recomputed in float64
numpy from the architecture's definition) for a prompt-lookup chain's E[X | T].
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from brwsim import Geometric, Transformer, UserError, simulate
from brwsim.drafters.promptlookup import lookup_chain
from brwsim.keys import seed_key
from brwsim.policies import parse_policy

from tests.unit.test_eagle_head import write_head
from tests.unit.tinyckpt import reference_logits, write_gpt2

PROMPTS = ["abcabcabcab", "the cat and the cat and the", "xyzzy xyzzy"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_gpt2(tmp_path_factory.mktemp("ckpt") / "gpt2", scale=0.5)


def _family(ckpt, **kw):
    return Transformer(ckpt, prompts=PROMPTS, backend="numpy", dtype="float64", answer=4, **kw)


def test_target_as_its_own_draft_is_the_optimal_tree(ckpt):
    """drafter(path=target, shape=best) on the target itself drafts T_P: X (the sampled
    path, common random numbers), E[X | T_P] and the depth equal the optimal tree's."""
    ds = simulate(_family(ckpt), [1, 3, 8, 20], 6, seed=4,
                  policies=["optimal()", f"drafter(path='{ckpt}')"])
    e = ds.expected_accepted.values
    assert np.abs(e[0] - e[1]).max() < 1e-9
    assert np.array_equal(ds.accepted.values[0], ds.accepted.values[1])
    assert np.array_equal(ds.depth.values[0], ds.depth.values[1])
    assert ds.accepted.values[0].max() > 0          # the sampled paths enter the trees


def test_greedy_target_and_its_argmax_chain(ckpt):
    """At T = 0 the optimal tree is the argmax chain (X = P); the target's own greedy
    chain as a draft covers it exactly; a best-first draft at T = 1 covers a prefix."""
    fam = _family(ckpt, temperature=0)
    b = [1, 2, 5]
    ds = simulate(fam, b, 3, seed=2, policies=["optimal()", f"drafter(path='{ckpt}', shape=chain)",
                                             f"drafter(path='{ckpt}', shape=best)"])
    P = np.array(b)[:, None]
    for i in (0, 1):
        assert np.array_equal(ds.accepted.values[i], np.broadcast_to(P, (3, 3)))
        assert np.array_equal(ds.expected_accepted.values[i], np.broadcast_to(P, (3, 3)))
    best = ds.accepted.values[2]
    assert np.array_equal(best, ds.expected_accepted.values[2])   # deterministic at T = 0
    assert np.all(best <= P) and np.all(best[0] == 1)             # the top-1 child is the argmax
    assert float(ds.mu) == 0.0


def test_ngram_chain_expected_accepted_from_reference_logits(ckpt):
    """drafter(kind=ngram): the lookup chain's E[X | T_P] is the sum over its prefixes of
    the product of the target's probabilities, each recomputed from scratch."""
    fam = _family(ckpt)
    pol = parse_policy("drafter(kind=ngram, min=1, max=3)")
    b = np.array([1, 2, 4])
    for it in range(3):
        acc, exp, dep = pol.run_batched(fam, b, seed_key(5), it, 1)
        ctx = fam.root_context(seed_key(5), it)
        chain = lookup_chain(ctx, 4, 1, 3)
        probs, seq, p = [], list(ctx), 1.0
        for t in chain:
            z = reference_logits(ckpt, seq)
            p *= math.exp(z[t] - z.max()) / np.exp(z - z.max()).sum()
            probs.append(p)
            seq.append(int(t))
        want = np.concatenate([[0.0], np.cumsum(probs)])[np.minimum(b, len(probs))]
        assert np.abs(exp[:, 0] - want).max() < 1e-10
        assert np.all(acc[:, 0] <= dep[:, 0]) and np.all(dep[:, 0] <= b)
    assert lookup_chain(fam.root_context(seed_key(5), 0), 4, 1, 3).size > 0   # the case is not empty


def test_eagle_head_drafts_on_the_batched_target(ckpt, tmp_path):
    """drafter(kind=eagle): the head drafts from the target's features; its trees are
    prefix-closed sets of at most P nodes, so never above the optimum root by root."""
    head = write_head(tmp_path / "head", d=32, v=257)
    fam = _family(ckpt)
    ds = simulate(fam, [1, 4, 16], 4, seed=3,
                  policies=["optimal()", f"drafter(kind=eagle, path='{head}')",
                            f"drafter(kind=eagle, path='{head}', shape=dynamic, depth=3, topk=2)",
                            f"drafter(kind=eagle, path='{head}', shape=chain)"])
    e = ds.expected_accepted.values
    assert np.all(e[1:] <= e[0] + 1e-12) and np.all(e[1:] > 0)
    assert np.all(ds.depth.values[3] == np.array([1, 4, 16])[:, None])    # chains
    assert np.all(ds.depth.values[2] <= 3)


@pytest.mark.parametrize("policy, family_kw, match", [
    ("drafter(kind=ngram, min=3, max=2)", {}, "min = 3 exceeds max = 2"),
    ("drafter(kind=ngram, min=0)", {}, "min"),
    ("drafter(kind=ngram, path=x)", {}, "takes no path"),
    ("drafter(kind=ngram, shape=best)", {}, "chain or tree"),
    ("drafter(kind=foo, path=x)", {}, "kind must be"),
    ("drafter(kind=eagle, path='/nonexistent/head')", {}, "no EAGLE head folder"),
    ("chain()", {}, "not available with backend=numpy"),
])
def test_bad_drafters(ckpt, policy, family_kw, match):
    with pytest.raises(UserError, match=match):
        simulate(_family(ckpt, **family_kw), [2], 1, policies=[policy])


def test_eagle_head_that_does_not_fit_the_target(ckpt, tmp_path):
    head = write_head(tmp_path / "small", d=16, v=257)
    with pytest.raises(UserError, match="does not fit the target"):
        simulate(_family(ckpt), [2], 1, policies=[f"drafter(kind=eagle, path='{head}')"])


def test_eagle_needs_a_transformer_target_with_features(ckpt, tmp_path):
    head = write_head(tmp_path / "head", d=32, v=257)
    with pytest.raises(UserError, match="needs a batched target"):
        simulate(Transformer(ckpt, prompts="x" * 200), [2], 1,
                 policies=[f"drafter(kind=eagle, path='{head}')"])
    with pytest.raises(UserError, match="must be a transformer family"):
        simulate(Geometric(0.5), [2], 1,
                 policies=[f"drafter(kind=eagle, path='{head}')"])


def test_greedy_needs_a_batched_backend(ckpt):
    with pytest.raises(UserError, match="temperature=0"):
        Transformer(ckpt, temperature=0)


def test_chat_flag_and_bos(ckpt, tmp_path):
    """chat=true needs a template (this folder has none); chat=false takes plain text; a
    tokenizer that adds BOS starts every prompt with it, once."""
    with pytest.raises(UserError, match="chat=true"):
        Transformer(ckpt, prompts="chat", backend="numpy", chat=True)
    with pytest.raises(UserError, match="chat must be"):
        Transformer(ckpt, prompts="chat", backend="numpy", chat="maybe")
    fam = Transformer(ckpt, prompts="chat", backend="numpy", chat=False)
    assert fam.params()["chat"] is False
    import json
    import shutil

    bos = tmp_path / "bos"
    shutil.copytree(ckpt, bos)
    cfg = json.loads((bos / "config.json").read_text())
    (bos / "config.json").write_text(json.dumps(cfg | {"bos_token_id": 256}))
    (bos / "tokenizer_config.json").write_text(json.dumps({"add_bos_token": True}))
    fam = Transformer(bos, prompts=["hello"], backend="numpy")
    assert fam._answer_prompts[0].tolist() == [256] + list(b"hello")
    fam = Transformer(bos, prompts=[[256, 104, 105]], backend="numpy")
    assert fam._answer_prompts[0].tolist() == [256, 104, 105]


def test_capture_of_a_run_is_its_matched_iid_view(ckpt, tmp_path):
    """capture --family: row i is the distribution at the root of iteration i (the run's
    E[X | T_1] is its top probability, the run's X_1 is 1 exactly when its sampled rank is
    0); empirical(bank) of it runs; bad uses are one line, exit 2."""
    from brwsim.capture import capture_roots
    from brwsim.cli import main
    from brwsim.lazy import xarray as xr

    fam = _family(ckpt, temperature=0.8)
    ds = simulate(fam, [1], 8, seed=6)
    bank = capture_roots(fam, 8, tmp_path / "bank.nc", seed=6)
    top = bank["probs"].values[:, 0]
    assert np.abs(ds.expected_accepted.values[0] - top).max() < 1e-9
    assert np.array_equal(ds.accepted.values[0], (bank["sampled_rank"].values == 0).astype(int))
    fam_text = f"transformer(path='{ckpt}', prompts=['abc abc', 'hello'], backend=numpy, answer=3)"
    out = tmp_path / "cli.nc"
    assert main(["capture", "--family", fam_text, "--iterations", "3", "--out", str(out),
                 "--quiet"]) == 0
    with xr.open_dataset(out) as b:
        assert b.sizes["position"] == 3
    assert main(["run", "--family", f"empirical(path={out})", "--budgets", "1,4",
                 "--iterations", "20", "--quiet", "--no-out"]) == 0
    assert main(["capture", "--family", fam_text, "--out", str(tmp_path / "x.nc")]) == 2
    assert main(["capture", "target", "x", "--family", fam_text, "--iterations", "2",
                 "--out", str(tmp_path / "x.nc")]) == 2
    assert not (tmp_path / "x.nc").exists()


@pytest.mark.parametrize("backend", ["loky", "dask"])
def test_sweep_over_a_batched_target_equals_its_runs(ckpt, tmp_path, backend):
    """A sweep point of a batched target (optimal and a drafter on its roots, two worker
    processes of joblib or of a Dask cluster, each loading the model for itself) equals the
    trees of the point's key evaluated directly: chunks, shards and workers change
    nothing."""
    import xarray as xr

    from brwsim.sweep import sweep
    from brwsim.sweep.config import load_config

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n\n".join(PROMPTS))
    cfg = tmp_path / "s.toml"
    cfg.write_text(f"""
[sweep]
seed = 3
iterations = 4
chunk = 2
budgets = [1, 4]
prediction = "none"

[[sweep.family]]
name = "transformer"
path = "{ckpt}"
prompts = "{prompts}"
backend = "numpy"
dtype = "float64"
answer = 4

[[sweep.policy]]
name = "optimal"

[[sweep.policy]]
name = "drafter"
kind = "ngram"
max = 3
""")
    if backend == "dask":
        distributed = pytest.importorskip("distributed")
        with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                      dashboard_address=None) as cluster:
            rep = sweep(cfg, tmp_path / "out", backend="dask",
                        scheduler=cluster.scheduler_address)
    else:
        rep = sweep(cfg, tmp_path / "out", jobs=2, backend="loky")
    with xr.open_datatree(rep.path) as tree:
        ds = tree["transformer"].to_dataset().load()
    conf = load_config(cfg)
    fam = Transformer(ckpt, prompts=str(prompts), backend="numpy", dtype="float64", answer=4)
    for p in conf.points():
        key = np.uint64(conf.point_key(p.index))
        pol = parse_policy(p.block.policy(p.local))
        want = (fam.batched_trees(np.array([1, 4]), key, 0, 4) if pol.name == "optimal"
                else pol.run_batched(fam, np.array([1, 4]), key, 0, 4))
        got = ds["expected_accepted"].sel(policy=repr(pol)).transpose("budget", "iteration").values
        assert np.abs(got - want[1]).max() < 1e-12
        assert np.abs(want[1]).max() > 0


def test_generation_runs_on_a_batched_target(ckpt):
    """generate() on a real-model backend: the target as its own best-first draft gives
    the optimal run call for call (same trees, same sampled path, same next roots); at
    T = 0 every call accepts its whole chain, P + 1 tokens a call."""
    from brwsim.generate import generate

    fam = _family(ckpt)
    opt = generate(fam, None, budget=6, tokens=40, seed=2)
    own = generate(fam, f"drafter(path='{ckpt}')", budget=6, tokens=40, seed=2)
    assert np.array_equal(opt.accepted.values, own.accepted.values)
    assert np.abs(opt.expected_accepted.values - own.expected_accepted.values).max() < 1e-9
    ctx = opt.root_context.values
    assert np.array_equal(np.diff(ctx), opt.accepted.values[:-1] + 1)   # contexts grow by X + 1
    assert opt.attrs["tokens_per_call"] > 1
    greedy = generate(_family(ckpt, temperature=0), f"drafter(path='{ckpt}', shape=chain)",
                      budget=3, tokens=20, seed=0)
    assert np.all(greedy.accepted.values == 3) and greedy.attrs["tokens_per_call"] == 4
