"""A :class:`~brwsim.backends.base.TreeEvaluator` run by ``transformers``' own model class.

The checkpoint (a Hugging Face folder or a ``.gguf`` file, which ``transformers`` reads
with ``gguf_file=``) is loaded with ``AutoModelForCausalLM``, so every architecture that
``transformers`` implements is evaluated by its own code, with no brwsim code per
architecture. Tree evaluation uses only what every decoder model of ``transformers`` >= 5
accepts: explicit ``position_ids``, a prepared 4D additive attention mask (returned as is
by ``transformers.masking_utils``, so the model builds no mask of its own) and a
``DynamicCache`` that the forward pass appends each batch's keys and values to.

Invariants of the cache and the mask:

* The cache holds, in order, the root's context (``L`` tokens, positions ``0 .. L-1``)
  and then every tree node appended since :meth:`TorchEvaluator.start`, in id order. It
  is a ``DynamicCache`` built without the model's config, so every layer (sliding-window
  layers included) keeps every key; the window is applied by the mask instead.
* A batch's row for node ``i`` allows the whole context, node ``i``'s ancestors and node
  ``i`` itself, and nothing else (``0`` where allowed, the dtype's most negative number
  elsewhere). For a sliding-window layer it further allows only keys whose position is
  within the window: ``pos(query) - pos(key) < sliding_window``, the rule of
  ``transformers.masking_utils.sliding_window_overlay``. Models whose layers differ
  (``config.layer_types`` with ``"sliding_attention"``, e.g. Gemma 2/3, Qwen2/3 with
  ``use_sliding_window``) get a mask per layer type; models without ``layer_types`` and
  with ``config.sliding_window`` set (Mistral, Phi-3) get the windowed mask.

Precision: ``float32`` and ``bfloat16`` are ``transformers``' own (its norms and rotary
angles are computed in float32 in both). ``float64`` is made truly float64: the model is
rebuilt from its config under :class:`_Float64Everywhere`, a torch function mode that
turns every request for float32 (``.float()``, ``.to(torch.float32)``, ``dtype=
torch.float32`` arguments, the default dtype of new tensors) into float64, so that the
rotary inverse frequencies (non-persistent buffers, computed when the model is built),
RMS norms, rotary angles and any softmax a model upcasts are computed in float64; the
checkpoint's weights are then copied in, and every forward pass runs under the same mode.

Imports of torch and transformers happen only in this module, when an evaluator is
constructed.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import numpy as np

from brwsim.errors import UserError

__all__ = ["TorchEvaluator", "DTYPES", "PREFILL_CHUNK"]

#: Precisions of the forward pass.
DTYPES = ("float32", "bfloat16", "float64")

#: Context tokens per forward pass in :meth:`TorchEvaluator.start` (a longer context is
#: run in chunks, each attending to the cached chunks before it), which bounds its mask
#: to ``PREFILL_CHUNK x len(context)`` entries.
PREFILL_CHUNK = 1024

_NEEDS = "backend=torch needs torch and transformers: pip install 'brwsim[torch]'"


def _import_torch():
    try:
        import torch
        import transformers
    except ImportError:
        raise UserError(_NEEDS) from None
    return torch, transformers


def _float64_mode(torch):
    """A context manager under which every float32 request of torch is float64."""
    from torch.overrides import TorchFunctionMode

    f32, f64 = torch.float32, torch.float64

    class _Float64Everywhere(TorchFunctionMode):
        def __enter__(self):
            self._default = torch.get_default_dtype()
            torch.set_default_dtype(f64)
            return super().__enter__()

        def __exit__(self, *exc):
            torch.set_default_dtype(self._default)
            return super().__exit__(*exc)

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.Tensor.float:
                func = torch.Tensor.double
            args = tuple(f64 if a is f32 else a for a in args)
            if kwargs and kwargs.get("dtype") is f32:
                kwargs = dict(kwargs, dtype=f64)
            return func(*args, **(kwargs or {}))

    return _Float64Everywhere()


class _NoMode:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class TorchEvaluator:
    """Evaluate one root's tree nodes in batches with ``transformers``' model class.

    Parameters
    ----------
    path : str or os.PathLike
        A Hugging Face checkpoint folder (``config.json`` and weights) or a ``.gguf``
        file of an architecture ``transformers`` can read from GGUF (its quantised
        tensors are dequantised to float32 on loading).
    device : str
        ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
    dtype : str
        ``"float32"``, ``"bfloat16"`` or ``"float64"`` (truly float64: see the module
        docstring).
    threads : int, optional
        If given, ``torch.set_num_threads(threads)`` (a process-wide setting of torch)
        before anything runs; ``1`` gives single-threaded CPU runs.

    Attributes
    ----------
    vocab_size, max_positions, dtype
        As in :class:`~brwsim.backends.base.TreeEvaluator`.
    model
        The ``transformers`` model (``eval()`` mode, on ``device``).
    sliding_window : int or None
        The window applied to sliding-window layers, if the model has any.
    """

    def __init__(self, path, device: str = "cpu", dtype: str = "float32",
                 threads: int | None = None) -> None:
        if dtype not in DTYPES:
            raise UserError(f"dtype={dtype!r}: expected one of {', '.join(DTYPES)}")
        if not isinstance(device, str) or not (device == "cpu" or device == "cuda"
                                               or (device.startswith("cuda:")
                                                   and device[5:].isdigit())):
            raise UserError(f"device={device!r}: expected cpu, cuda or cuda:N")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or threads < 1):
            raise UserError(f"threads={threads!r}: expected a positive integer")
        path = Path(os.fspath(path))
        gguf = path.suffix.lower() == ".gguf"
        if gguf and not path.is_file():
            raise UserError(f"GGUF file not found: {path}")
        if not gguf and not (path / "config.json").is_file():
            raise UserError(f"not a Hugging Face checkpoint folder (no config.json) "
                            f"nor a .gguf file: {path}")
        torch, transformers = _import_torch()
        if device.startswith("cuda"):
            if not torch.cuda.is_available():
                raise UserError(f"device={device}: torch sees no CUDA device "
                                f"(torch.cuda.is_available() is False)")
            if device != "cuda" and int(device[5:]) >= torch.cuda.device_count():
                raise UserError(f"device={device}: torch sees {torch.cuda.device_count()} "
                                f"CUDA device(s)")
        if gguf:
            for extra in ("gguf", "accelerate"):
                try:
                    __import__(extra)
                except ImportError:
                    raise UserError(f"backend=torch reading a .gguf file needs the {extra} "
                                    f"package: pip install 'brwsim[torch]'") from None
        if threads is not None:
            torch.set_num_threads(threads)
        self._torch = torch
        self.dtype = dtype
        self.device = device
        self._tdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16,
                        "float64": torch.float64}[dtype]
        self._mode = (lambda: _float64_mode(torch)) if dtype == "float64" else _NoMode
        self.model = self._load(path, gguf, transformers)
        cfg = self.model.config.get_text_config()
        self.vocab_size = int(self.model.get_output_embeddings().weight.shape[0])
        self.max_positions = int(getattr(cfg, "max_position_embeddings", 0) or 1 << 30)
        self.sliding_window = (int(cfg.sliding_window) if "sliding_attention"
                               in self._layer_types.values() else None)
        params = inspect.signature(self.model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._cache = None

    # -- loading -----------------------------------------------------------------------
    def _load(self, path: Path, gguf: bool, transformers):
        torch = self._torch
        auto = transformers.AutoModelForCausalLM
        where = {"gguf_file": path.name} if gguf else {}
        folder = str(path.parent if gguf else path)
        try:
            config = transformers.AutoConfig.from_pretrained(folder, **where)
        except Exception as exc:          # transformers' own message names the problem
            raise UserError(f"backend=torch cannot read the config of {path}: "
                            f"{_first_line(exc)}") from None
        text = config.get_text_config()
        self._layer_types = self._mask_kinds(text)          # refused before the weights load
        attn = "eager" if getattr(text, "attn_logit_softcapping", None) else "sdpa"
        load_dtype = torch.float32 if self.dtype == "float64" else self._tdtype
        try:
            model = auto.from_pretrained(folder, **where, dtype=load_dtype,
                                         attn_implementation=attn)
        except Exception as exc:
            raise UserError(f"backend=torch cannot load {path}: {_first_line(exc)}") from None
        if self.dtype == "float64":
            with self._mode():
                model64 = auto.from_config(model.config, dtype=torch.float64,
                                           attn_implementation=attn)
            weights = model.state_dict()
            missing, unexpected = model64.load_state_dict(weights, strict=False)
            tied = set(getattr(model64, "_tied_weights_keys", None) or ())
            if unexpected or set(missing) - tied:
                raise UserError(f"backend=torch cannot rebuild {path} in float64: "
                                f"missing {sorted(missing)[:3]}, unexpected "
                                f"{sorted(unexpected)[:3]}")
            del weights, model
            model = model64
        return model.to(self.device).eval()

    @staticmethod
    def _mask_kinds(cfg) -> dict:
        """Layer index -> ``"full_attention"`` or ``"sliding_attention"``."""
        n = int(cfg.num_hidden_layers)
        types = getattr(cfg, "layer_types", None)
        if types is None:
            kind = ("sliding_attention" if getattr(cfg, "sliding_window", None)
                    else "full_attention")
            return dict.fromkeys(range(n), kind)
        bad = sorted(set(types) - {"full_attention", "sliding_attention"})
        if bad:
            raise UserError(f"backend=torch: layer type {bad[0]!r} of model_type "
                            f"{cfg.model_type!r} is not supported (full and sliding-window "
                            f"attention are)")
        if "sliding_attention" in types and not getattr(cfg, "sliding_window", None):
            raise UserError(f"backend=torch: model_type {cfg.model_type!r} has sliding "
                            f"layers but no sliding_window")
        return dict(enumerate(types))

    # -- evaluation --------------------------------------------------------------------
    def start(self, context) -> np.ndarray:
        """Begin a root: run ``context`` once, filling the KV cache; see
        :meth:`brwsim.backends.base.TreeEvaluator.start`."""
        ctx = self._tokens(context, "context")
        if ctx.size == 0:
            raise UserError("context: at least one token is needed")
        if ctx.size > self.max_positions:
            raise UserError(f"context of {ctx.size} tokens exceeds the model's "
                            f"{self.max_positions} positions")
        from transformers import DynamicCache

        self._cache = None
        self._L = int(ctx.size)
        self._pos = np.zeros(0, np.int64)          # node id -> position
        self._paths: list[np.ndarray] = []         # node id -> ids of root..node path
        cache = DynamicCache()
        for a in range(0, self._L, PREFILL_CHUNK):     # the mask is at most chunk x L
            b = min(a + PREFILL_CHUNK, self._L)
            key_pos = np.arange(b, dtype=np.int64)
            visible = key_pos[None, :] <= key_pos[a:b, None]
            lp = self._forward(ctx[a:b], key_pos[a:b], visible, key_pos, cache, keep=1)
        if cache.get_seq_length() != self._L:      # the model must have used our cache
            raise RuntimeError("transformers did not fill the KV cache passed to the model")
        self._cache = cache
        return lp[0]

    def extend(self, parents, tokens) -> np.ndarray:
        """Append a batch of nodes and evaluate them in one forward pass; see
        :meth:`brwsim.backends.base.TreeEvaluator.extend`."""
        if self._cache is None:
            raise UserError("extend called before start")
        tok = self._tokens(tokens, "tokens")
        par = np.asarray(parents)
        if par.ndim != 1 or par.shape != tok.shape or not np.issubdtype(par.dtype, np.integer):
            raise UserError(f"parents: expected {tok.size} integers, one per token")
        par = par.astype(np.int64)
        b, n0, L = tok.size, self._pos.size, self._L
        if b == 0:
            return np.zeros((0, self.vocab_size))
        ids = n0 + np.arange(b)
        if np.any(par < -1) or np.any(par >= ids):
            i = int(np.flatnonzero((par < -1) | (par >= ids))[0])
            raise UserError(f"parents[{i}] = {int(par[i])}: expected -1 or a node id below "
                            f"{n0 + i}")
        pos = np.empty(b, np.int64)
        paths = []
        for i in range(b):
            p = int(par[i])
            path = (np.array([n0 + i]) if p < 0 else
                    np.append(self._paths[p] if p < n0 else paths[p - n0], n0 + i))
            paths.append(path)
            pos[i] = L + path.size - 1
        if pos.max() >= self.max_positions:
            raise UserError(f"a node at position {int(pos.max())} exceeds the model's "
                            f"{self.max_positions} positions")
        visible = np.zeros((b, L + n0 + b), bool)
        visible[:, :L] = True
        rows = np.repeat(np.arange(b), [p.size for p in paths])
        visible[rows, L + np.concatenate(paths)] = True
        key_pos = np.concatenate([np.arange(L), self._pos, pos])
        lp = self._forward(tok, pos, visible, key_pos, self._cache, keep=0)
        self._pos = np.concatenate([self._pos, pos])
        self._paths.extend(paths)
        return lp

    def sequence(self, tokens) -> np.ndarray:
        """Log-probabilities after the last of ``tokens``, by a plain forward pass.

        No cache, mask or positions are passed: ``transformers`` builds its own causal
        (and sliding-window) masks. This is the reference the tree evaluation is checked
        against; it leaves the current root untouched.
        """
        torch = self._torch
        tok = self._tokens(tokens, "tokens")
        if tok.size == 0:
            raise UserError("tokens: at least one token is needed")
        with torch.inference_mode(), self._mode():
            ids = torch.as_tensor(tok, device=self.device)[None]
            logits = self.model(input_ids=ids, use_cache=False, logits_to_keep=1).logits
            return self._logprobs(logits[0, -1:])[0]

    # -- helpers -----------------------------------------------------------------------
    def _tokens(self, a, name: str) -> np.ndarray:
        a = np.asarray(a)
        if a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
            raise UserError(f"{name}: expected a 1-D array of integer token ids")
        a = a.astype(np.int64)
        if a.size and (a.min() < 0 or a.max() >= self.vocab_size):
            raise UserError(f"{name}: token ids must lie in [0, {self.vocab_size})")
        return a

    def _logprobs(self, logits) -> np.ndarray:
        torch = self._torch
        lp = torch.log_softmax(logits.to(torch.float64), dim=-1)
        return lp.cpu().numpy()

    def _forward(self, tok, pos, visible, key_pos, cache, keep: int) -> np.ndarray:
        torch = self._torch
        dev, dt = self.device, self._tdtype
        with torch.inference_mode(), self._mode():
            masks = {}
            for kind in set(self._layer_types.values()):
                allow = visible
                if kind == "sliding_attention":
                    allow = visible & (pos[:, None] - key_pos[None, :] < self.sliding_window)
                m = torch.zeros((1, 1) + allow.shape, dtype=dt, device=dev)
                m.masked_fill_(~torch.as_tensor(allow, device=dev), torch.finfo(dt).min)
                masks[kind] = m
            mask = masks.popitem()[1] if len(masks) == 1 else masks
            out = self.model(input_ids=torch.as_tensor(tok, device=dev)[None],
                             position_ids=torch.as_tensor(pos, device=dev)[None],
                             attention_mask=mask, use_cache=True, logits_to_keep=keep,
                             **{self._cache_kw: cache})
            return self._logprobs(out.logits[0])


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
