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

from collections.abc import Mapping

import numpy as np

from brwsim.errors import UserError
from brwsim.validate import check_input_file, check_work_size, echo, format_bytes
from brwsim.kernels.transformer import (GELU, GELU_NEW, GPT2, H_ACT, H_ARCH, H_D, H_EMB, H_EPS,
                                        H_FF, H_HD, H_HEAD, H_NFB, H_NFW, H_NH, H_NKV, H_NL,
                                        H_NPOS, H_THETA, H_V, H_WPE, HDR, L_MATRICES, LLAMA,
                                        PER_LAYER, RELU, SILU)
from brwsim.models.gguf import load_gguf
from brwsim.models.hfconfig import read_config
from brwsim.models.hfconfig import config_key as _key
from brwsim.models.hfconfig import config_text as _text

__all__ = ["Checkpoint", "load_checkpoint", "open_checkpoint", "TensorMap", "is_gguf", "ARCHITECTURES",
           "packed32", "checkpoint_path", "check_slots"]

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


#: Largest safetensors JSON header read (a real one is well under a MiB per thousand tensors).
MAX_HEADER_BYTES = 1 << 27
_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
                "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def _safetensors_header(path: str) -> dict[str, tuple[tuple[int, ...], int]]:
    """Each tensor's declared shape and bytes, from the JSON header of a safetensors file,
    checked against the file's size before any tensor is read (a sparse file declaring
    gigabytes is refused by its header, not by reading it)."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        head = fh.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 2 <= n <= min(size - 8, MAX_HEADER_BYTES):
            raise UserError(f"{path}: not a readable safetensors file (header of "
                            f"{format_bytes(max(n, 0))} in a file of {format_bytes(size)})")
        try:
            header = json.loads(fh.read(n))
        except (ValueError, RecursionError) as exc:
            raise UserError(f"{path}: not a readable safetensors file (header: "
                            f"{' '.join(str(exc).split())[:120]})") from None
    if not isinstance(header, dict):
        raise UserError(f"{path}: not a readable safetensors file (header is not an object)")
    data = size - 8 - n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            shape = tuple(int(d) for d in info["shape"])
            begin, end = (int(x) for x in info["data_offsets"])
            width = _DTYPE_BYTES[info["dtype"]]
        except (KeyError, TypeError, ValueError):
            raise UserError(f"{path}: not a readable safetensors file (tensor {echo(name, 60)}: "
                            "bad header entry)") from None
        nbytes = math.prod(shape) * width
        if min(shape, default=1) < 0 or not 0 <= begin <= end <= data or end - begin != nbytes:
            raise UserError(f"{path}: not a readable safetensors file (tensor {echo(name, 60)} "
                            f"declares {format_bytes(nbytes)} at bytes {begin}..{end}, the file "
                            f"holds {format_bytes(data)} of data)")
        out[name] = (shape, nbytes)
    return out


class _Tensors:
    """Named float32 tensors of a safetensors file, checked for shape on access."""

    def __init__(self, path: str) -> None:
        if not os.path.lexists(path):
            raise UserError(f"checkpoint has no model.safetensors ({path!r} not found)")
        check_input_file(path, "checkpoint weights")
        self.declared = _safetensors_header(path)
        self.names = set(self.declared)
        self.path = path
        self._f: Any = None
        self.used: dict[str, int] = {}          # tensor name -> elements, each read counted once

    def _open(self) -> Any:
        """safetensors' reader (it maps the whole file): opened once a tensor's declared
        shape has matched the config, never for a file that declares something else."""
        from safetensors import SafetensorError, safe_open

        if self._f is None:
            try:
                self._f = safe_open(self.path, framework="np")
            except (SafetensorError, OSError, ValueError) as exc:
                raise UserError(f"{self.path}: not a readable safetensors file ({exc})") from None
        return self._f

    def get(self, names: tuple[str, ...], shape: tuple[int, ...]) -> np.ndarray:
        from safetensors import SafetensorError

        name = next((n for n in names if n in self.names), None)
        if name is None:
            raise UserError(f"{self.path}: tensor {names[0]!r} is missing")
        declared, nbytes = self.declared[name]
        if declared != shape:            # before reading: a declared size is not allocated
            raise UserError(f"{self.path}: tensor {name!r} has shape {declared}, the config "
                            f"implies {shape} (not read: {format_bytes(nbytes)} declared)")
        check_work_size(2.0 * math.prod(shape) * 4, f"{self.path}: tensor {name!r}")
        try:
            a = self._open().get_tensor(name)
        except (SafetensorError, OSError, ValueError) as exc:
            raise UserError(f"{self.path}: tensor {name!r} unreadable ({exc})") from None
        if tuple(a.shape) != shape:
            raise UserError(f"{self.path}: tensor {name!r} has shape {tuple(a.shape)}, the "
                            f"config implies {shape}")
        a = np.asarray(a, dtype=np.float32)
        self.used[name] = int(a.size)
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
        self.used: dict[str, int] = {}          # as _Tensors.used

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
        self.used[name] = int(a.size)
        return a

    def has(self, name: str) -> bool:
        return name in self.names


class TensorMap(Mapping):
    """The tensors of :func:`open_checkpoint` as a read-only mapping, name -> float32 array
    of its declared shape, each read (and checked) when looked up: what a batched backend
    (:class:`~brwsim.backends.numpyforward.NumpyEvaluator`) takes as its weights."""

    def __init__(self, tensors: Any) -> None:
        self._t = tensors

    def _shape(self, name: str) -> tuple[int, ...]:
        if isinstance(self._t, _Tensors):
            return tuple(self._t.declared[name][0])
        return tuple(self._t._m.shape(name))

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._t.names:
            raise KeyError(name)
        return self._t.get((name,), self._shape(name))

    def __contains__(self, name: object) -> bool:
        return name in self._t.names

    def __iter__(self):
        return iter(sorted(self._t.names))

    def __len__(self) -> int:
        return len(self._t.names)


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
    cfg = read_config(path)
    return cfg, _Tensors(os.path.join(path, "model.safetensors"))


def _gpt2(cfg: dict, t: _Tensors, where: str):
    d = _key(cfg, "n_embd", where)
    nl = _key(cfg, "n_layer", where)
    nh = _key(cfg, "n_head", where)
    v = _key(cfg, "vocab_size", where)
    npos = _key(cfg, "n_positions", where)
    ff = _key(cfg, "n_inner", where, 4 * d)
    eps = _key(cfg, "layer_norm_epsilon", where, 1e-5, float)
    act = _text(cfg, "activation_function", where, "gelu_new")
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
    act = _text(cfg, "hidden_act", where, "silu")
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
    for slot, value in ((H_ARCH, dims["arch"]), (H_V, dims["v"]), (H_D, dims["d"]), (H_NL, nl),
                        (H_NH, dims["nh"]), (H_NKV, dims["nkv"]), (H_HD, dims["hd"]),
                        (H_FF, dims["ff"]), (H_NPOS, dims["npos"]), (H_EPS, dims["eps"]),
                        (H_THETA, dims["theta"]), (H_ACT, dims["act"])):
        header[slot] = value
    parts: list[np.ndarray] = []
    off = header.size

    def put(at: int, a: np.ndarray, matrix: bool) -> None:
        nonlocal off
        p = packed32(a) if matrix else np.asarray(a, np.float64).ravel()
        header[at] = off
        parts.append(p)
        off += p.size

    put(H_EMB, glob["emb"], True)
    if glob["head"] is None:                 # tied: lm_head = embedding
        header[H_HEAD] = header[H_EMB]
    else:
        put(H_HEAD, glob["head"], True)
    put(H_WPE, glob["wpe"], True)
    put(H_NFW, glob["nfw"], False)
    put(H_NFB, glob["nfb"], False)
    for i, tensors in enumerate(layers):         # in the per-layer slots' order, L_N1W ..
        for k, a in enumerate(tensors):
            put(HDR + PER_LAYER * i + k, a, k in L_MATRICES)
    block = np.concatenate([header] + parts)
    block.setflags(write=False)
    return block


@functools.lru_cache(maxsize=2)
def load_checkpoint(folder: str) -> Checkpoint:
    """Validate and pack the checkpoint in ``folder`` (a Hugging Face folder or a ``.gguf``
    file; cached per path)."""
    where = folder if is_gguf(folder) else os.path.join(folder, "config.json")
    cfg, tensors = open_checkpoint(folder)
    model_type = _text(cfg, "model_type", where)
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
    # the parameters the file holds and the model uses, each once (as transformers counts):
    # a tied head is the embedding, and the zero biases Llama lacks are no parameters
    n_params = sum(tensors.used.values())
    window = cfg.get("sliding_window") if model_type == "mistral" else None
    if window is not None:
        window = _key(cfg, "sliding_window", where)
    return Checkpoint(_pack(dims, glob, layers), model_type, dims["v"], dims["npos"], n_params,
                      cfg, window or 0)


def checkpoint_path(path: Any, who: str = "") -> str:
    """``path`` as a string, or one line naming ``who`` (``"drafter: "``) when it is no path."""
    if not isinstance(path, (str, os.PathLike)):
        raise UserError(f"{who}path must be a checkpoint folder, got {echo(path, 60)}")
    return os.fspath(path)


def check_slots(slots: int, ck: Checkpoint, who: str = "", model: str = "the model's") -> None:
    """The one check that ``slots`` positions (a transformer family's window + carry) fit
    the checkpoint ``ck``: its position table and, for Mistral, its sliding window (not
    supported across). Shared by :class:`~brwsim.families.Transformer` and the drafter
    policy (``who`` and ``model`` name them in the message)."""
    if slots > ck.max_positions:
        raise UserError(f"{who}window + carry = {slots} exceeds {model} {ck.max_positions} "
                        "positions")
    if ck.sliding_window and slots > ck.sliding_window:
        raise UserError(f"{who}window + carry = {slots} exceeds {model} sliding window of "
                        f"{ck.sliding_window} tokens (not supported)")
