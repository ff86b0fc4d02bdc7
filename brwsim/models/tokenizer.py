"""A ``tokenizers`` tokenizer built from a GGUF file's own ``tokenizer.ggml.*`` metadata.

A GGUF carries no ``tokenizer.json``: llama.cpp stores the vocabulary
(``tokenizer.ggml.tokens``), the token kinds (``token_type``: 3 control, 4 user defined),
the BPE merges and the name of the pre-tokenizer (``tokenizer.ggml.pre``), whose regular
expressions live in llama.cpp's ``llama-vocab.cpp``. :func:`build_tokenizer` rebuilds the
tokenizer those describe with the ``tokenizers`` library:

* ``gpt2`` (byte-level BPE: GPT-2, SmolLM, Llama 3, Qwen2): the vocabulary and merges as
  stored (tokens are already spelled in GPT-2's byte alphabet), a byte-level
  pre-tokenizer preceded by the split llama.cpp uses for the named ``pre`` (SmolLM,
  StarCoder: every digit alone; Llama 3, Qwen2: their own expressions) and a byte-level
  decoder;
* ``llama`` (SentencePiece BPE with byte fallback: Gemma, Llama 2): spaces written as
  ``\u2581``, pieces merged best first by their rank in the file (the order of
  ``tokenizer.ggml.tokens`` for Gemma, whose scores do not follow the merge order; the
  scores otherwise), unknown bytes as ``<0xNN>`` tokens.

Control tokens (``<|im_start|>``) are special tokens and user-defined ones added tokens,
so both stay whole. The BOS token is prepended by ``encode(..., add_special_tokens=True)``
when ``tokenizer.ggml.add_bos_token`` says so (llama.cpp's rule); brwsim's callers encode
without special tokens and add BOS themselves.
"""

from __future__ import annotations

import functools
from typing import Any

from brwsim.errors import UserError
from brwsim.models.gguffile import open_gguf

__all__ = ["build_tokenizer", "gguf_tokenizer", "PRE_SPLITS"]

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

#: ``tokenizer.ggml.pre`` -> (split digits one by one first, the word-splitting expression).
PRE_SPLITS: dict[str, tuple[bool, str]] = {
    "default": (False, _GPT2), "gpt2": (False, _GPT2), "mpt": (False, _GPT2),
    "olmo": (False, _GPT2),
    "smollm": (True, _GPT2), "starcoder": (True, _GPT2), "refact": (True, _GPT2),
    "codeshell": (True, _GPT2),
    "llama-bpe": (False, _LLAMA3), "llama3": (False, _LLAMA3), "llama-v3": (False, _LLAMA3),
    "dbrx": (False, _LLAMA3), "smaug-bpe": (False, _LLAMA3),
    "qwen2": (False, _QWEN2), "deepseek-r1-qwen": (False, _QWEN2),
}

_CONTROL, _USER_DEFINED = 3, 4


def _byte_level(meta: dict[str, Any], where: str):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    tokens = meta["tokenizer.ggml.tokens"]
    merges = meta.get("tokenizer.ggml.merges")
    if merges is None:
        raise UserError(f"{where}: byte-level tokenizer without tokenizer.ggml.merges")
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in PRE_SPLITS:
        raise UserError(f"{where}: tokenizer.ggml.pre {pre!r} is not supported "
                        f"({', '.join(PRE_SPLITS)})")
    digits, expr = PRE_SPLITS[pre]
    pairs = []
    for m in merges:
        left, sep, right = m.partition(" ")
        if not sep or not left or not right:
            raise UserError(f"{where}: merge {m!r} is not two tokens separated by a space")
        pairs.append((left, right))
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab, pairs, fuse_unk=False, byte_fallback=False))
    steps = [pre_tokenizers.Digits(individual_digits=True)] if digits else []
    if expr == _GPT2:
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    else:
        steps += [pre_tokenizers.Split(Regex(expr), behavior="isolated"),
                  pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    tok.pre_tokenizer = pre_tokenizers.Sequence(steps) if len(steps) > 1 else steps[0]
    tok.decoder = decoders.ByteLevel()
    return tok


def _sentencepiece(meta: dict[str, Any], where: str, by_position: bool):
    """SentencePiece BPE: merges are every split of a piece into two pieces of the
    vocabulary, applied best first by the merged piece's rank (then the split with the
    longer left half first, then by the halves' ids), as SentencePiece merges the
    highest-scoring piece first."""
    from tokenizers import Tokenizer, decoders, models, normalizers

    tokens = list(meta["tokenizer.ggml.tokens"])
    # A piece of two or more spaces is stored with real spaces; the model sees U+2581.
    tokens = ["\u2581" * len(t) if t and not t.strip(" ") else t for t in tokens]
    scores = meta.get("tokenizer.ggml.scores")
    types = meta.get("tokenizer.ggml.token_type")
    if by_position or scores is None:
        rank = {t: i for i, t in enumerate(tokens)}           # earlier = merged first
    else:
        order = sorted(range(len(tokens)), key=lambda i: (-float(scores[i]), i))
        rank = {tokens[i]: r for r, i in enumerate(order)}
    vocab: dict[str, int] = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    skip = set()
    if types is not None:
        skip = {tokens[i] for i, k in enumerate(types) if int(k) in (_CONTROL, 6)}  # 6 byte
    merges = []
    for piece, r in rank.items():
        if len(piece) < 2 or piece in skip:
            continue
        for k in range(1, len(piece)):
            a, b = piece[:k], piece[k:]
            if a in vocab and b in vocab and a not in skip and b not in skip:
                merges.append((r, -len(a), vocab[a], vocab[b], a, b))
    merges.sort()
    unk = meta.get("tokenizer.ggml.unknown_token_id")
    unk_token = tokens[int(unk)] if unk is not None and 0 <= int(unk) < len(tokens) else None
    tok = Tokenizer(models.BPE(vocab, [(a, b) for *_, a, b in merges], unk_token=unk_token,
                               fuse_unk=True, byte_fallback=True))
    steps = [normalizers.Replace(" ", "\u2581")]
    if meta.get("tokenizer.ggml.add_space_prefix", True):
        steps.insert(0, normalizers.Prepend("\u2581"))
    tok.normalizer = normalizers.Sequence(steps)
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse()] +
                                    ([decoders.Strip(" ", 1, 0)]
                                     if meta.get("tokenizer.ggml.add_space_prefix", True) else []))
    return tok


def build_tokenizer(meta: dict[str, Any], where: str = "GGUF"):
    """The :class:`tokenizers.Tokenizer` the GGUF metadata ``meta`` describes.

    Raises
    ------
    UserError
        No vocabulary, a tokenizer model or pre-tokenizer llama.cpp names but brwsim does
        not build, malformed merges or special token ids outside the vocabulary.
    """
    from tokenizers import AddedToken
    from tokenizers.processors import TemplateProcessing

    tokens = meta.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens:
        raise UserError(f"{where}: no tokenizer.ggml.tokens (cannot build a tokenizer)")
    kind = meta.get("tokenizer.ggml.model")
    arch = meta.get("general.architecture", "")
    if kind == "gpt2":
        tok = _byte_level(meta, where)
    elif kind == "llama":
        tok = _sentencepiece(meta, where, by_position=str(arch).startswith("gemma"))
    else:
        raise UserError(f"{where}: tokenizer.ggml.model {kind!r} is not supported (gpt2, llama)")
    types = meta.get("tokenizer.ggml.token_type")
    if types is not None:
        if len(types) != len(tokens):
            raise UserError(f"{where}: tokenizer.ggml.token_type has {len(types)} entries for "
                            f"{len(tokens)} tokens")
        # Matched whole in the raw text. A SentencePiece run of spaces (respelled with
        # U+2581 above) stays an ordinary piece that the merges reach.
        control = [AddedToken(tokens[i], special=True, normalized=False)
                   for i, k in enumerate(types) if int(k) == _CONTROL and tokens[i]]
        user = [AddedToken(tokens[i], special=False, normalized=False)
                for i, k in enumerate(types) if int(k) == _USER_DEFINED and tokens[i]
                and tok.id_to_token(i) == tokens[i]]
        tok.add_special_tokens(control)
        tok.add_tokens(user)
    bos = meta.get("tokenizer.ggml.bos_token_id")
    add_bos = meta.get("tokenizer.ggml.add_bos_token", kind == "llama")
    for key in ("bos_token_id", "eos_token_id"):
        v = meta.get(f"tokenizer.ggml.{key}")
        if v is not None and not 0 <= int(v) < len(tokens):
            raise UserError(f"{where}: tokenizer.ggml.{key} = {v} is outside the vocabulary")
    if add_bos and bos is not None:
        b = tokens[int(bos)]
        tok.post_processor = TemplateProcessing(single=f"{b} $A", pair=f"{b} $A {b} $B",
                                                special_tokens=[(b, int(bos))])
    if tok.get_vocab_size(with_added_tokens=True) != len(tokens):
        raise UserError(f"{where}: the tokenizer built has {tok.get_vocab_size(True)} tokens, "
                        f"the file lists {len(tokens)} (repeated tokens?)")
    return tok


@functools.lru_cache(maxsize=4)
def gguf_tokenizer(path: str):
    """The tokenizer of the GGUF file at ``path`` (cached per path)."""
    f = open_gguf(path)
    return build_tokenizer(f.metadata, path)
