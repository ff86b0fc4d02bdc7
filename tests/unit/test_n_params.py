"""``n_params`` of a checkpoint equals transformers' own count (``num_parameters()``)."""

from __future__ import annotations

import pytest

from brwsim.families.checkpoint import load_checkpoint

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _save(model, folder) -> str:
    model.save_pretrained(folder, safe_serialization=True)
    load_checkpoint.cache_clear()
    return str(folder)


@pytest.mark.parametrize("tied", [True, False])
def test_gpt2_count_is_transformers_count(tmp_path, tied):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=2, n_head=2,
                                  tie_word_embeddings=tied)
    model = transformers.GPT2LMHeadModel(cfg)
    assert load_checkpoint(_save(model, tmp_path)).n_params == model.num_parameters()


@pytest.mark.parametrize("kind,tied", [("llama", True), ("llama", False), ("qwen2", False)])
def test_llama_count_is_transformers_count(tmp_path, kind, tied):
    torch.manual_seed(0)
    common = dict(vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                  tie_word_embeddings=tied)
    if kind == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))
    else:
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common))
    assert load_checkpoint(_save(model, tmp_path)).n_params == model.num_parameters()


def test_the_shipped_target_and_draft():
    from brwsim.families.transformer import shipped_checkpoint

    for name in ("target", "draft"):
        folder = shipped_checkpoint(name)
        model = transformers.GPT2LMHeadModel.from_pretrained(folder)
        assert load_checkpoint(str(folder)).n_params == model.num_parameters()
