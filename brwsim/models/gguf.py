"""A GGUF model as a Hugging Face checkpoint: its configuration and named float32 tensors.

:func:`load_gguf` turns a validated :class:`~brwsim.models.gguffile.GGUFFile` into what a
``config.json`` + ``model.safetensors`` folder would hold:

* ``config``: a Hugging Face-style dict (``model_type``, ``hidden_size``,
  ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``,
  ``intermediate_size``, ``rms_norm_eps``, ``rope_theta``, ``max_position_embeddings``,
  ``vocab_size``, ``tie_word_embeddings``, ...) from llama.cpp's ``<arch>.*`` keys;
* tensors under the Hugging Face names (``model.layers.N.self_attn.q_proj.weight``, ...),
  dequantised on request (:meth:`GGUFModel.tensor`), so a caller holds one float32 tensor
  at a time on top of what it keeps.

Two transformations undo what llama.cpp's ``convert_hf_to_gguf.py`` did when writing the
file. For ``llama`` it permutes the rows of ``q_proj`` and ``k_proj`` within each head
from Hugging Face's rotate-half RoPE layout (first half of the head's dimensions, then the
second half) to ggml's interleaved pairs: row ``h*hd + 2*i + j`` of the file is row
``h*hd + j*hd/2 + i`` of the checkpoint (``j`` in 0, 1); :func:`unpermute_rows` inverts
it, with the key-value head count for ``k_proj``. (transformers' GGUF loader,
``LlamaTensorProcessor``, does the same; ``qwen2`` files are written unpermuted.) For
``gemma3`` the converter stores every RMSNorm weight as ``1 + w`` (ggml multiplies by
the weight, Gemma by ``1 + w``); the weight is read back as ``stored - 1`` in float32, as
transformers does.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from brwsim.errors import UserError
from brwsim.models.chat import render_chat as _render_chat
from brwsim.models.gguffile import GGUFFile, open_gguf
from brwsim.models.chat import render_chat

__all__ = ["GGUFModel", "load_gguf", "unpermute_rows", "ARCHITECTURES"]

#: GGUF ``general.architecture`` -> Hugging Face ``model_type``.
ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "gemma3": "gemma3_text"}

# llama.cpp per-layer tensor name -> Hugging Face name under model.layers.N.
_LAYER = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
# The norm that follows attention: llama's ffn_norm is Gemma's pre-feed-forward norm.
_LAYER_ARCH = {
    "llama": {"ffn_norm": "post_attention_layernorm"},
    "qwen2": {"ffn_norm": "post_attention_layernorm"},
    "gemma3": {"post_attention_norm": "post_attention_layernorm",
               "ffn_norm": "pre_feedforward_layernorm",
               "post_ffw_norm": "post_feedforward_layernorm"},
}
_GLOBAL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm",
           "output": "lm_head"}


def unpermute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Rows of a llama.cpp Q or K projection (or bias) back in Hugging Face order.

    Within each of the ``n_head`` heads of ``hd`` rows, the file holds interleaved RoPE
    pairs (row ``2*i + j``); Hugging Face holds the two halves (row ``j*hd/2 + i``).
    """
    rows = w.shape[0]
    if rows % (2 * n_head):
        raise UserError(f"cannot undo the RoPE row order: {rows} rows over {n_head} heads")
    half = rows // n_head // 2
    return np.ascontiguousarray(
        w.reshape(n_head, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def _int(f: GGUFFile, key: str, default: int | None = None) -> int:
    v = f.get(key, default)
    if v is None:
        raise UserError(f"{f.path}: metadata {key!r} is missing")
    if isinstance(v, np.ndarray) or isinstance(v, (bool, str, list)) or int(v) != v or v <= 0:
        raise UserError(f"{f.path}: metadata {key!r} = {v!r} is not a positive integer")
    return int(v)


def _float(f: GGUFFile, key: str, default: float | None = None) -> float:
    v = f.get(key, default)
    if v is None:
        raise UserError(f"{f.path}: metadata {key!r} is missing")
    if isinstance(v, (np.ndarray, bool, str, list)) or not np.isfinite(v) or v <= 0:
        raise UserError(f"{f.path}: metadata {key!r} = {v!r} is not a positive number")
    return float(v)


class GGUFModel:
    """A GGUF file read as a Hugging Face checkpoint (see the module docstring).

    Attributes
    ----------
    path : str
    arch : str
        ``general.architecture`` (``llama``, ``qwen2``, ``gemma3``).
    config : dict
        Hugging Face-style configuration.
    file : GGUFFile
        The validated container (metadata, tensor table).
    """

    def __init__(self, f: GGUFFile) -> None:
        self.file = f
        self.path = f.path
        arch = f.get("general.architecture")
        if arch is None:
            raise UserError(f"{f.path}: metadata 'general.architecture' is missing")
        if arch not in ARCHITECTURES:
            raise UserError(f"{f.path}: GGUF architecture {arch!r} is not supported "
                            f"({', '.join(ARCHITECTURES)})")
        self.arch = arch
        self.config = self._config()
        self._names = self._name_map()

    # -- configuration ---------------------------------------------------------------------
    def _config(self) -> dict[str, Any]:
        f, a = self.file, self.arch
        tokens = f.get("tokenizer.ggml.tokens")
        n_tok = len(tokens) if tokens is not None else None
        d = _int(f, f"{a}.embedding_length")
        nh = _int(f, f"{a}.attention.head_count")
        hd = _int(f, f"{a}.attention.key_length", d // nh if d % nh == 0 else None)
        cfg: dict[str, Any] = {
            "model_type": ARCHITECTURES[a],
            "architectures": [{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                               "gemma3": "Gemma3ForCausalLM"}[a]],
            "hidden_size": d,
            "num_hidden_layers": _int(f, f"{a}.block_count"),
            "num_attention_heads": nh,
            "num_key_value_heads": _int(f, f"{a}.attention.head_count_kv", nh),
            "head_dim": hd,
            "intermediate_size": _int(f, f"{a}.feed_forward_length"),
            "rms_norm_eps": _float(f, f"{a}.attention.layer_norm_rms_epsilon"),
            "rope_theta": _float(f, f"{a}.rope.freq_base", 10000.0),
            "max_position_embeddings": _int(f, f"{a}.context_length"),
            "vocab_size": _int(f, f"{a}.vocab_size", n_tok),
            "tie_word_embeddings": "output.weight" not in f.tensors,
            "torch_dtype": "float32",
        }
        rot = f.get(f"{a}.rope.dimension_count", hd)
        if rot != hd:
            raise UserError(f"{f.path}: partial rotary embeddings ({a}.rope.dimension_count "
                            f"= {rot}, head dimension {hd}) are not supported")
        if f.get(f"{a}.rope.scaling.type") not in (None, "none"):
            raise UserError(f"{f.path}: RoPE scaling {f.get(f'{a}.rope.scaling.type')!r} "
                            "is not supported")
        if a in ("llama", "qwen2"):
            cfg.update(hidden_act="silu", attention_bias="blk.0.attn_q.bias" in f.tensors,
                       mlp_bias=False)
        if a == "gemma3":
            # Gemma 3 text: GELU-tanh, attention scaled by query_pre_attn_scalar = head_dim,
            # every sixth layer global, the others sliding over the stated window.
            cfg.update(hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=hd,
                       sliding_window=_int(f, "gemma3.attention.sliding_window", 4096),
                       attention_bias=False)
        for key, name in (("tokenizer.ggml.bos_token_id", "bos_token_id"),
                          ("tokenizer.ggml.eos_token_id", "eos_token_id"),
                          ("tokenizer.ggml.padding_token_id", "pad_token_id")):
            if f.get(key) is not None:
                cfg[name] = int(f.get(key))
        return cfg

    # -- tensors -----------------------------------------------------------------------------
    def _name_map(self) -> dict[str, str]:
        """Hugging Face name -> GGUF name for every tensor of the file."""
        out: dict[str, str] = {}
        layer = dict(_LAYER, **_LAYER_ARCH[self.arch])
        for g in self.file.tensors:
            stem, _, kind = g.rpartition(".")
            if kind not in ("weight", "bias"):
                raise UserError(f"{self.path}: tensor {g!r} is not a weight or bias")
            if stem in _GLOBAL:
                out[f"{_GLOBAL[stem]}.{kind}"] = g
                continue
            parts = stem.split(".")
            if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in layer:
                out[f"model.layers.{int(parts[1])}.{layer[parts[2]]}.{kind}"] = g
                continue
            if stem == "rope_freqs":          # llama 3.1 frequency factors: not supported
                raise UserError(f"{self.path}: tensor {g!r} (scaled RoPE) is not supported")
            raise UserError(f"{self.path}: tensor {g!r} has no Hugging Face counterpart for "
                            f"architecture {self.arch!r}")
        return out

    @property
    def names(self) -> list[str]:
        """Hugging Face names of the file's tensors."""
        return list(self._names)

    def has(self, name: str) -> bool:
        return name in self._names

    def shape(self, name: str) -> tuple[int, ...]:
        """The Hugging Face shape of tensor ``name``, from the tensor table (nothing read)."""
        if name not in self._names:
            raise UserError(f"{self.path}: tensor {name!r} is missing")
        return tuple(self.file.tensors[self._names[name]].shape)

    def gguf_name(self, name: str) -> str:
        return self._names[name]

    def tensor(self, name: str) -> np.ndarray:
        """Tensor ``name`` (Hugging Face name and shape) as float32."""
        if name not in self._names:
            raise UserError(f"{self.path}: tensor {name!r} is missing")
        g = self._names[name]
        a = self.file.dequantized(g)
        if self.arch == "llama" and (".q_proj." in name or ".k_proj." in name):
            heads = self.config["num_attention_heads" if ".q_proj." in name
                                else "num_key_value_heads"]
            a = unpermute_rows(a, heads)
        if self.arch == "gemma3" and name.endswith("norm.weight"):
            a = a - np.float32(1)
        return a

    def tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        """Every (Hugging Face name, float32 tensor), one dequantised at a time."""
        for name in self._names:
            yield name, self.tensor(name)

    # -- tokenizer metadata --------------------------------------------------------------------
    @property
    def chat_template(self) -> str | None:
        """``tokenizer.chat_template``, or None when the file has none."""
        t = self.file.get("tokenizer.chat_template")
        return t if isinstance(t, str) and t.strip() else None

    @property
    def bos_token_id(self) -> int | None:
        return self.config.get("bos_token_id")

    @property
    def eos_token_id(self) -> int | None:
        return self.config.get("eos_token_id")

    @property
    def add_bos_token(self) -> bool:
        """Whether a BOS token starts every encoded text (``tokenizer.ggml.add_bos_token``;
        llama.cpp's default for a SentencePiece vocabulary that does not say is True)."""
        v = self.file.get("tokenizer.ggml.add_bos_token")
        if v is None:
            return self.file.get("tokenizer.ggml.model") == "llama"
        return bool(v)

    def render_chat(self, messages: Any, add_generation_prompt: bool = True) -> str:
        """``messages`` rendered with the file's chat template (UserError without one)."""
        tokens = self.file.get("tokenizer.ggml.tokens") or []
        name = lambda i: tokens[i] if i is not None and 0 <= i < len(tokens) else ""  # noqa: E731
        return _render_chat(self.chat_template, messages, add_generation_prompt,
                           bos_token=name(self.bos_token_id), eos_token=name(self.eos_token_id),
                           model=self.path)


def load_gguf(path: str) -> GGUFModel:
    """Open and validate the GGUF model at ``path`` (metadata and tensor table only)."""
    return GGUFModel(open_gguf(path))
