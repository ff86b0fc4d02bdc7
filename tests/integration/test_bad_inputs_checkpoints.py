"""Bad checkpoints and prompts (issue 21): through ``brwsim run --family 'transformer(...)'``
and ``brwsim capture``, one ``brwsim: error:`` line naming the problem, exit status 2,
nothing written (the harness of ``test_bad_inputs.py``).

Checkpoints are the tiny random ones of ``tests/unit/tinyckpt.py``, broken one way each.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from brwsim import Transformer
from tests.integration.test_bad_inputs import FAST_RUN, one_line_error

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from tinyckpt import write_gpt2, write_llama  # noqa: E402


def _broken(folder: Path, *, llama: bool = False, config: Callable[[dict], None] | None = None,
            keep_bytes: Callable[[int], int] | None = None) -> Path:
    """A tiny checkpoint with its config edited or its safetensors file truncated."""
    (write_llama if llama else write_gpt2)(folder, seed=1)
    if config is not None:
        cfg = json.loads((folder / "config.json").read_text())
        config(cfg)
        (folder / "config.json").write_text(json.dumps(cfg))
    if keep_bytes is not None:
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[:keep_bytes(len(data))])
    return folder


CASES = {
    # a missing config key (GPT-2 and Llama)
    "missing-key": (dict(config=lambda c: c.pop("n_embd")), "config key 'n_embd' is missing"),
    "missing-llama-key": (dict(llama=True, config=lambda c: c.pop("intermediate_size")),
                          "config key 'intermediate_size' is missing"),
    "missing-model-type": (dict(config=lambda c: c.pop("model_type")),
                           "config key 'model_type' is missing"),
    # a config key of a value brwsim does not know (it would change the model)
    "unknown-activation": (dict(config=lambda c: c.update(activation_function="swish")),
                           "activation_function 'swish' is not supported"),
    "unknown-rope-scaling": (dict(llama=True, config=lambda c: c.update(
        rope_scaling={"type": "linear", "factor": 2.0})), "rope_scaling"),
    "unknown-attention-flag": (dict(config=lambda c: c.update(reorder_and_upcast_attn=True)),
                               "'reorder_and_upcast_attn' = true is not supported"),
    "not-a-number": (dict(config=lambda c: c.update(n_layer="2")),
                     "config key 'n_layer' = '2' is not a positive int"),
    # an architecture it does not support
    "architecture": (dict(config=lambda c: c.update(model_type="bert")),
                     "model_type 'bert' is not supported"),
    # tensor shapes that do not match the config
    "shape-width": (dict(config=lambda c: c.update(n_embd=48)),
                    "has shape (257, 32), the config implies (257, 48)"),
    "shape-vocab": (dict(llama=True, config=lambda c: c.update(vocab_size=300)),
                    "the config implies (300, 32)"),
    "more-layers": (dict(config=lambda c: c.update(n_layer=3)),
                    "tensor 'transformer.h.2.ln_1.weight' is missing"),
    "untied-without-head": (dict(config=lambda c: c.update(tie_word_embeddings=False)),
                            "'lm_head.weight' is missing (and tie_word_embeddings is false)"),
    # a truncated safetensors file
    "truncated-half": (dict(keep_bytes=lambda n: n // 2), "not a readable safetensors file"),
    "truncated-end": (dict(keep_bytes=lambda n: n - 3), "not a readable safetensors file"),
    "truncated-header": (dict(keep_bytes=lambda n: 5), "not a readable safetensors file"),
}


@pytest.fixture(scope="module")
def broken(tmp_path_factory):
    base = tmp_path_factory.mktemp("broken")
    return {name: _broken(base / name, **kw) for name, (kw, _needle) in CASES.items()}


def _prompts(tmp_path: Path, text: str = "hello\n") -> Path:
    (tmp_path / "in").mkdir(exist_ok=True)
    path = tmp_path / "in" / "prompts.txt"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("command", ["run", "capture"])
def test_bad_checkpoint_is_one_line(capsys, tmp_path, broken, case, command):
    folder = broken[case]
    if command == "run":
        argv = ["run", "--family", f"transformer(path={folder})", *FAST_RUN,
                "--out", tmp_path / "r.nc"]
    else:
        argv = ["capture", folder, _prompts(tmp_path), "--out", tmp_path / "b.nc",
                "--tokens", "3", "--quiet"]
    err = one_line_error(capsys, argv, tmp_path, CASES[case][1])
    assert str(folder) in err                                  # names the file at fault


@pytest.mark.parametrize("text,needle", [
    ("", "no prompts (expected one prompt per line)"),
    (" \n\n\t\n", "no prompts (expected one prompt per line)"),
])
def test_capture_prompt_file_without_prompts(capsys, tmp_path, text, needle):
    path = _prompts(tmp_path, text)
    err = one_line_error(capsys, ["capture", "target", path, "--out", tmp_path / "b.nc"],
                         tmp_path, needle)
    assert str(path) in err


def test_capture_prompt_file_not_utf8(capsys, tmp_path):
    path = _prompts(tmp_path)
    path.write_bytes(b"caf\xe9\n")
    one_line_error(capsys, ["capture", "target", path, "--out", tmp_path / "b.nc"], tmp_path,
                   "not UTF-8 text")


def test_prompt_without_tokens_under_a_tokenizer(capsys, tmp_path):
    """A line whose text the checkpoint's tokenizer maps to no token: named by file:line,
    in ``capture`` and in ``run --family 'transformer(prompt=...)'``."""
    tokenizers = pytest.importorskip("tokenizers")
    folder = write_llama(tmp_path / "ck", seed=3, vocab=300)
    vocab = {"[UNK]": 0, **{f"w{i}": i for i in range(1, 300)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = tokenizers.normalizers.Replace("x", "")       # "xxx" -> no text at all
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))
    assert Transformer(folder, prompt="w1 w2").encode("w1 w2").tolist() == [1, 2]
    capsys.readouterr()                   # a first compilation's notice is not the error
    path = _prompts(tmp_path, "w1 w2 w3\nxxx\n")
    one_line_error(capsys, ["capture", folder, path, "--out", tmp_path / "b.nc"], tmp_path,
                   f"{path}:2: the prompt has no tokens")
    path.write_text("xxx\nw1\n", encoding="utf-8")
    one_line_error(capsys, ["capture", folder, path, "--out", tmp_path / "b.nc"], tmp_path,
                   f"{path}:1: the prompt has no tokens")
    one_line_error(capsys, ["run", "--family", f"transformer(path={folder}, prompt='xxx')",
                            *FAST_RUN, "--out", tmp_path / "r.nc"], tmp_path,
                   "the prompt has no tokens")


@pytest.mark.parametrize("family,needle", [
    ("transformer(path=target, prompt='')", "the prompt has no tokens"),
    ("transformer(path=target, prompts=EMPTY)", "has no tokens"),
    ("transformer(path=target, prompts=SHORT)", "has 6 tokens; a root window needs 32"),
])
def test_run_prompts_without_enough_tokens(capsys, tmp_path, family, needle):
    empty = _prompts(tmp_path, "")
    short = tmp_path / "in" / "short.txt"
    short.write_text("hello\n", encoding="utf-8")
    family = family.replace("EMPTY", str(empty)).replace("SHORT", str(short))
    err = one_line_error(capsys, ["run", "--family", family, *FAST_RUN, "--out",
                                  tmp_path / "r.nc"], tmp_path, needle)
    if "prompts=" in family:
        assert str(tmp_path / "in") in err                       # names the prompts file


@pytest.mark.parametrize("argv,needle", [
    (["--roots", "0"], "roots must be an integer in [1, 16777216]"),
    (["--tokens", "0"], "tokens must be an integer in [1, 16777216]"),
    (["--top-k", "0"], "top_k must be an integer"),
    (["--temperature", "0"], "temperature must be a finite number > 0"),
    (["--window", "300"], "window + carry = 332 exceeds the model's 256 positions"),
])
def test_capture_bad_parameters(capsys, tmp_path, argv, needle):
    one_line_error(capsys, ["capture", "target", _prompts(tmp_path), "--out",
                            tmp_path / "b.nc", *argv], tmp_path, needle)


def test_untied_gpt2_head_is_read(tmp_path):
    """tie_word_embeddings = false with an lm_head.weight: the head is that tensor."""
    from safetensors.numpy import load_file, save_file

    tied = write_gpt2(tmp_path / "tied", seed=2)
    untied = write_gpt2(tmp_path / "untied", seed=2)
    tensors = load_file(str(untied / "model.safetensors"))
    tensors["lm_head.weight"] = 2 * tensors["transformer.wte.weight"]
    save_file(tensors, str(untied / "model.safetensors"))
    cfg = json.loads((untied / "config.json").read_text())
    cfg["tie_word_embeddings"] = False
    (untied / "config.json").write_text(json.dumps(cfg))
    toks = [72, 101, 108, 108, 111]
    a = Transformer(tied, prompt="x").logits(toks)
    b = Transformer(untied, prompt="x").logits(toks)
    np.testing.assert_allclose(b, 2 * a, rtol=1e-12, atol=1e-12)
