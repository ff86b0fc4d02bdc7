"""Transformer checkpoints: the KV-cached kernel against an independent numpy recomputation,
trees against the heapq reference, generation runs, policies, batches, bad input, and (slow)
logits against Hugging Face ``transformers`` itself."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from brwsim import Transformer, UserError, generate, parse_family, simulate
from brwsim.policies import Optimal, parse_policy
from brwsim.cli import main
from brwsim.environment import _node_head, node_logprobs, path_uniform
from brwsim.kernels.forest import request_key
from brwsim.reference import best_first
from brwsim.simulate import seed_key

sys.path.insert(0, str(Path(__file__).parent))
from tinyckpt import reference_logits, write_gpt2, write_llama  # noqa: E402

TEXT = "The quick brown fox jumps over the lazy dog. " * 4


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    base = tmp_path_factory.mktemp("ckpt")
    return {
        "gpt2": write_gpt2(base / "gpt2", seed=1),
        "llama": write_llama(base / "llama", seed=2),
        "qwen2": write_llama(base / "qwen2", seed=3, model_type="qwen2", tied=True,
                             theta=1e6),
        "mha_bias": write_llama(base / "mha", seed=4, kv_heads=4, bias=True),
    }


@pytest.fixture(scope="module")
def fam(ckpts):
    return Transformer(ckpts["gpt2"], prompts=TEXT, window=6, carry=3)


def _logsoftmax(z):
    z = z - z.max()
    return z - math.log(np.exp(z).sum())


def _sorted(lq):
    return lq[np.lexsort((np.arange(lq.size), -lq))]


@pytest.mark.parametrize("arch", ["gpt2", "llama", "qwen2", "mha_bias"])
def test_logits_match_numpy_reference(ckpts, arch):
    """Whole prefixes of 1..40 tokens (chunks of 8 and a remainder): to 1e-9 relative."""
    fam = Transformer(ckpts[arch], prompts=TEXT, window=8, carry=40)
    rng = np.random.default_rng(0)
    worst = 0.0
    for n in (1, 2, 7, 8, 9, 17, 40):
        toks = rng.integers(0, fam.vocab_size, n)
        ref = reference_logits(ckpts[arch], toks)
        worst = max(worst, np.abs(fam.logits(toks) - ref).max() / np.abs(ref).max())
    assert worst < 1e-9


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_kv_cached_nodes_match_recomputation(ckpts, arch):
    """Tree nodes (appended to their parent's cache, batched siblings, reruns every carry + 1
    levels) against the numpy recomputation of each node's whole context, to 1e-9."""
    f = Transformer(ckpts[arch], prompts=TEXT, window=6, carry=3)
    spec = f.spec()
    rng = np.random.default_rng(3)
    for n in range(12):
        it = int(rng.integers(0, 1000))
        path = tuple(int(r) for r in rng.integers(0, 3, int(rng.integers(0, 11))))
        toks = f.path_tokens(7, it, path)
        ctx = f.context(toks)
        want = _sorted(_logsoftmax(reference_logits(ckpts[arch], ctx)))
        got = node_logprobs(spec, 7, it, path, k=f.vocab_size)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
        if len(path) <= 3:
            assert ctx.size == 6 + len(path)
        elif len(path) >= 4:
            assert ctx.size == 6 + len(path) % 4
    # a tree pass (batched children under a finite cut-off) reads the same nodes
    ds = simulate(f, [1, 8, 40], 2, seed=7)
    assert np.isfinite(ds.expected_accepted.values).all()


def test_trees_match_heapq_reference(fam):
    budgets = [1, 8, 64]
    ds = simulate(fam, budgets, 3, seed=11)
    spec = fam.spec()
    for it in range(3):
        cache = {}

        def provide(p, it=it):
            if p not in cache:
                cache[p] = node_logprobs(spec, 11, it, p, k=fam.vocab_size)
            return cache[p]

        e, a, d = best_first(provide, budgets, lambda p, it=it: path_uniform(11, it, p))
        np.testing.assert_allclose(ds.expected_accepted.values[:, it], e, rtol=0, atol=1e-12)
        assert list(ds.accepted.values[:, it]) == a
        assert list(ds.depth.values[:, it]) == d


def test_temperature_and_prompt(ckpts):
    f = Transformer(ckpts["llama"], prompt="Hello, world", temperature=0.7, window=5, carry=2)
    toks = f.encode("Hello, world")[-5:]
    np.testing.assert_array_equal(f.root_tokens(0, 3), toks)
    want = _sorted(_logsoftmax(reference_logits(ckpts["llama"], toks) / 0.7))
    np.testing.assert_allclose(node_logprobs(f, 0, 3, (), k=f.vocab_size), want, rtol=1e-9,
                               atol=1e-9)
    short = Transformer(ckpts["llama"], prompt="Hi", window=5, carry=2)
    assert short.root_tokens(0, 0).tolist() == list(b"Hi")
    assert parse_family(repr(f)) == f


def test_generation_run_carries_the_cache(fam):
    """Call c's tree is the optimal tree at the node its predecessors' sampled path reached."""
    spec = fam.spec()
    g = generate(fam, None, 16, 30, seed=4, run=2)
    prefix: tuple[int, ...] = ()
    for c in range(3):
        def provide(p, prefix=prefix):
            return node_logprobs(spec, 4, 2, prefix + p, k=fam.vocab_size)

        e, a, d = best_first(provide, [16], lambda p, prefix=prefix: path_uniform(4, 2, prefix + p))
        assert g.expected_accepted.values[c] == pytest.approx(e[0], abs=1e-12)
        assert g.accepted.values[c] == a[0]
        for _ in range(a[0] + 1):
            lq = node_logprobs(spec, 4, 2, prefix, k=fam.vocab_size)
            prefix += (int(np.searchsorted(np.cumsum(np.exp(lq)), path_uniform(4, 2, prefix))),)


def test_policies_on_common_random_numbers(fam):
    """noisy(sigma=0) is the optimal tree bit for bit; a chain is its greedy path; every
    policy runs, in simulate and in generation runs."""
    pols = ["chain()", "kary(k=2)", "dynamic(depth=4, topk=3)", "noisy(sigma=0)",
            "noisy(sigma=0.5)"]
    ds = simulate(fam, [1, 4, 16], 3, seed=5, policies=[Optimal()] + [parse_policy(p) for p in pols])
    ex = ds.expected_accepted.values                      # (policy, budget, iteration)
    opt = ex[0]
    np.testing.assert_allclose(ex[4], opt, rtol=0, atol=1e-12)
    assert np.all(ex[1:] <= opt + 1e-12)
    spec = fam.spec()
    for it in range(3):
        e, mass = 0.0, 1.0
        for j in range(4):
            mass *= math.exp(node_logprobs(spec, 5, it, (0,) * j, k=2)[0])
            e += mass
        assert ex[1, 1, it] == pytest.approx(e, abs=1e-12)
    for p in ("chain()", "dynamic(depth=4, topk=2)", "noisy(sigma=0)"):
        assert generate(fam, p, 8, 20, seed=1).accepted.size > 0
    a = generate(fam, "noisy(sigma=0)", 8, 20, seed=1)
    b = generate(fam, None, 8, 20, seed=1)
    np.testing.assert_array_equal(a.accepted.values, b.accepted.values)


def test_batch_forest_is_the_union_top_p(fam):
    """simulate(batch=2): E[X | forest] = the top P path probabilities of both roots."""
    spec = fam.spec()
    p_max = 12
    ds = simulate(fam, [p_max], 2, seed=3, batch=2)
    for it in range(2):
        probs = []
        for r in range(2):
            key = np.uint64(request_key(seed_key(3), it, r))

            def provide(p, key=key):
                out = np.empty(fam.vocab_size)
                _node_head(spec.law, spec.head_cap, key, np.asarray(p, np.int64), fam.vocab_size,
                           out)
                return out

            e, _a, _d = best_first(provide, list(range(1, p_max + 1)), lambda p: 1.0)
            probs += list(np.diff(np.concatenate([[0.0], e])))
        want = np.sort(probs)[::-1][:p_max].sum()
        assert ds.expected_accepted.values[0, it] == pytest.approx(want, abs=1e-12)
        assert ds.expected_accepted_split.values[0, it] <= want + 1e-12


# ---------------------------------------------------------------------------------------
# Bad input: one line, exit status 2, nothing written

def _edit_config(src: Path, dst: Path, **changes) -> Path:
    dst.mkdir()
    cfg = json.loads((src / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (dst / "config.json").write_text(json.dumps(cfg))
    (dst / "model.safetensors").write_bytes((src / "model.safetensors").read_bytes())
    return dst


def test_bad_checkpoints(ckpts, tmp_path):
    g, lm = ckpts["gpt2"], ckpts["llama"]
    trunc = tmp_path / "trunc"
    trunc.mkdir()
    (trunc / "config.json").write_text((g / "config.json").read_text())
    data = (g / "model.safetensors").read_bytes()
    (trunc / "model.safetensors").write_bytes(data[:len(data) // 2])
    big = write_llama(tmp_path / "bigvocab", vocab=1000)
    cases = [
        (tmp_path / "nowhere", "not found"),
        (_edit_config(g, tmp_path / "nomt", model_type=None), "'model_type' is missing"),
        (_edit_config(g, tmp_path / "bert", model_type="bert"), "model_type 'bert' is not supported"),
        (_edit_config(g, tmp_path / "nolayer", n_layer=None), "'n_layer' is missing"),
        (_edit_config(g, tmp_path / "neg", n_embd=-4), "'n_embd' = -4 is not a positive"),
        (_edit_config(g, tmp_path / "wide", n_embd=64), "has shape .* implies"),
        (_edit_config(g, tmp_path / "deep", n_layer=3), "'transformer.h.2.ln_1.weight' is missing"),
        (_edit_config(lm, tmp_path / "gqa", num_key_value_heads=3), "not a multiple"),
        (_edit_config(lm, tmp_path / "kv", num_key_value_heads=4), "has shape"),
        (_edit_config(lm, tmp_path / "act", hidden_act="gelu"), "hidden_act 'gelu'"),
        (_edit_config(lm, tmp_path / "rope", rope_scaling={"rope_type": "yarn", "factor": 2}),
         "rope_scaling"),
        (_edit_config(lm, tmp_path / "rope5", rope_parameters={"rope_type": "llama3"}),
         "rope_parameters"),
        (_edit_config(g, tmp_path / "vocab", vocab_size=300), "has shape"),
        (trunc, "not a readable safetensors"),
        (big, "no tokenizer.json"),
    ]
    for path, needle in cases:
        with pytest.raises(UserError, match=needle):
            Transformer(path, prompts=TEXT)
    (tmp_path / "noweights").mkdir()
    (tmp_path / "noweights" / "config.json").write_text((g / "config.json").read_text())
    with pytest.raises(UserError, match="no model.safetensors"):
        Transformer(tmp_path / "noweights")
    (tmp_path / "nocfg").mkdir()
    with pytest.raises(UserError, match="no config.json"):
        Transformer(tmp_path / "nocfg")


def test_rope_theta_in_either_config_form(ckpts, tmp_path):
    """transformers >= 5 writes ``rope_parameters: {rope_theta, rope_type}``; v4 ``rope_theta``."""
    v4 = write_llama(tmp_path / "v4", theta=5e5)
    v5 = _edit_config(v4, tmp_path / "v5", rope_theta=None,
                      rope_parameters={"rope_theta": 5e5, "rope_type": "default"})
    toks = np.arange(1, 20)
    a = Transformer(v4, prompts=TEXT).logits(toks)
    np.testing.assert_array_equal(Transformer(v5, prompts=TEXT).logits(toks), a)
    np.testing.assert_allclose(a, reference_logits(v4, toks), rtol=1e-9, atol=1e-9)
    same_weights = _edit_config(v4, tmp_path / "t4", rope_theta=10000.0)
    assert np.abs(Transformer(same_weights, prompts=TEXT).logits(toks) - a).max() > 1e-3
    mis = _edit_config(v4, tmp_path / "mistral", model_type="mistral", sliding_window=16)
    with pytest.raises(UserError, match="sliding window of 16"):
        Transformer(mis, prompts=TEXT)


def test_bad_prompts_and_parameters(ckpts):
    g = ckpts["gpt2"]
    for kwargs, needle in [
        (dict(prompt=""), "the prompt has no tokens"),
        (dict(prompts="ab\n"), "the prompts text has 3 tokens"),
        (dict(prompt=3), "prompt must be a string"),
        (dict(window=0), "window"),
        (dict(carry=-1), "carry"),
        (dict(temperature=0), "temperature"),
        (dict(window=100, carry=100), "exceeds the model's 128 positions"),
    ]:
        with pytest.raises(UserError, match=needle):
            Transformer(g, **kwargs)
    with pytest.raises(UserError, match="path must be"):
        Transformer(3)


def test_cli_bad_checkpoint_exit_2_nothing_written(ckpts, tmp_path, capsys):
    bad = _edit_config(ckpts["gpt2"], tmp_path / "bert", model_type="bert")
    out = tmp_path / "out.nc"
    code = main(["run", "--family", f"transformer(path='{bad}')", "--budgets", "4",
                 "--iterations", "2", "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "model_type 'bert'" in err, err
    assert not out.exists()


# ---------------------------------------------------------------------------------------
# Against Hugging Face transformers (torch on CPU), installed on demand

def _ensure_transformers():
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "torch==2.13.0",
                        "transformers"], check=True)
    import torch
    import transformers

    return torch, transformers


@pytest.mark.slow
def test_logits_match_hugging_face_transformers(tmp_path):
    """GPT2LMHeadModel and LlamaForCausalLM (random weights, small configs, saved with
    save_pretrained(safe_serialization=True)) against brwsim on 3 prefixes of 30 tokens.

    transformers computes in float32 and brwsim in float64 from the same float32 weights;
    measured max abs difference of the logits at the last position: GPT-2 4.7e-7, Llama
    (GQA, RoPE theta 5e5 in transformers 5's ``rope_parameters``, untied head) 7.0e-7,
    Qwen2 (q/k/v biases, tied head) 5.6e-7 (torch 2.13.0 CPU, transformers 5.24.0).
    Asserted below 1e-5.
    """
    torch, tf = _ensure_transformers()
    torch.manual_seed(0)
    models = {
        "gpt2": tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=257, n_embd=64, n_layer=2,
                                                 n_head=4, n_positions=128)),
        "llama": tf.LlamaForCausalLM(tf.LlamaConfig(
            vocab_size=300, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, intermediate_size=96, max_position_embeddings=128,
            rope_theta=5e5, tie_word_embeddings=False)),
        "qwen2": tf.Qwen2ForCausalLM(tf.Qwen2Config(
            vocab_size=300, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, intermediate_size=96, max_position_embeddings=128,
            tie_word_embeddings=True)),
    }
    rng = np.random.default_rng(1)
    worst = {}
    for name, model in models.items():
        with torch.no_grad():                 # non-trivial norms and biases
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        model.eval()
        folder = tmp_path / name
        model.save_pretrained(folder, safe_serialization=True)
        vocab = model.config.vocab_size
        if vocab > 272:                       # a tokenizer.json is required for non-byte vocabularies
            _write_word_tokenizer(folder, vocab)
        fam = Transformer(folder, prompts=TEXT, window=30, carry=0)
        worst[name] = 0.0
        for _ in range(3):
            toks = rng.integers(0, vocab, 30)
            with torch.no_grad():
                ref = model(torch.tensor(toks[None, :])).logits[0, -1].double().numpy()
            worst[name] = max(worst[name], float(np.abs(fam.logits(toks) - ref).max()))
    print("max abs logit difference vs transformers:", worst)
    assert max(worst.values()) < 1e-5, worst


def _write_word_tokenizer(folder: Path, vocab: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = {f"w{i}": i for i in range(vocab - 1)}
    words["[UNK]"] = vocab - 1
    tok = Tokenizer(models.WordLevel(words, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))
