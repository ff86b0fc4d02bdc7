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

Root slots: the evaluator holds any number of roots at once, each with its own context
and K/V cache (:meth:`~NumpyEvaluator.use_slot` picks the one ``start`` and ``extend``
act on). :meth:`~NumpyEvaluator.extend_slots` evaluates batches of several roots in one
pass: every product with the weights runs over all their rows (the weights are read from
memory once for all of them, which is what a round of a few dozen nodes is bound by),
attention per root.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from typing import Any, NamedTuple, Sequence

import numpy as np

from brwsim.errors import UserError
from brwsim.models.hfconfig import read_config

__all__ = ["NumpyEvaluator", "ancestor_mask", "load_hf_weights", "rotate_half"]

_CHUNK = 256          # most context rows per block of start()
_SCORES = 1 << 24     # most attention scores one block of start() holds
_OWN_RATIO = 4        # a batch's tree keys per row, beyond which rows read their own paths
_DTYPES = {"float32": np.float32, "float64": np.float64}
_OUT_BLOCKS = 2       # float64 output blocks an evaluator keeps for reuse
_OUT_ROWS = 256       # rows of the largest output block kept (larger outputs are fresh)
_EXP_ROWS = 16        # rows of the log-softmax's exponentials computed at a time


def _unheld_count() -> int:
    """``sys.getrefcount`` of a pool entry that nothing outside the pool references (the
    same expression as :meth:`_Outputs.block`'s, so the count is the interpreter's own)."""
    pool = [np.empty(1)]
    return sys.getrefcount(pool[0])


_UNHELD = _unheld_count()


class _Outputs:
    """The float64 blocks that :meth:`NumpyEvaluator.extend` returns log-probabilities in,
    reused once the caller holds no reference to a block or to any view of it (a view's
    ``base`` is its block, so a row still held keeps its whole block out of reuse).

    A (rows, vocab) float64 block is 0.4 MB a row: a fresh one per call would be mapped
    from the operating system and faulted in page by page on first write, which cost more
    than the LM head's product at a few dozen rows.
    """

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab
        self.pool: list[np.ndarray] = []

    def block(self, rows: int) -> np.ndarray:
        """A (rows, vocab) float64 array: the first rows of a kept block nobody else holds,
        else a new array. Kept blocks have ``_OUT_ROWS`` rows whatever the call asks (a
        block's pages are faulted in only as its rows are first written, so one never
        needs to be replaced by a larger one); larger outputs are new arrays."""
        if rows > _OUT_ROWS:
            return np.empty((rows, self.vocab))
        pool = self.pool
        for i in range(len(pool)):
            if sys.getrefcount(pool[i]) == _UNHELD:
                return pool[i][:rows]
        if len(pool) == _OUT_BLOCKS:
            return np.empty((rows, self.vocab))
        pool.append(np.empty((_OUT_ROWS, self.vocab)))
        return pool[-1][:rows]


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


def rotate_half(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """(n, heads, hd) rows rotated by RoPE angles whose cosines and sines broadcast over
    them (the rotate_half convention: dimensions i and i + hd/2 pair), as a new array."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    out = np.empty(x.shape, x.dtype)
    o1, o2 = out[..., :half], out[..., half:]
    np.multiply(x1, cos, out=o1)
    o1 -= x2 * sin
    np.multiply(x2, cos, out=o2)
    o2 += x1 * sin
    return out


def ancestor_mask(parent: np.ndarray, nodes: np.ndarray, width: int) -> np.ndarray:
    """Which tree nodes each of ``nodes`` attends to: its ancestors and itself.

    Parameters
    ----------
    parent : numpy.ndarray
        int64 parent of every node so far (``-1``: the root), ``nodes`` included.
    nodes : numpy.ndarray
        int64 ids of the rows.
    width : int
        Number of node ids (columns), above every id in ``nodes``.

    Returns
    -------
    numpy.ndarray
        bool (len(nodes), width).
    """
    k = nodes.size
    anc = np.zeros((k, width), bool)
    rows = np.arange(k)
    anc[rows, nodes] = True
    cur = parent[nodes]
    while True:
        live = np.flatnonzero(cur >= 0)
        if not live.size:
            return anc
        anc[rows[live], cur[live]] = True
        cur[live] = parent[cur[live]]


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


class _Root:
    """One root's state: its context, the K/V cache of each layer (kv heads, rows,
    head_dim) holding the context's rows then the tree's nodes in id order (node j at row
    len(context) + j), each node's parent and depth, and the context's final normed
    hidden states."""

    def __init__(self, ev: "NumpyEvaluator") -> None:
        dt = ev._dt
        self.ctx = np.empty(0, np.int64)
        self.last: np.ndarray | None = None
        self.feat = np.empty((0, ev.d), dt)
        self.k = [np.empty((ev.nkv, 0, ev.hd), dt) for _ in range(ev.nl)]
        self.v = [np.empty((ev.nkv, 0, ev.hd), dt) for _ in range(ev.nl)]
        self.parent = np.empty(0, np.int64)
        self.depth = np.empty(0, np.int64)
        self.m = 0

    def reserve(self, rows: int) -> None:
        """Room for ``rows`` cache rows in every layer (rows kept, capacity doubled)."""
        if self.k[0].shape[1] >= rows:
            return
        cap = max(rows, 2 * self.k[0].shape[1], 64)
        for cache in (self.k, self.v):
            for i, old in enumerate(cache):
                new = np.empty((old.shape[0], cap, old.shape[2]), old.dtype)
                new[:, :old.shape[1]] = old
                cache[i] = new


class _Segment(NamedTuple):
    """Rows ``lo:hi`` of a batch, all of one root: written to its cache rows ``at`` ..;
    attending to its cache rows below ``full`` and to the rows ``tree`` names (see
    :meth:`NumpyEvaluator._layer`), with ``s`` the scores' scratch."""

    root: _Root
    lo: int
    hi: int
    at: int
    full: int
    tree: tuple
    s: np.ndarray


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
        self._scale = dt(1.0 / math.sqrt(self.hd))
        self._roots = [_Root(self)]
        self._outs = _Outputs(self.vocab_size)
        # the head's products and their exponentials, reused (pages are faulted in only
        # as rows are first used)
        self._logits = np.empty((_OUT_ROWS, self.vocab_size), dt)
        self._exp = np.empty((_EXP_ROWS, self.vocab_size), dt)
        self._r = self._roots[0]                   # the root start and extend act on

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
        # a tied head reads the embedding's own array, transposed (one copy of it)
        self._head = self._emb.T if cfg.get("tie_word_embeddings", True) is not False else \
            c(_get(w, ("lm_head.weight",), (v, d)).T)
        self._nf = (c(g("ln_f.weight", (d,))), c(g("ln_f.bias", (d,))))
        self._layers = []
        for i in range(self.nl):
            h = f"h.{i}."
            self._layers.append((
                c(g(h + "ln_1.weight", (d,))), c(g(h + "ln_1.bias", (d,))),
                c(g(h + "attn.c_attn.weight", (d, 3 * d))), c(g(h + "attn.c_attn.bias", (3 * d,))),
                c(g(h + "attn.c_proj.weight", (d, d))), c(g(h + "attn.c_proj.bias", (d,))),
                c(g(h + "ln_2.weight", (d,))), c(g(h + "ln_2.bias", (d,))),
                c(g(h + "mlp.c_fc.weight", (d, ff))), c(g(h + "mlp.c_fc.bias", (ff,))),
                c(g(h + "mlp.c_proj.weight", (ff, d))), c(g(h + "mlp.c_proj.bias", (d,)))))
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
        self._head = self._emb.T if cfg.get("tie_word_embeddings", False) is True else \
            c(_get(w, ("lm_head.weight",), (v, d)).T)
        del emb
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
            wqkv = c(np.hstack([wq.T, wk.T, wv.T]))
            del wq, wk, wv
            self._layers.append((
                c(g(h + "input_layernorm.weight", (d,))), None,
                wqkv, None if bq is None else c(bq),
                c(g(h + "self_attn.o_proj.weight", (d, qw)).T), None,
                c(g(h + "post_attention_layernorm.weight", (d,))), None,
                c(np.hstack([g(h + "mlp.gate_proj.weight", (ff, d)).T,
                             g(h + "mlp.up_proj.weight", (ff, d)).T])), None,
                c(g(h + "mlp.down_proj.weight", (d, ff)).T), None))

    # -- pieces of the forward pass -------------------------------------------------------
    def _norm(self, x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
        """LayerNorm (GPT-2) or RMSNorm (Llama) of rows ``x``, as a new array."""
        if self._gpt2:
            xc = x - x.mean(-1, keepdims=True)
            var = (xc * xc).mean(-1, keepdims=True)
            xc /= np.sqrt(var + self.eps)
            xc *= w
            xc += b
            return xc
        ms = np.einsum("ij,ij->i", x, x)
        ms *= 1.0 / x.shape[1]
        ms += self.eps
        h = x * (1.0 / np.sqrt(ms))[:, None]
        h *= w
        return h

    def _angles(self, pos: np.ndarray) -> tuple | None:
        """cos and sin (n, 1, hd/2) of the rotary angles at ``pos`` (float64, then rounded)."""
        if self._gpt2:
            return None
        ang = pos.astype(np.float64)[:, None] * self._inv_freq[None, :]
        return np.cos(ang).astype(self._dt)[:, None, :], np.sin(ang).astype(self._dt)[:, None, :]

    def _rope(self, x: np.ndarray, cs: tuple) -> np.ndarray:
        """(n, heads, hd) rows rotated by the angles ``cs`` (:func:`rotate_half`)."""
        return rotate_half(x, *cs)

    def _mlp(self, h: np.ndarray, L: tuple) -> np.ndarray:
        f = h @ L[8]
        if L[9] is not None:
            f += L[9]
        if not self._gpt2:
            g = f[:, :self.ff]
            t = np.negative(g)
            np.exp(t, out=t)
            t += 1.0
            np.divide(g, t, out=t)               # silu(gate)
            t *= f[:, self.ff:]
            f = t
        elif self.act in ("gelu_new", "gelu_pytorch_tanh"):
            f = 0.5 * f * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (f + 0.044715 * f * f * f)))
        elif self.act == "gelu":
            from scipy.special import erf

            f = 0.5 * f * (1.0 + erf(f / math.sqrt(2.0)))
        else:
            np.maximum(f, 0, out=f)
        out = f @ L[10]
        if L[11] is not None:
            out += L[11]
        return out

    def _layer(self, x: np.ndarray, i: int, cs: tuple | None,
               segments: list[_Segment]) -> np.ndarray:
        """Layer ``i`` over the rows ``x`` (n, d), which it updates in place and returns.

        Each segment's rows belong to one root: their keys and values are written to its
        cache rows ``at`` .. ``at + hi - lo - 1``. Row j attends to every cache row of its
        root below ``full`` and to the cache rows that ``tree`` names under its additive
        mask (0 or -inf): ``("union", rows, bias)``, the rows ``rows`` (a slice or index
        array) for every row, ``bias`` (n grp, len(rows)); or ``("own", idx, bias)``, row
        j's own rows ``idx[j]`` (n, w), ``bias`` (n, 1, w). ``s`` is the scores' scratch,
        (nkv, n grp, full + len(rows) or w). Queries are grouped by key/value head in
        token-major order (row j grp + g of kv head k is query head k grp + g of token
        j). The products with weights run once over all rows (every segment together);
        attention runs per segment.
        """
        L = self._layers[i]
        n = x.shape[0]
        nh, nkv, hd = self.nh, self.nkv, self.hd
        qw, kvd = nh * hd, nkv * hd
        # attention input: norm, then q, k and v of every row in one product
        qkv = self._norm(x, L[0], L[1]) @ L[2]
        if L[3] is not None:
            qkv += L[3]
        if self._gpt2:
            q = qkv[:, :qw].reshape(n, nh, hd)
            k = qkv[:, qw:qw + kvd].reshape(n, nkv, hd)
        else:                                     # RoPE on queries and keys
            qk = self._rope(qkv[:, :qw + kvd].reshape(n, nh + nkv, hd), cs)
            q, k = qk[:, :nh], qk[:, nh:]
        v = qkv[:, qw + kvd:].reshape(n, nkv, hd)
        a = np.empty((n, qw), self._dt)
        for seg in segments:
            lo, hi = seg.lo, seg.hi
            a[lo:hi] = self._attend(q[lo:hi], k[lo:hi], v[lo:hi], seg.root.k[i],
                                    seg.root.v[i], seg)
        # attention output projection and residual
        y = a @ L[4]
        if L[5] is not None:
            y += L[5]
        x += y
        # feed-forward block and residual
        x += self._mlp(self._norm(x, L[6], L[7]), L)
        return x

    def _attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, K: np.ndarray,
                V: np.ndarray, seg: _Segment) -> np.ndarray:
        """Attention of one segment's rows (queries ``q`` (n, heads, hd), keys and values
        ``k``, ``v`` (n, kv heads, hd), written to the cache ``K``, ``V`` first) as (n,
        heads hd): softmax of the scaled scores over the visible cache rows."""
        n = q.shape[0]
        nkv, hd = self.nkv, self.hd
        grp = self.nh // nkv
        at, full, s = seg.at, seg.full, seg.s
        K[:, at:at + n] = k.transpose(1, 0, 2)
        V[:, at:at + n] = v.transpose(1, 0, 2)
        qg = np.empty((nkv, n * grp, hd), self._dt)
        np.multiply(q.reshape(n, nkv, grp, hd).transpose(1, 0, 2, 3), self._scale,
                    out=qg.reshape(nkv, n, grp, hd))
        sf, st = s[:, :, :full], s[:, :, full:]
        np.matmul(qg, K[:, :full].transpose(0, 2, 1), out=sf)
        kind, rows, bias = seg.tree
        if kind == "union":
            np.matmul(qg, K[:, rows].transpose(0, 2, 1), out=st)
            st += bias
        else:
            st = st.reshape(nkv, n, grp, -1)
            np.matmul(qg.reshape(nkv, n, grp, hd), K[:, rows].transpose(0, 1, 3, 2), out=st)
            st += bias
        s -= s.max(axis=-1, keepdims=True)
        np.exp(s, out=s)
        tot = s.sum(axis=-1, keepdims=True)
        o = sf @ V[:, :full]
        if kind == "union":
            o += st @ V[:, rows]
        else:
            o.reshape(nkv, n, grp, hd)[...] += st @ V[:, rows]
        o /= tot
        return o.reshape(nkv, n, grp, hd).transpose(1, 0, 2, 3).reshape(n, nkv * grp * hd)

    def _embed(self, tokens: np.ndarray, pos: np.ndarray) -> np.ndarray:
        x = self._emb[tokens]
        if self._gpt2:
            x += self._wpe[pos]
        return x

    def _logprobs(self, h: np.ndarray) -> np.ndarray:
        """float64 log-softmax of the head's logits of final normed rows ``h``, in an
        output block of :class:`_Outputs`; the logits (at most ``_OUT_ROWS`` rows at a
        time) and their exponentials in the evaluator's own scratch."""
        n = h.shape[0]
        out = self._outs.block(n)
        rows = min(n, _OUT_ROWS)
        total = np.empty((rows, 1), self._dt)
        for a in range(0, n, rows):
            b = min(a + rows, n)
            z = np.matmul(h[a:b], self._head, out=self._logits[:b - a])
            m = z.max(axis=1, keepdims=True)
            for c in range(0, b - a, _EXP_ROWS):
                d = min(c + _EXP_ROWS, b - a)
                e = np.subtract(z[c:d], m[c:d], out=self._exp[:d - c])
                np.exp(e, out=e)
                e.sum(axis=1, keepdims=True, out=total[c:d])
            lse = m.astype(np.float64) + np.log(total[:b - a].astype(np.float64))
            np.subtract(z, lse, out=out[a:b])
        return out

    # -- the interface --------------------------------------------------------------------
    @property
    def slot(self) -> int:
        """The root slot that :meth:`start`, :meth:`extend` and :meth:`context_features`
        act on (0 unless :meth:`use_slot` chose another)."""
        return self._roots.index(self._r)

    def use_slot(self, slot: int) -> None:
        """Make root slot ``slot`` the current one (slots are created as needed, each with
        its own context and K/V cache; the weights are shared). Several roots, each in
        its own slot, can then extend their trees in one pass (:meth:`extend_slots`)."""
        if slot < 0:
            raise UserError(f"a root slot is a non-negative integer, got {slot}")
        while len(self._roots) <= slot:
            self._roots.append(_Root(self))
        self._r = self._roots[slot]

    def start(self, context: np.ndarray) -> np.ndarray:
        """Begin a root in the current slot: the context's K/V (reusing the common prefix
        with the slot's last context) and the log-probabilities after it; see
        :meth:`brwsim.backends.base.TreeEvaluator.start`.

        The context runs in blocks of up to ``_CHUNK`` rows, each one pass per layer of
        whole-block products (causal attention over the block and every row before it).
        """
        ctx = np.asarray(context, np.int64).ravel()
        if ctx.size == 0 or ctx.min() < 0 or ctx.max() >= self.vocab_size:
            raise UserError(f"a context must be a non-empty sequence of ids in "
                            f"0..{self.vocab_size - 1}")
        if ctx.size >= self.max_positions:
            raise UserError(f"a context of {ctx.size} tokens leaves no position for a tree "
                            f"(the model has {self.max_positions})")
        r = self._r
        old = r.ctx
        common = 0
        lim = min(old.size, ctx.size)
        if lim:
            diff = np.flatnonzero(old[:lim] != ctx[:lim])
            common = int(diff[0]) if diff.size else lim
        r.m = 0
        r.parent = np.empty(0, np.int64)
        r.depth = np.empty(0, np.int64)
        if common == ctx.size and old.size == ctx.size and r.last is not None:
            return r.last.copy()
        common = min(common, ctx.size - 1)
        nctx = ctx.size
        r.ctx = np.empty(0, np.int64)          # (a failed start leaves no stale root)
        r.reserve(nctx + 64)
        if r.feat.shape[0] < nctx:
            grown = np.empty((nctx, self.d), self._dt)
            grown[:common] = r.feat[:common]
            r.feat = grown
        grp = self.nh // self.nkv
        block = min(_CHUNK, max(64, _SCORES // (self.nh * nctx)))
        h = None
        for a in range(common, nctx, block):
            b = min(a + block, nctx)
            n = b - a
            pos = np.arange(a, b)
            causal = np.repeat(np.triu(np.full((n, n), -np.inf, self._dt), 1), grp, axis=0)
            seg = _Segment(r, 0, n, a, a, ("union", slice(a, b), causal),
                           np.empty((self.nkv, grp * n, b), self._dt))
            cs = self._angles(pos)
            x = self._embed(ctx[a:b], pos)
            for i in range(self.nl):
                x = self._layer(x, i, cs, [seg])
            h = self._norm(x, *self._nf)
            r.feat[a:b] = h
        r.last = self._logprobs(h[-1:])[0].copy()     # (its block goes back to the pool)
        r.ctx = ctx.copy()
        return r.last.copy()

    def context_features(self, context: np.ndarray) -> np.ndarray:
        """The model's final normed hidden states at every position of ``context`` (what
        an EAGLE-style head reads), shape (len(context), hidden size); starts ``context``
        as :meth:`start` does (a new root)."""
        ctx = np.asarray(context, np.int64).ravel()
        self.start(ctx)
        return self._r.feat[:ctx.size].copy()

    def embedding(self) -> np.ndarray:
        """The input embedding, (vocab_size, hidden size)."""
        return self._emb

    def lm_head(self) -> np.ndarray:
        """The output projection, (vocab_size, hidden size)."""
        return self._head.T

    def extend(self, parents: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Evaluate a batch of tree nodes of the current slot's root; see
        :meth:`brwsim.backends.base.TreeEvaluator.extend`.

        The batch runs as one pass per layer of whole-batch products; its attention reads
        the context's cached K/V and, under the tree mask, the K/V of the union of the
        batch's ancestors (and the batch itself).
        """
        return self.extend_slots([(self.slot, parents, tokens)])[0]

    def extend_slots(self, batches: Sequence[tuple[int, np.ndarray, np.ndarray]]
                     ) -> list[np.ndarray]:
        """Evaluate tree nodes of several roots in one pass: ``(slot, parents, tokens)``
        per root (distinct started slots), as :meth:`extend` would for each in turn.

        Every product with the weights runs once over all the batches' rows (the weights
        are read once for all of them); attention runs per root. Returns each batch's
        float64 log-probabilities, (len(tokens), vocab).
        """
        slots = [int(b[0]) for b in batches]
        if not batches or len(set(slots)) != len(slots):
            raise UserError("extend_slots needs batches of distinct root slots")
        plans = [self._plan(b[0], b[1], b[2]) for b in batches]   # all checked first
        segs, toks, poss, lo = [], [], [], 0
        for (r, par, tok, depth, pos, tree, width), slot in zip(plans, slots):
            n = tok.size
            nctx = r.ctx.size
            r.parent = np.concatenate([r.parent, par])
            r.depth = np.concatenate([r.depth, depth])
            r.reserve(nctx + r.m + n)
            s = np.empty((self.nkv, self.nh // self.nkv * n, nctx + width), self._dt)
            segs.append(_Segment(r, lo, lo + n, nctx + r.m, nctx, tree, s))
            toks.append(tok)
            poss.append(pos)
            lo += n
        pos = np.concatenate(poss)
        cs = self._angles(pos)
        x = self._embed(np.concatenate(toks), pos)
        for i in range(self.nl):
            x = self._layer(x, i, cs, segs)
        for seg in segs:
            seg.root.m += seg.hi - seg.lo
        self.nodes += lo
        out = self._logprobs(self._norm(x, *self._nf))
        return [out[seg.lo:seg.hi] for seg in segs]

    def _plan(self, slot: int, parents: np.ndarray, tokens: np.ndarray) -> tuple:
        """One root's batch checked, with its depths, positions and tree attention (the
        root's state is not touched)."""
        if not 0 <= int(slot) < len(self._roots):
            raise UserError(f"root slot {slot} was never used")
        r = self._roots[int(slot)]
        par = np.asarray(parents, np.int64).ravel()
        tok = np.asarray(tokens, np.int64).ravel()
        n = tok.size
        m0 = r.m
        if par.size != n or n == 0:
            raise UserError("parents and tokens must be non-empty and of one length")
        if r.ctx.size == 0:
            raise UserError("extend before start: begin a root first")
        if tok.min() < 0 or tok.max() >= self.vocab_size:
            raise UserError(f"tokens must be ids in 0..{self.vocab_size - 1}")
        ids = m0 + np.arange(n)
        if np.any(par < -1) or np.any(par >= ids):
            raise UserError("a node's parent must be -1 or a node appended before it")
        depth = np.empty(n, np.int64)
        for j in range(n):                     # parents may lie in this batch
            p = par[j]
            depth[j] = 1 if p < 0 else (r.depth[p] if p < m0 else depth[p - m0]) + 1
        nctx = r.ctx.size
        pos = nctx + depth - 1
        if pos.max() >= self.max_positions:
            raise UserError(f"the tree reaches position {int(pos.max())}, beyond the model's "
                            f"{self.max_positions}")
        # the union of the batch's ancestors (and the batch), and each row's own ones
        anc = ancestor_mask(np.concatenate([r.parent, par]), ids, m0 + n)
        cols = np.flatnonzero(anc.any(axis=0))
        grp = self.nh // self.nkv
        rr, c = np.nonzero(anc)                    # each row's visible nodes, row by row
        counts = np.bincount(rr, minlength=n)
        w = int(counts.max())
        zero, hidden = self._dt(0), self._dt(-np.inf)
        if cols.size <= _OWN_RATIO * w:
            # one key block for the batch: the union of its rows' ancestors, masked
            mask = np.repeat(np.where(anc[:, cols], zero, hidden), grp, axis=0)
            return r, par, tok, depth, pos, ("union", nctx + cols, mask), cols.size
        # each row its own keys, padded to the longest path (with the row's own node)
        idx = np.repeat(nctx + ids[:, None], w, axis=1)
        at = np.arange(rr.size) - np.repeat(np.cumsum(counts) - counts, counts)
        idx[rr, at] = nctx + c
        bias = np.full((n, 1, w), hidden, self._dt)
        bias[rr, 0, at] = zero
        return r, par, tok, depth, pos, ("own", idx, bias), w
