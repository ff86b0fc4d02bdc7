"""Tiny GGUF files written with ``gguf.GGUFWriter``, as llama.cpp's converter writes them.

``write_llama_gguf`` takes the tensors of a Hugging Face Llama checkpoint (from
:mod:`tinyckpt`), reorders the rows of every q_proj and k_proj into ggml's interleaved
RoPE order (``convert_hf_to_gguf.py``'s permutation, written here as an explicit row
index), stores each matrix in the requested ggml type (``gguf.quants.quantize``) and adds
a byte-level BPE tokenizer (GPT-2's byte alphabet, one merge, three control tokens) and,
optionally, a chat template.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                 "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                 "{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def byte_alphabet() -> list[str]:
    """GPT-2's printable spelling of the 256 bytes, in byte order."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    extra = iter(range(256, 512))
    return [chr(b) if b in keep else chr(next(extra)) for b in range(256)]


def tiny_vocab() -> tuple[list[str], list[str], list[int]]:
    """Tokens (256 bytes, "Ġt", three control tokens), merges, token types."""
    tokens = byte_alphabet() + ["\u0120t"] + SPECIALS
    types = [1] * 257 + [3] * len(SPECIALS)
    return tokens, ["\u0120 t"], types


def hf_to_gguf_rows(n_rows: int, n_head: int) -> np.ndarray:
    """Row ``k`` of the file is row ``index[k]`` of the checkpoint: within each head of hd
    rows, file row 2i + j holds checkpoint row j*hd/2 + i (RoPE pairs interleaved)."""
    hd = n_rows // n_head
    index = np.empty(n_rows, np.int64)
    for h in range(n_head):
        for i in range(hd // 2):
            for j in range(2):
                index[h * hd + 2 * i + j] = h * hd + j * (hd // 2) + i
    return index


_NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
          "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
          "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
          "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def gguf_name(hf: str) -> str:
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    _, _, n, rest = hf.split(".", 3)
    stem, kind = rest.rsplit(".", 1)
    return f"blk.{n}.{_NAMES[stem]}.{kind}"


def write_llama_gguf(path: Path, tensors: dict[str, np.ndarray], cfg: dict, qtype: str = "F32",
                     chat_template: str | None = CHAT_TEMPLATE, arch: str = "llama") -> Path:
    """Write the Hugging Face Llama ``tensors`` (with ``cfg``) as a llama.cpp GGUF.

    Matrices are stored as ``qtype``; vectors (norms) as F32, as llama.cpp does.
    """
    import gguf

    q = gguf.GGMLQuantizationType[qtype]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_rope_dimension_count(cfg["hidden_size"] // cfg["num_attention_heads"])
    w.add_vocab_size(cfg["vocab_size"])
    tokens, merges, types = tiny_vocab()
    assert len(tokens) == cfg["vocab_size"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_types(types)
    w.add_bos_token_id(257)
    w.add_eos_token_id(259)
    w.add_add_bos_token(False)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    for name, a in tensors.items():
        a = np.asarray(a, np.float32)
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = cfg["num_attention_heads" if "q_proj" in name else "num_key_value_heads"]
            a = a[hf_to_gguf_rows(a.shape[0], heads)]
        if a.ndim == 1 or q == gguf.GGMLQuantizationType.F32:
            w.add_tensor(gguf_name(name), np.ascontiguousarray(a))
        else:
            w.add_tensor(gguf_name(name), gguf.quants.quantize(a, q), raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_types_gguf(path: Path, arrays: dict[str, tuple[np.ndarray, str]]) -> Path:
    """A GGUF of architecture ``llama`` holding only ``arrays`` (name -> (stored data, ggml
    type name)): float32 data for F32, the raw bytes (rows, bytes) for the others."""
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    for name, (data, t) in arrays.items():
        q = gguf.GGMLQuantizationType[t]
        w.add_tensor(name, data, raw_dtype=None if t == "F32" else q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
