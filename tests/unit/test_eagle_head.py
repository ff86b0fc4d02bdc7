"""The EAGLE-style head's numpy runtime: against transformers' own Llama decoder layer
(when torch is installed) and tree drafting against chain drafting."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from brwsim.drafters.eagle import EagleHead, load_head
from brwsim.errors import UserError

D, FF, NH, NKV, V = 16, 24, 4, 2, 40


def write_head(folder: Path, seed: int = 0, draft_vocab=None, *, d=None, v=None) -> Path:
    """A random head of hidden size ``d`` (default D) over a vocabulary of ``v`` (default V)."""
    from safetensors.numpy import save_file

    D_, V_ = D if d is None else d, V if v is None else v
    return _write_head(folder, seed, draft_vocab, D_, V_, save_file)


def _write_head(folder, seed, draft_vocab, D, V, save_file):
    rng = np.random.default_rng(seed)
    hd = D // NH
    w = {"fc.weight": rng.normal(0, 0.3, (D, 2 * D)),
         "layer.self_attn.q_proj.weight": rng.normal(0, 0.3, (NH * hd, D)),
         "layer.self_attn.k_proj.weight": rng.normal(0, 0.3, (NKV * hd, D)),
         "layer.self_attn.v_proj.weight": rng.normal(0, 0.3, (NKV * hd, D)),
         "layer.self_attn.o_proj.weight": rng.normal(0, 0.3, (D, NH * hd)),
         "layer.post_attention_layernorm.weight": rng.normal(1, 0.1, D),
         "layer.mlp.gate_proj.weight": rng.normal(0, 0.3, (FF, D)),
         "layer.mlp.up_proj.weight": rng.normal(0, 0.3, (FF, D)),
         "layer.mlp.down_proj.weight": rng.normal(0, 0.3, (D, FF))}
    folder.mkdir(parents=True, exist_ok=True)
    dv = np.arange(0, V, 2) if draft_vocab is None else draft_vocab
    save_file({k: v.astype(np.float32) for k, v in w.items()} | {"draft_vocab": dv.astype(np.int32)},
              str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({
        "architecture": "eagle", "hidden_size": D, "intermediate_size": FF,
        "num_attention_heads": NH, "num_key_value_heads": NKV, "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0, "vocab_size": V}))
    return folder


@pytest.fixture
def head(tmp_path):
    rng = np.random.default_rng(1)
    embed, lm = rng.normal(0, 1, (V, D)), rng.normal(0, 1, (V, D))
    return EagleHead(str(write_head(tmp_path / "h")), embed, lm, dtype="float64"), embed, lm


def test_batch_equals_one_node_at_a_time_and_branches_do_not_interact(head, tmp_path):
    h, embed, lm = head
    rng = np.random.default_rng(2)
    ctx = rng.integers(0, V, 7)
    feats = rng.normal(0, 1, (7, D))
    parents = np.array([-1, -1, 0, 0, 2, 1])
    tokens = np.array([3, 5, 7, 9, 11, 13])
    root = h.start(ctx, feats)
    whole = h.extend(parents, tokens)                 # one batch holding a subtree
    h2 = EagleHead(str(tmp_path / "h"), embed, lm, dtype="float64")
    assert np.array_equal(h2.start(ctx, feats), root)
    single = np.concatenate([h2.extend(parents[i:i + 1], tokens[i:i + 1]) for i in range(6)])
    np.testing.assert_allclose(whole, single, rtol=0, atol=1e-12)
    # node 4's chain alone (0 -> 2 -> 4) gives node 4 the same distribution
    h3 = EagleHead(str(tmp_path / "h"), embed, lm, dtype="float64")
    h3.start(ctx, feats)
    chain = h3.extend(np.array([-1, 0, 1]), tokens[[0, 2, 4]])
    np.testing.assert_allclose(chain[2], whole[4], rtol=0, atol=1e-12)
    # draft distributions live on the draft vocabulary and are normalised
    assert np.all(np.isneginf(whole[:, 1::2]))
    np.testing.assert_allclose(np.exp(whole).sum(1), 1.0, rtol=1e-12)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None
                    or importlib.util.find_spec("transformers") is None,
                    reason="needs torch and transformers")
def test_matches_transformers_decoder_layer(head):
    """The numpy runtime along a chain equals the training code's forward
    (transformers' LlamaDecoderLayer) over the same pairs. transformers rounds RMSNorm,
    the attention softmax and RoPE's angles to float32 even in a float64 model, so the
    agreement is float32's (1e-6 relative), where a wrong mask or rotation differs by O(1)."""
    import sys

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))
    import train_eagle as te

    h, embed, lm = head
    cfg = {"hidden_size": D, "intermediate_size": FF, "num_attention_heads": NH,
           "num_key_value_heads": NKV, "rms_norm_eps": 1e-6, "max_position_embeddings": 64,
           "rope_theta": 10000.0, "vocab_size": V}
    th, _ = te.build_head(cfg, torch)
    th = th.double()

    # copy the numpy head's weights into the torch head
    with torch.no_grad():
        th.fc.weight.copy_(torch.as_tensor(h.fc_t.T))
        n_q, n_k = NH * (D // NH), NKV * (D // NH)
        wqkv = h.wqkv_t.T
        th.layer.self_attn.q_proj.weight.copy_(torch.as_tensor(wqkv[:n_q]))
        th.layer.self_attn.k_proj.weight.copy_(torch.as_tensor(wqkv[n_q:n_q + n_k]))
        th.layer.self_attn.v_proj.weight.copy_(torch.as_tensor(wqkv[n_q + n_k:]))
        th.layer.self_attn.o_proj.weight.copy_(torch.as_tensor(h.wo_t.T))
        th.layer.post_attention_layernorm.weight.copy_(torch.as_tensor(h.g_post))
        gu = h.wgu_t.T
        th.layer.mlp.gate_proj.weight.copy_(torch.as_tensor(gu[:FF]))
        th.layer.mlp.up_proj.weight.copy_(torch.as_tensor(gu[FF:]))
        th.layer.mlp.down_proj.weight.copy_(torch.as_tensor(h.wd_t.T))
    rng = np.random.default_rng(3)
    ctx = rng.integers(0, V, 6)
    feats = rng.normal(0, 1, (6, D))
    h.start(ctx, feats)
    chain_tokens = np.array([4, 8, 12])
    h.extend(np.array([-1, 0, 1]), chain_tokens)
    # the torch head over the same pairs: context pairs with true features, then the chain
    # fed its own predicted features (the numpy head's, compared position by position)
    toks = np.concatenate([ctx[1:], chain_tokens])
    f_in = np.concatenate([feats[:5], [h.root_feat], h.node_feat[0][None], h.node_feat[1][None]])
    with torch.no_grad():
        out = te.head_forward(th, torch.as_tensor(embed[toks])[None], torch.as_tensor(f_in)[None],
                              torch)[0].numpy()
    np.testing.assert_allclose(out[4], h.root_feat, rtol=1e-6, atol=1e-6)
    for k in range(3):
        np.testing.assert_allclose(out[5 + k], h.node_feat[k], rtol=1e-6, atol=1e-6)


def test_bad_heads(tmp_path):
    rng = np.random.default_rng(0)
    f = write_head(tmp_path / "h")
    with pytest.raises(UserError, match="does not fit the target"):
        EagleHead(str(f), rng.normal(size=(V + 1, D)), rng.normal(size=(V + 1, D)))
    (tmp_path / "x").mkdir()
    with pytest.raises(UserError, match="no config.json"):
        load_head(str(tmp_path / "x"))
    bad = write_head(tmp_path / "b", draft_vocab=np.array([0, V]))
    with pytest.raises(UserError, match="draft_vocab"):
        load_head(str(bad))
    h = EagleHead(str(f), rng.normal(size=(V, D)), rng.normal(size=(V, D)))
    with pytest.raises(UserError, match="features"):
        h.start(np.array([1, 2, 3]))


SHIPPED = Path(__file__).resolve().parents[2] / "brwsim" / "data" / "drafters" / "eagle-smollm2"


@pytest.mark.skipif(not SHIPPED.is_dir(), reason="no head shipped")
def test_shipped_head_fits_smollm2_and_drafts():
    """The shipped head declares SmolLM2-135M-Instruct's shapes (hidden 576, 9/3 heads,
    vocabulary 49,152), its card's numbers are the training record's, and it drafts."""
    cfg, w = load_head(str(SHIPPED))
    assert (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
            cfg["vocab_size"]) == (576, 9, 3, 49152)
    record = json.loads((SHIPPED / "training.json").read_text())
    card = (SHIPPED / "README.md").read_text()
    assert f"{record['parameters']:,}" in card
    for depth in ("depth_1", "depth_2", "depth_6"):
        assert f"{record['held_out'][depth]['top_1']:.3f}" in card
    rng = np.random.default_rng(0)
    emb = rng.normal(0, 0.02, (49152, 576)).astype(np.float32)
    h = EagleHead(str(SHIPPED), emb, emb)
    root = h.start(rng.integers(0, 49152, 12), rng.normal(0, 1, (12, 576)).astype(np.float32))
    out = h.extend(np.array([-1, 0]), np.array([int(np.argmax(root)), 7]))
    np.testing.assert_allclose(np.exp(out).sum(1), 1.0, rtol=1e-5)


def test_top_children_of_a_reduced_vocabulary_rank_like_the_whole_row():
    """Rows that are -inf outside a draft vocabulary (the head's output) rank their finite
    tokens exactly as the order it promises: probability descending, lower id on ties."""
    from brwsim.drafters.shapes import top_children

    rng = np.random.default_rng(7)
    for trial in range(20):
        lp = np.full(500, -np.inf)
        dv = rng.choice(500, 60, replace=False)
        lp[dv] = np.round(rng.normal(0, 1, dv.size), 1)      # rounding makes ties
        for k in (1, 5, 60, 100):
            want = np.lexsort((np.arange(500), -lp))[:min(k, dv.size)]
            np.testing.assert_array_equal(top_children(lp, k), want)
