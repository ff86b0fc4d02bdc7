"""Reading Hugging Face checkpoint folders (``config.json`` + ``model.safetensors``).

:func:`load_checkpoint` validates the configuration and every tensor's shape against it,
then packs the weights into the flat block that :mod:`brwsim.kernels.transformer` reads.
Supported: ``model_type`` ``gpt2`` (``GPT2LMHeadModel``: Conv1D weights stored as
(in, out), tied lm_head) and ``llama``, ``qwen2``, ``mistral`` (``LlamaForCausalLM`` and
its relatives: Linear weights stored as (out, in), grouped-query attention, RoPE,
RMSNorm, SwiGLU, q/k/v biases where ``attention_bias`` is set or the model is Qwen2,
tied or separate lm_head). SmolLM checkpoints are ``llama``. A ``.gguf`` file is read
as the same configuration and tensors (:func:`open_checkpoint`, :mod:`brwsim.models.gguf`).
Every problem (missing or unknown setting, a tensor missing or of the wrong shape, a
truncated file) is one :class:`~brwsim.errors.UserError` line.
"""

from __future__ import annotations

import functools
import json
import math
import os
from typing import Any, NamedTuple

import numpy as np

from brwsim.errors import UserError
from brwsim.kernels.transformer import GELU, GELU_NEW, GPT2, HDR, LLAMA, PER_LAYER, RELU, SILU
from brwsim.models.gguf import load_gguf

__all__ = ["Checkpoint", "load_checkpoint", "open_checkpoint", "is_gguf", "ARCHITECTURES",
           "packed32"]

#: model_type -> architecture code of the kernel.
ARCHITECTURES = {"gpt2": GPT2, "llama": LLAMA, "qwen2": LLAMA, "mistral": LLAMA}
_ACTS = {"gelu_new": GELU_NEW, "gelu_pytorch_tanh": GELU_NEW, "gelu": GELU, "relu": RELU}


class Checkpoint(NamedTuple):
    """A loaded checkpoint: the kernel's weight block and what the family needs to know."""

    block: np.ndarray
    model_type: str
    vocab_size: int
    max_positions: int
    n_params: int
    config: dict
    sliding_window: int


def packed32(a: np.ndarray) -> np.ndarray:
    """float32 values packed two per float64 slot (zero padded to an even count)."""
    flat = np.ascontiguousarray(a, dtype=np.float32).ravel()
    if flat.size % 2:
        flat = np.append(flat, np.float32(0))
    return flat.view(np.float64)


def _read_config(folder: str) -> dict:
    path = os.path.join(folder, "config.json")
    if not os.path.isdir(folder):
        raise UserError(f"checkpoint folder {folder!r} not found")
    try:
        with open(path, encoding="utf-8") as fh:
            cfg = json.load(fh)
    except FileNotFoundError:
        raise UserError(f"checkpoint folder {folder!r} has no config.json") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not JSON ({exc})") from None
    if not isinstance(cfg, dict):
        raise UserError(f"{path}: not a JSON object")
    return cfg


def _key(cfg: dict, name: str, where: str, default: Any = None, kind: type = int) -> Any:
    """A config entry of the given kind (``default`` None: required)."""
    if name not in cfg or cfg[name] is None:
        if default is None:
            raise UserError(f"{where}: config key {name!r} is missing")
        return default
    value = cfg[name]
    ok = (isinstance(value, bool) if kind is bool else
          isinstance(value, (int, float)) and not isinstance(value, bool)
          and (kind is float or float(value).is_integer()))
    if not ok or (kind is not bool and not (math.isfinite(value) and value > 0)):
        raise UserError(f"{where}: config key {name!r} = {value!r} is not a positive "
                        f"{'boolean' if kind is bool else kind.__name__}")
    return kind(value)


class _Tensors:
    """Named float32 tensors of a safetensors file, checked for shape on access."""

    def __init__(self, path: str) -> None:
        from safetensors import SafetensorError, safe_open

        if not os.path.isfile(path):
            raise UserError(f"checkpoint has no model.safetensors ({path!r} not found)")
        try:
            self._f = safe_open(path, framework="np")
            self.names = set(self._f.keys())
        except (SafetensorError, OSError, ValueError) as exc:
            raise UserError(f"{path}: not a readable safetensors file ({exc})") from None
        self.path = path
        self._error = SafetensorError

    def get(self, names: tuple[str, ...], shape: tuple[int, ...]) -> np.ndarray:
        name = next((n for n in names if n in self.names), None)
        if name is None:
            raise UserError(f"{self.path}: tensor {names[0]!r} is missing")
        try:
            a = self._f.get_tensor(name)
        except (self._error, OSError, ValueError) as exc:
            raise UserError(f"{self.path}: tensor {name!r} unreadable ({exc})") from None
        if tuple(a.shape) != shape:
            raise UserError(f"{self.path}: tensor {name!r} has shape {tuple(a.shape)}, the "
                            f"config implies {shape}")
        a = np.asarray(a, dtype=np.float32)
        if not np.all(np.isfinite(a)):
            raise UserError(f"{self.path}: tensor {name!r} holds non-finite values")
        return a

    def has(self, name: str) -> bool:
        return name in self.names


class _GGUFTensors:
    """The tensors of a GGUF model under their Hugging Face names, checked as :class:`_Tensors`."""

    def __init__(self, model) -> None:
        self._m = model
        self.path = model.path
        self.names = set(model.names)

    def get(self, names: tuple[str, ...], shape: tuple[int, ...]) -> np.ndarray:
        name = next((n for n in names if n in self.names), None)
        if name is None:
            raise UserError(f"{self.path}: tensor {names[0]!r} is missing")
        a = self._m.tensor(name)
        if tuple(a.shape) != shape:
            raise UserError(f"{self.path}: tensor {name!r} has shape {tuple(a.shape)}, the "
                            f"metadata implies {shape}")
        if not np.all(np.isfinite(a)):
            raise UserError(f"{self.path}: tensor {name!r} holds non-finite values")
        return a

    def has(self, name: str) -> bool:
        return name in self.names


def is_gguf(path: str) -> bool:
    """Whether ``path`` names a GGUF file (by its ``.gguf`` suffix)."""
    return os.fspath(path).lower().endswith(".gguf")


def open_checkpoint(path: str) -> tuple[dict, Any]:
    """The Hugging Face configuration and tensors of a checkpoint folder or GGUF file.

    Returns
    -------
    (dict, tensors)
        ``tensors.get(names, shape)`` gives a float32 array (the first of ``names``
        present, checked for shape and finiteness), ``tensors.has(name)`` and
        ``tensors.names`` (every name) describe the rest.
    """
    if is_gguf(path):
        model = load_gguf(path)
        return dict(model.config), _GGUFTensors(model)
    cfg = _read_config(path)
    return cfg, _Tensors(os.path.join(path, "model.safetensors"))


def _gpt2(cfg: dict, t: _Tensors, where: str):
    d = _key(cfg, "n_embd", where)
    nl = _key(cfg, "n_layer", where)
    nh = _key(cfg, "n_head", where)
    v = _key(cfg, "vocab_size", where)
    npos = _key(cfg, "n_positions", where)
    ff = _key(cfg, "n_inner", where, 4 * d)
    eps = _key(cfg, "layer_norm_epsilon", where, 1e-5, float)
    act = cfg.get("activation_function", "gelu_new")
    if act not in _ACTS:
        raise UserError(f"{where}: activation_function {act!r} is not supported "
                        f"({', '.join(_ACTS)})")
    for flag in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
        if cfg.get(flag):
            raise UserError(f"{where}: config key {flag!r} = true is not supported")
    if cfg.get("scale_attn_weights") is False:
        raise UserError(f"{where}: scale_attn_weights = false is not supported")
    if d % nh:
        raise UserError(f"{where}: n_embd {d} is not a multiple of n_head {nh}")
    pre = "transformer." if t.has("transformer.wte.weight") else ""
    g = lambda n, s: t.get((pre + n,), s)  # noqa: E731
    wte = g("wte.weight", (v, d))
    head = None
    if cfg.get("tie_word_embeddings", True) is False:   # GPT2LMHeadModel unties on request
        if not t.has("lm_head.weight"):
            raise UserError(f"{t.path}: tensor 'lm_head.weight' is missing (and "
                            "tie_word_embeddings is false)")
        head = t.get(("lm_head.weight",), (v, d)).T
    glob = dict(emb=wte.T, head=head, wpe=g("wpe.weight", (npos, d)),
                nfw=g("ln_f.weight", (d,)), nfb=g("ln_f.bias", (d,)))
    layers = []
    for i in range(nl):
        h = f"h.{i}."
        layers.append([g(h + "ln_1.weight", (d,)), g(h + "ln_1.bias", (d,)),
                       g(h + "attn.c_attn.weight", (d, 3 * d)), g(h + "attn.c_attn.bias", (3 * d,)),
                       g(h + "attn.c_proj.weight", (d, d)), g(h + "attn.c_proj.bias", (d,)),
                       g(h + "ln_2.weight", (d,)), g(h + "ln_2.bias", (d,)),
                       g(h + "mlp.c_fc.weight", (d, ff)), g(h + "mlp.c_fc.bias", (ff,)),
                       g(h + "mlp.c_proj.weight", (ff, d)), g(h + "mlp.c_proj.bias", (d,))])
    dims = dict(arch=GPT2, v=v, d=d, nl=nl, nh=nh, nkv=nh, hd=d // nh, ff=ff, npos=npos, eps=eps,
                theta=0.0, act=_ACTS[act])
    return dims, glob, layers


def _llama(cfg: dict, t: _Tensors, where: str, model_type: str):
    d = _key(cfg, "hidden_size", where)
    nl = _key(cfg, "num_hidden_layers", where)
    nh = _key(cfg, "num_attention_heads", where)
    nkv = _key(cfg, "num_key_value_heads", where, nh)
    v = _key(cfg, "vocab_size", where)
    ff = _key(cfg, "intermediate_size", where)
    npos = _key(cfg, "max_position_embeddings", where)
    eps = _key(cfg, "rms_norm_eps", where, 1e-6, float)
    rope = cfg.get("rope_parameters") or {}         # transformers >= 5 nests RoPE settings
    if not isinstance(rope, dict):
        raise UserError(f"{where}: rope_parameters {rope!r} is not an object")
    theta = _key(rope if "rope_theta" in rope else cfg, "rope_theta", where, 10000.0, float)
    hd = _key(cfg, "head_dim", where, d // nh if d % nh == 0 else None)
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise UserError(f"{where}: hidden_act {act!r} is not supported (silu)")
    for name in ("rope_scaling", "rope_parameters"):
        scaling = cfg.get(name)
        if scaling not in (None, {}) and not (isinstance(scaling, dict) and scaling.get(
                "rope_type", scaling.get("type", "default")) == "default"):
            raise UserError(f"{where}: {name} {scaling!r} is not supported (plain RoPE only)")
    if cfg.get("use_sliding_window"):
        raise UserError(f"{where}: use_sliding_window = true is not supported")
    if nh % nkv:
        raise UserError(f"{where}: num_attention_heads {nh} is not a multiple of "
                        f"num_key_value_heads {nkv}")
    if hd % 2:
        raise UserError(f"{where}: head_dim {hd} is odd (RoPE rotates pairs)")
    if cfg.get("mlp_bias"):
        raise UserError(f"{where}: mlp_bias = true is not supported")
    qkv_bias = bool(cfg.get("attention_bias")) or model_type == "qwen2"
    tied = cfg.get("tie_word_embeddings", False) is True
    qw, kvd = nh * hd, nkv * hd
    pre = "model."
    g = lambda n, s: t.get((pre + n, n), s)  # noqa: E731
    emb = g("embed_tokens.weight", (v, d))
    head = emb
    if not tied:
        if not t.has("lm_head.weight"):
            raise UserError(f"{t.path}: tensor 'lm_head.weight' is missing (and "
                            "tie_word_embeddings is not set)")
        head = t.get(("lm_head.weight",), (v, d))
    zeros = np.zeros(d, np.float32)
    glob = dict(emb=emb.T, head=None if tied else head.T, wpe=np.zeros((1, 1), np.float32),
                nfw=g("norm.weight", (d,)), nfb=zeros)
    layers = []
    for i in range(nl):
        h = f"layers.{i}."
        wq = g(h + "self_attn.q_proj.weight", (qw, d))
        wk = g(h + "self_attn.k_proj.weight", (kvd, d))
        wv = g(h + "self_attn.v_proj.weight", (kvd, d))
        if qkv_bias:
            bqkv = np.concatenate([g(h + "self_attn.q_proj.bias", (qw,)),
                                   g(h + "self_attn.k_proj.bias", (kvd,)),
                                   g(h + "self_attn.v_proj.bias", (kvd,))])
        else:
            bqkv = np.zeros(qw + 2 * kvd, np.float32)
        w1 = np.hstack([g(h + "mlp.gate_proj.weight", (ff, d)).T,
                        g(h + "mlp.up_proj.weight", (ff, d)).T])
        layers.append([g(h + "input_layernorm.weight", (d,)), zeros,
                       np.hstack([wq.T, wk.T, wv.T]), bqkv,
                       g(h + "self_attn.o_proj.weight", (d, qw)).T, zeros,
                       g(h + "post_attention_layernorm.weight", (d,)), zeros,
                       w1, np.zeros(2 * ff, np.float32),
                       g(h + "mlp.down_proj.weight", (d, ff)).T, zeros])
    dims = dict(arch=LLAMA, v=v, d=d, nl=nl, nh=nh, nkv=nkv, hd=hd, ff=ff, npos=npos, eps=eps,
                theta=theta, act=SILU)
    return dims, glob, layers


def _pack(dims: dict, glob: dict, layers: list) -> np.ndarray:
    """The kernel's block (see :mod:`brwsim.kernels.transformer`)."""
    nl = dims["nl"]
    header = np.zeros(HDR + PER_LAYER * nl)
    header[:12] = (dims["arch"], dims["v"], dims["d"], nl, dims["nh"], dims["nkv"], dims["hd"],
                   dims["ff"], dims["npos"], dims["eps"], dims["theta"], dims["act"])
    parts: list[np.ndarray] = []
    off = header.size

    def put(at: int, a: np.ndarray, matrix: bool) -> None:
        nonlocal off
        p = packed32(a) if matrix else np.asarray(a, np.float64).ravel()
        header[at] = off
        parts.append(p)
        off += p.size

    put(12, glob["emb"], True)
    if glob["head"] is None:                 # tied: lm_head = embedding
        header[13] = header[12]
    else:
        put(13, glob["head"], True)
    put(14, glob["wpe"], True)
    put(15, glob["nfw"], False)
    put(16, glob["nfb"], False)
    for i, tensors in enumerate(layers):
        for k, a in enumerate(tensors):
            put(HDR + PER_LAYER * i + k, a, k in (2, 4, 8, 10))
    block = np.concatenate([header] + parts)
    block.setflags(write=False)
    return block


@functools.lru_cache(maxsize=2)
def load_checkpoint(folder: str) -> Checkpoint:
    """Validate and pack the checkpoint in ``folder`` (a Hugging Face folder or a ``.gguf``
    file; cached per path)."""
    where = folder if is_gguf(folder) else os.path.join(folder, "config.json")
    cfg, tensors = open_checkpoint(folder)
    model_type = cfg.get("model_type")
    if model_type is None:
        raise UserError(f"{where}: config key 'model_type' is missing")
    if model_type not in ARCHITECTURES:
        hint = ("; use backend=torch" if model_type.startswith("gemma")
                else "; SmolLM is llama")
        raise UserError(f"{where}: model_type {model_type!r} is not supported by brwsim's "
                        f"numba backend ({', '.join(ARCHITECTURES)}{hint})")
    if model_type == "gpt2":
        dims, glob, layers = _gpt2(cfg, tensors, where)
    else:
        dims, glob, layers = _llama(cfg, tensors, where, model_type)
    n_params = sum(int(np.asarray(a).size) for a in [glob["emb"]] + [x for lay in layers for x in lay])
    if glob["head"] is not None:
        n_params += int(glob["head"].size)
    if model_type == "gpt2":
        n_params += int(glob["wpe"].size)
    window = cfg.get("sliding_window") if model_type == "mistral" else None
    if window is not None:
        window = _key(cfg, "sliding_window", where)
    return Checkpoint(_pack(dims, glob, layers), model_type, dims["v"], dims["npos"], n_params,
                      cfg, window or 0)
