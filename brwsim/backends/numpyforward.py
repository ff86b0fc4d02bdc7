"""brwsim's own batched tree evaluator: GPT-2 and Llama forward passes in numpy (BLAS).

:class:`NumpyEvaluator` implements :class:`~brwsim.backends.base.TreeEvaluator` for the
architectures of :mod:`brwsim.families.checkpoint` (GPT-2; Llama, Qwen2, Mistral: RoPE
in Hugging Face's ``rotate_half`` layout, RMSNorm, SwiGLU, grouped-query attention,
optional q/k/v biases, tied or separate head), in float32 or float64.

Every product is one matrix product over a whole batch: a batch of n rows (a chunk of
the root's context, or n tree nodes) goes through each layer as (n, d) blocks against
weights stored pre-transposed (in, out), contiguous, in the compute dtype; the LM head
is one (n, d) x (d, V) product per batch. Attention of a batch reads the root's context
(its K/V computed once by :meth:`~NumpyEvaluator.start`, and reused by the next
``start`` for the longest common prefix of the two contexts) and the K/V of the tree's
nodes, gathered over the union of the batch's ancestors, under the tree mask (a node
sees its own ancestors and itself only).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from brwsim.errors import UserError
from brwsim.models.hfconfig import read_config

__all__ = ["NumpyEvaluator", "load_hf_weights"]

_CHUNK = 256          # context rows per block of start()
_DTYPES = {"float32": np.float32, "float64": np.float64}


def load_hf_weights(folder: str) -> tuple[dict, dict[str, np.ndarray]]:
    """The configuration and float32 tensors (Hugging Face names) of a checkpoint folder.

    Parameters
    ----------
    folder : str
        A folder with ``config.json`` and ``model.safetensors``.

    Returns
    -------
    config : dict
    weights : mapping of str to numpy.ndarray
        Every tensor of the file as float32, by its name in the file, read when first
        looked up (so that an evaluator built from it holds one copy of the weights).
    """
    from safetensors import SafetensorError, safe_open

    cfg = read_config(folder)
    st_path = os.path.join(folder, "model.safetensors")
    if not os.path.isfile(st_path):
        raise UserError(f"checkpoint folder {folder!r} needs config.json and model.safetensors")
    try:
        fh = safe_open(st_path, framework="np")
        names = list(fh.keys())
    except (SafetensorError, OSError, ValueError) as exc:
        raise UserError(f"{st_path}: not a readable safetensors file ({exc})") from None
    return cfg, _Lazy(fh, names, st_path)


class _Lazy(Mapping):
    """Tensors of an open safetensors file, read (as float32) when looked up."""

    def __init__(self, fh: Any, names: list[str], path: str) -> None:
        self._fh, self._names, self._path = fh, names, path

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._names:
            raise KeyError(name)
        try:
            return np.asarray(self._fh.get_tensor(name), np.float32)
        except Exception as exc:       # safetensors raises its own error types
            raise UserError(f"{self._path}: tensor {name!r} unreadable ({exc})") from None

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _get(w: dict, names: tuple[str, ...], shape: tuple[int, ...]) -> np.ndarray:
    for n in names:
        if n in w:
            a = np.asarray(w[n])
            if a.shape != shape:
                raise UserError(f"tensor {n!r} has shape {a.shape}, the config implies {shape}")
            return a
    raise UserError(f"tensor {names[0]!r} is missing")


def _cfg(cfg: dict, name: str, default: Any = None) -> Any:
    v = cfg.get(name)
    if v is None:
        if default is None:
            raise UserError(f"config key {name!r} is missing")
        return default
    return v


class NumpyEvaluator:
    """A GPT-2 or Llama checkpoint evaluated over tree batches with numpy.

    Parameters
    ----------
    config : dict
        The checkpoint's ``config.json`` (``model_type`` ``gpt2``, ``llama``, ``qwen2`` or
        ``mistral``).
    weights : dict of str to numpy.ndarray
        Its tensors by Hugging Face name (``transformer.``/``model.`` prefixes optional).
    dtype : {"float32", "float64"}, default "float32"
        Precision of every product and activation; log-probabilities are returned as
        float64 either way.

    Attributes
    ----------
    vocab_size, max_positions : int
    dtype : str
    nodes : int
        Tree nodes evaluated since construction (rows of :meth:`extend`).
    """

    def __init__(self, config: dict, weights: dict[str, np.ndarray], dtype: str = "float32") -> None:
        if dtype not in _DTYPES:
            raise UserError(f"dtype must be float32 or float64, got {dtype!r}")
        self.dtype = dtype
        dt = self._dt = _DTYPES[dtype]
        mt = config.get("model_type")
        if mt not in ("gpt2", "llama", "qwen2", "mistral"):
            raise UserError(f"model_type {mt!r} is not supported by the numpy backend "
                            "(gpt2, llama, qwen2, mistral)")
        self.model_type = mt
        self._gpt2 = mt == "gpt2"
        c = lambda a: np.ascontiguousarray(a, dt)  # noqa: E731
        if self._gpt2:
            self._init_gpt2(config, weights, c)
        else:
            self._init_llama(config, weights, c)
        self.nodes = 0
        self._ctx = np.empty(0, np.int64)
        self._last = None
        self._feat = np.empty((0, 0), dt)     # final normed hidden state per context position
        self._kc = [np.empty((self.nkv, 0, self.hd), dt) for _ in range(self.nl)]
        self._vc = [np.empty((self.nkv, 0, self.hd), dt) for _ in range(self.nl)]
        self._kt = [np.empty((self.nkv, 0, self.hd), dt) for _ in range(self.nl)]
        self._vt = [np.empty((self.nkv, 0, self.hd), dt) for _ in range(self.nl)]
        self._parent = np.empty(0, np.int64)
        self._depth = np.empty(0, np.int64)
        self._m = 0

    @classmethod
    def from_folder(cls, folder: str, dtype: str = "float32") -> "NumpyEvaluator":
        """The evaluator of a Hugging Face checkpoint folder (:func:`load_hf_weights`)."""
        cfg, w = load_hf_weights(folder)
        return cls(cfg, w, dtype)

    # -- set-up --------------------------------------------------------------------------
    def _init_gpt2(self, cfg: dict, w: dict, c) -> None:
        d = self.d = int(_cfg(cfg, "n_embd"))
        self.nl = int(_cfg(cfg, "n_layer"))
        self.nh = self.nkv = int(_cfg(cfg, "n_head"))
        self.hd = d // self.nh
        v = self.vocab_size = int(_cfg(cfg, "vocab_size"))
        self.max_positions = int(_cfg(cfg, "n_positions"))
        ff = int(cfg.get("n_inner") or 4 * d)
        self.eps = float(_cfg(cfg, "layer_norm_epsilon", 1e-5))
        self.act = cfg.get("activation_function", "gelu_new")
        if self.act not in ("gelu_new", "gelu_pytorch_tanh", "gelu", "relu"):
            raise UserError(f"activation_function {self.act!r} is not supported")
        g = lambda n, s: _get(w, ("transformer." + n, n), s)  # noqa: E731
        wte = g("wte.weight", (v, d))
        self._emb = c(wte)
        self._wpe = c(g("wpe.weight", (self.max_positions, d)))
        head = wte if cfg.get("tie_word_embeddings", True) is not False else \
            _get(w, ("lm_head.weight",), (v, d))
        self._head = c(head.T)
        self._nf = (c(g("ln_f.weight", (d,))), c(g("ln_f.bias", (d,))))
        self._layers = []
        for i in range(self.nl):
            h = f"h.{i}."
            self._layers.append(dict(
                n1=(c(g(h + "ln_1.weight", (d,))), c(g(h + "ln_1.bias", (d,)))),
                wqkv=c(g(h + "attn.c_attn.weight", (d, 3 * d))),
                bqkv=c(g(h + "attn.c_attn.bias", (3 * d,))),
                wo=c(g(h + "attn.c_proj.weight", (d, d))), bo=c(g(h + "attn.c_proj.bias", (d,))),
                n2=(c(g(h + "ln_2.weight", (d,))), c(g(h + "ln_2.bias", (d,)))),
                w1=c(g(h + "mlp.c_fc.weight", (d, ff))), b1=c(g(h + "mlp.c_fc.bias", (ff,))),
                w2=c(g(h + "mlp.c_proj.weight", (ff, d))), b2=c(g(h + "mlp.c_proj.bias", (d,)))))
        self.ff = ff

    def _init_llama(self, cfg: dict, w: dict, c) -> None:
        d = self.d = int(_cfg(cfg, "hidden_size"))
        self.nl = int(_cfg(cfg, "num_hidden_layers"))
        nh = self.nh = int(_cfg(cfg, "num_attention_heads"))
        nkv = self.nkv = int(_cfg(cfg, "num_key_value_heads", nh))
        hd = self.hd = int(cfg.get("head_dim") or d // nh)
        v = self.vocab_size = int(_cfg(cfg, "vocab_size"))
        ff = self.ff = int(_cfg(cfg, "intermediate_size"))
        self.max_positions = int(_cfg(cfg, "max_position_embeddings"))
        self.eps = float(_cfg(cfg, "rms_norm_eps", 1e-6))
        rope = cfg.get("rope_parameters") or {}
        theta = float(rope.get("rope_theta") or cfg.get("rope_theta") or 10000.0)
        for name in ("rope_scaling", "rope_parameters"):
            s = cfg.get(name)
            if s not in (None, {}) and not (isinstance(s, dict) and s.get(
                    "rope_type", s.get("type", "default")) == "default"):
                raise UserError(f"{name} {s!r} is not supported (plain RoPE only)")
        if nh % nkv or hd % 2:
            raise UserError(f"heads {nh} / kv heads {nkv} / head_dim {hd} not supported")
        bias = bool(cfg.get("attention_bias")) or self.model_type == "qwen2"
        qw, kvd = nh * hd, nkv * hd
        g = lambda n, s: _get(w, ("model." + n, n), s)  # noqa: E731
        emb = g("embed_tokens.weight", (v, d))
        self._emb = c(emb)
        head = emb if cfg.get("tie_word_embeddings", False) is True else \
            _get(w, ("lm_head.weight",), (v, d))
        self._head = c(head.T)
        self._nf = (c(g("norm.weight", (d,))), None)
        # rotary angles in float64, then rounded once to the compute dtype
        inv = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
        self._inv_freq = inv
        self._layers = []
        for i in range(self.nl):
            h = f"layers.{i}."
            wq = g(h + "self_attn.q_proj.weight", (qw, d))
            wk = g(h + "self_attn.k_proj.weight", (kvd, d))
            wv = g(h + "self_attn.v_proj.weight", (kvd, d))
            bq = (np.concatenate([g(h + f"self_attn.{m}_proj.bias", (n,)) for m, n in
                                  (("q", qw), ("k", kvd), ("v", kvd))]) if bias else None)
            self._layers.append(dict(
                n1=(c(g(h + "input_layernorm.weight", (d,))), None),
                wqkv=c(np.hstack([wq.T, wk.T, wv.T])), bqkv=None if bq is None else c(bq),
                wo=c(g(h + "self_attn.o_proj.weight", (d, qw)).T), bo=None,
                n2=(c(g(h + "post_attention_layernorm.weight", (d,))), None),
                w1=c(np.hstack([g(h + "mlp.gate_proj.weight", (ff, d)).T,
                                g(h + "mlp.up_proj.weight", (ff, d)).T])), b1=None,
                w2=c(g(h + "mlp.down_proj.weight", (d, ff)).T), b2=None))

    # -- pieces of the forward pass -------------------------------------------------------
    def _norm(self, x: np.ndarray, wb: tuple) -> np.ndarray:
        w, b = wb
        if self._gpt2:
            mu = x.mean(-1, keepdims=True)
            xc = x - mu
            var = (xc * xc).mean(-1, keepdims=True)
            return xc / np.sqrt(var + self.eps) * w + b
        ms = (x * x).mean(-1, keepdims=True)
        return (x / np.sqrt(ms + self.eps)) * w

    def _angles(self, pos: np.ndarray) -> tuple | None:
        """cos and sin (n, 1, hd/2) of the rotary angles at ``pos`` (float64, then rounded)."""
        if self._gpt2:
            return None
        ang = pos.astype(np.float64)[:, None] * self._inv_freq[None, :]
        return np.cos(ang).astype(self._dt)[:, None, :], np.sin(ang).astype(self._dt)[:, None, :]

    def _rope(self, x: np.ndarray, cs: tuple) -> np.ndarray:
        """Rotate (n, heads, hd) rows by the angles ``cs`` (rotate_half pairs i, i + hd/2)."""
        cos, sin = cs
        half = self.hd // 2
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    def _mlp(self, h: np.ndarray, L: dict) -> np.ndarray:
        f = h @ L["w1"]
        if L["b1"] is not None:
            f += L["b1"]
        if not self._gpt2:
            ff = self.ff
            g = f[:, :ff]
            f = g / (1.0 + np.exp(-g)) * f[:, ff:]
        elif self.act in ("gelu_new", "gelu_pytorch_tanh"):
            f = 0.5 * f * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (f + 0.044715 * f * f * f)))
        elif self.act == "gelu":
            from scipy.special import erf

            f = 0.5 * f * (1.0 + erf(f / math.sqrt(2.0)))
        else:
            f = np.maximum(f, 0)
        out = f @ L["w2"]
        if L["b2"] is not None:
            out += L["b2"]
        return out

    def _qkv(self, x: np.ndarray, L: dict, cs: tuple | None):
        """Queries (nkv, grp n, hd) grouped by key/value head, keys and values (nkv, n, hd)."""
        n = x.shape[0]
        nh, nkv, hd = self.nh, self.nkv, self.hd
        qkv = self._norm(x, L["n1"]) @ L["wqkv"]
        if L["bqkv"] is not None:
            qkv += L["bqkv"]
        qw, kvd = nh * hd, nkv * hd
        q = qkv[:, :qw].reshape(n, nh, hd)
        k = qkv[:, qw:qw + kvd].reshape(n, nkv, hd)
        v = qkv[:, qw + kvd:].reshape(n, nkv, hd)
        if not self._gpt2:
            q = self._rope(q, cs)
            k = self._rope(k, cs)
        grp = nh // nkv
        qg = np.ascontiguousarray(q.reshape(n, nkv, grp, hd).transpose(1, 2, 0, 3)).reshape(nkv, grp * n, hd)
        return qg, k.transpose(1, 0, 2), v.transpose(1, 0, 2)

    def _attn_out(self, o: np.ndarray, n: int, L: dict, x: np.ndarray) -> np.ndarray:
        """x + Wo (attention output, (nkv, grp n, hd) grouped) and the MLP residual."""
        grp = self.nh // self.nkv
        a = o.reshape(self.nkv, grp, n, self.hd).transpose(2, 0, 1, 3).reshape(n, self.nh * self.hd)
        y = a @ L["wo"]
        if L["bo"] is not None:
            y += L["bo"]
        x = x + y
        return x + self._mlp(self._norm(x, L["n2"]), L)

    def _embed(self, tokens: np.ndarray, pos: np.ndarray) -> np.ndarray:
        x = self._emb[tokens]
        if self._gpt2:
            x = x + self._wpe[pos]
        return x

    def _logprobs(self, x: np.ndarray) -> np.ndarray:
        """float64 log-softmax of the head's logits of final hidden rows ``x``."""
        z = self._norm(x, self._nf) @ self._head
        m = z.max(axis=1, keepdims=True)
        e = z - m
        np.exp(e, out=e)
        lse = np.log(e.sum(axis=1, keepdims=True).astype(np.float64))
        out = np.empty(z.shape)
        np.subtract(z, m.astype(np.float64) + lse, out=out)
        return out

    @staticmethod
    def _grow(buf: np.ndarray, need: int) -> np.ndarray:
        if buf.shape[1] >= need:
            return buf
        new = np.empty((buf.shape[0], max(need, 2 * buf.shape[1], 64), buf.shape[2]), buf.dtype)
        new[:, :buf.shape[1]] = buf
        return new

    # -- the interface --------------------------------------------------------------------
    def start(self, context: np.ndarray) -> np.ndarray:
        """Begin a root: the context's K/V (reusing the common prefix with the last
        context's) and the log-probabilities after it; see
        :meth:`brwsim.backends.base.TreeEvaluator.start`."""
        ctx = np.asarray(context, np.int64).ravel()
        if ctx.size == 0 or ctx.min() < 0 or ctx.max() >= self.vocab_size:
            raise UserError(f"a context must be a non-empty sequence of ids in "
                            f"0..{self.vocab_size - 1}")
        if ctx.size >= self.max_positions:
            raise UserError(f"a context of {ctx.size} tokens leaves no position for a tree "
                            f"(the model has {self.max_positions})")
        old = self._ctx
        common = 0
        lim = min(old.size, ctx.size)
        if lim:
            diff = np.flatnonzero(old[:lim] != ctx[:lim])
            common = int(diff[0]) if diff.size else lim
        self._m = 0
        self._parent = np.empty(0, np.int64)
        self._depth = np.empty(0, np.int64)
        if common == ctx.size and old.size == ctx.size and self._last is not None:
            return self._last.copy()
        common = min(common, ctx.size - 1)
        for i in range(self.nl):
            self._kc[i] = self._grow(self._kc[i], ctx.size)
            self._vc[i] = self._grow(self._vc[i], ctx.size)
        x_last = None
        for a in range(common, ctx.size, _CHUNK):
            b = min(a + _CHUNK, ctx.size)
            pos = np.arange(a, b)
            x = self._embed(ctx[a:b], pos)
            n = b - a
            causal = np.triu(np.ones((n, n), bool), 1)
            grp = self.nh // self.nkv
            mask = np.tile(causal, (grp, 1))
            cs = self._angles(pos)
            for i, L in enumerate(self._layers):
                q, k, v = self._qkv(x, L, cs)
                self._kc[i][:, a:b] = k
                self._vc[i][:, a:b] = v
                s = q @ self._kc[i][:, :b].transpose(0, 2, 1)
                s *= 1.0 / math.sqrt(self.hd)
                s[:, :, a:][:, mask] = -np.inf
                s -= s.max(axis=-1, keepdims=True)
                np.exp(s, out=s)
                s /= s.sum(axis=-1, keepdims=True)
                x = self._attn_out(s @ self._vc[i][:, :b], n, L, x)
            x_last = x[-1:]
            if self._feat.shape[0] < b:
                grown = np.empty((ctx.size, x.shape[1]), x.dtype)
                grown[:a] = self._feat[:a] if a else 0
                self._feat = grown
            self._feat[a:b] = self._norm(x, self._nf)
        self._ctx = ctx.copy()
        self._last = self._logprobs(x_last)[0]
        return self._last.copy()

    def context_features(self, context: np.ndarray) -> np.ndarray:
        """The model's final normed hidden states at every position of ``context`` (what
        an EAGLE-style head reads), shape (len(context), hidden size); starts ``context``
        as :meth:`start` does (a new root)."""
        ctx = np.asarray(context, np.int64).ravel()
        self.start(ctx)
        return self._feat[:ctx.size].copy()

    def embedding(self) -> np.ndarray:
        """The input embedding, (vocab_size, hidden size)."""
        return self._emb

    def lm_head(self) -> np.ndarray:
        """The output projection, (vocab_size, hidden size)."""
        return self._head.T

    def extend(self, parents: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Evaluate a batch of tree nodes; see :meth:`brwsim.backends.base.TreeEvaluator.extend`."""
        par = np.asarray(parents, np.int64).ravel()
        tok = np.asarray(tokens, np.int64).ravel()
        n = tok.size
        m0 = self._m
        if par.size != n or n == 0:
            raise UserError("parents and tokens must be non-empty and of one length")
        if self._ctx.size == 0:
            raise UserError("extend before start: begin a root first")
        if tok.min() < 0 or tok.max() >= self.vocab_size:
            raise UserError(f"tokens must be ids in 0..{self.vocab_size - 1}")
        ids = m0 + np.arange(n)
        if np.any(par < -1) or np.any(par >= ids):
            raise UserError("a node's parent must be -1 or a node appended before it")
        depth = np.empty(n, np.int64)
        for j in range(n):                     # parents may lie in this batch
            p = par[j]
            depth[j] = 1 if p < 0 else (self._depth[p] if p < m0 else depth[p - m0]) + 1
        self._parent = np.concatenate([self._parent, par])
        self._depth = np.concatenate([self._depth, depth])
        pos = self._ctx.size + depth - 1
        if pos.max() >= self.max_positions:
            raise UserError(f"the tree reaches position {int(pos.max())}, beyond the model's "
                            f"{self.max_positions}")
        # the union of the batch's ancestors (and the batch), and each row's own ones
        anc = np.zeros((n, m0 + n), bool)
        anc[np.arange(n), ids] = True
        cur = par.copy()
        rows = np.arange(n)
        while True:
            live = cur >= 0
            if not live.any():
                break
            anc[rows[live], cur[live]] = True
            cur[live] = self._parent[cur[live]]
        cols = np.flatnonzero(anc.any(axis=0))
        hide = np.tile(~anc[:, cols], (self.nh // self.nkv, 1))
        nctx = self._ctx.size
        for i in range(self.nl):
            self._kt[i] = self._grow(self._kt[i], m0 + n)
            self._vt[i] = self._grow(self._vt[i], m0 + n)
        scale = 1.0 / math.sqrt(self.hd)
        x = self._embed(tok, pos)
        cs = self._angles(pos)
        for i, L in enumerate(self._layers):
            q, k, v = self._qkv(x, L, cs)
            self._kt[i][:, m0:m0 + n] = k
            self._vt[i][:, m0:m0 + n] = v
            kt = self._kt[i][:, cols]
            vt = self._vt[i][:, cols]
            s1 = q @ self._kc[i][:, :nctx].transpose(0, 2, 1)
            s2 = q @ kt.transpose(0, 2, 1)
            s2[:, hide] = -np.inf
            mx = np.maximum(s1.max(axis=-1, keepdims=True), s2.max(axis=-1, keepdims=True))
            s1 -= mx
            s2 -= mx
            s1 *= scale
            s2 *= scale
            np.exp(s1, out=s1)
            np.exp(s2, out=s2)
            tot = s1.sum(axis=-1, keepdims=True) + s2.sum(axis=-1, keepdims=True)
            o = s1 @ self._vc[i][:, :nctx]
            o += s2 @ vt
            o /= tot
            x = self._attn_out(o, n, L, x)
        self._m = m0 + n
        self.nodes += n
        return self._logprobs(x)
