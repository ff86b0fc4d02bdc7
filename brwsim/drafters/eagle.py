"""An EAGLE-style draft head, evaluated in numpy (no torch at run time).

The head (trained by ``experiments/train_eagle.py``) reads, at a position whose token is
x_{i+1}, the pair [embedding(x_{i+1}) ; f_i] where f_i is the target's final normed hidden
state at position i; one linear layer (2d -> d) and one Llama decoder layer (RoPE, grouped-
query attention, RMSNorm before the MLP, SwiGLU; no norm before attention and none after
the layer, as in EAGLE) predict f_{i+1}; the target's own LM head, restricted to the
head's draft vocabulary, turns a predicted feature into the draft distribution.

Drafting follows EAGLE at inference time. For a context x_0..x_{n-1} the head runs over
the pairs (x_{i+1}, f_i), i = 0..n-2, with the target's TRUE features (positions 0..n-2);
the output at n-2 is the predicted feature at the root, whose distribution proposes the
depth-1 tokens. A tree node v of depth k with token x_v reads (x_v, f̂_parent) at position
n-2+k, attending to the whole context and to its own ancestors only, so deeper levels run
on the head's own predicted features. :class:`EagleHead` implements the
:class:`~brwsim.backends.base.TreeEvaluator` interface with ``start(context)`` taking the
target's features beside the tokens.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from brwsim.backends.numpyforward import ancestor_mask, rotate_half
from brwsim.errors import UserError
from brwsim.models.hfconfig import read_config

__all__ = ["EagleHead", "load_head", "HEAD_FILES"]

#: Files of a head's folder.
HEAD_FILES = ("config.json", "model.safetensors")
_LAYER = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
          "self_attn.o_proj.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight",
          "mlp.up_proj.weight", "mlp.down_proj.weight")


def load_head(folder: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read and check a head folder (``config.json`` + ``model.safetensors``)."""
    from safetensors.numpy import load_file

    cfg = read_config(folder, "EAGLE head")
    if cfg.get("architecture") != "eagle":
        raise UserError(f"EAGLE head {folder!r}: config.json does not describe an eagle head")
    for key in ("hidden_size", "intermediate_size", "num_attention_heads",
                "num_key_value_heads", "vocab_size"):
        v = cfg.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 < v < 1 << 24:
            raise UserError(f"EAGLE head {folder!r}: {key} must be a positive integer, got {v!r}")
    try:
        w = load_file(os.path.join(folder, "model.safetensors"))
    except Exception as exc:                        # safetensors raises its own error types
        raise UserError(f"EAGLE head {folder!r}: model.safetensors unreadable ({exc})") from None
    d, ff = cfg["hidden_size"], cfg["intermediate_size"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    if d % nh or nh % nkv:
        raise UserError(f"EAGLE head {folder!r}: heads {nh}/{nkv} do not divide hidden {d}")
    hd = d // nh
    want = {"fc.weight": (d, 2 * d), "layer.self_attn.q_proj.weight": (nh * hd, d),
            "layer.self_attn.k_proj.weight": (nkv * hd, d),
            "layer.self_attn.v_proj.weight": (nkv * hd, d),
            "layer.self_attn.o_proj.weight": (d, nh * hd),
            "layer.post_attention_layernorm.weight": (d,),
            "layer.mlp.gate_proj.weight": (ff, d), "layer.mlp.up_proj.weight": (ff, d),
            "layer.mlp.down_proj.weight": (d, ff)}
    for name, shape in want.items():
        if name not in w or tuple(w[name].shape) != shape:
            got = tuple(w[name].shape) if name in w else "missing"
            raise UserError(f"EAGLE head {folder!r}: tensor {name} should be {shape}, got {got}")
    dv = w.get("draft_vocab")
    if dv is None or dv.ndim != 1 or dv.size == 0 or dv.min() < 0 or dv.max() >= cfg["vocab_size"]:
        raise UserError(f"EAGLE head {folder!r}: draft_vocab missing or outside the vocabulary")
    return cfg, w


def _rms(x: np.ndarray, g: np.ndarray, eps: float) -> np.ndarray:
    ms = np.einsum("ij,ij->i", x, x)
    ms *= 1.0 / x.shape[1]
    ms += eps
    h = x * (1.0 / np.sqrt(ms))[:, None]
    h *= g
    return h


class EagleHead:
    """The head as a draft model over one root's tree.

    Parameters
    ----------
    folder : str
        The head's folder (:func:`load_head`).
    embed : numpy.ndarray
        The target's input embedding, (vocab_size, hidden_size).
    lm_head : numpy.ndarray
        The target's output projection, (vocab_size, hidden_size).
    dtype : str
        ``"float32"`` or ``"float64"``.

    Notes
    -----
    Cache rows: the context's pairs take rows 0 .. n_ctx - 1 and tree node j (ids in call
    order) row n_ctx + j, so a node's visible rows are the context and the rows of its
    ancestors and itself. Every ``extend`` runs its nodes in waves (a node after its
    parent), each wave one pass of whole-wave products.
    """

    def __init__(self, folder: str, embed: np.ndarray, lm_head: np.ndarray,
                 dtype: str = "float32") -> None:
        cfg, w = load_head(folder)
        d = cfg["hidden_size"]
        for name, a in (("embedding", embed), ("LM head", lm_head)):
            if a.ndim != 2 or a.shape != (cfg["vocab_size"], d):
                raise UserError(f"EAGLE head {folder!r} (hidden {d}, vocabulary "
                                f"{cfg['vocab_size']}) does not fit the target's {name} "
                                f"{tuple(a.shape)}")
        if dtype not in ("float32", "float64"):
            raise UserError(f"EAGLE head: dtype must be float32 or float64, got {dtype!r}")
        dt = np.dtype(dtype)
        self.dtype = dtype
        self.vocab_size = int(cfg["vocab_size"])
        self.max_positions = 1 << 20
        self.d, self.nh, self.nkv = d, cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.hd = d // self.nh
        self.eps = float(cfg.get("rms_norm_eps", 1e-5))
        self.theta = float(cfg.get("rope_theta", 10000.0))
        self.draft_vocab = np.asarray(w["draft_vocab"], dtype=np.int64)
        f = {k: np.ascontiguousarray(np.asarray(v, dtype=dt)) for k, v in w.items()
             if k != "draft_vocab"}
        self.fc_t = np.ascontiguousarray(f["fc.weight"].T)          # (2d, d)
        p = "layer."
        self.wqkv_t = np.ascontiguousarray(np.concatenate(
            [f[p + "self_attn.q_proj.weight"], f[p + "self_attn.k_proj.weight"],
             f[p + "self_attn.v_proj.weight"]]).T)
        self.wo_t = np.ascontiguousarray(f[p + "self_attn.o_proj.weight"].T)
        self.g_post = f[p + "post_attention_layernorm.weight"]
        self.wgu_t = np.ascontiguousarray(np.concatenate(
            [f[p + "mlp.gate_proj.weight"], f[p + "mlp.up_proj.weight"]]).T)
        self.wd_t = np.ascontiguousarray(f[p + "mlp.down_proj.weight"].T)
        self.embed = embed
        self.lm_d_t = np.ascontiguousarray(np.asarray(lm_head[self.draft_vocab], dtype=dt).T)
        # token id -> its column in the draft vocabulary, or the -inf column past its end
        self._widen = np.full(self.vocab_size, self.draft_vocab.size, np.int64)
        self._widen[self.draft_vocab] = np.arange(self.draft_vocab.size)
        self._dt = dt
        self._scale = dt.type(1.0 / np.sqrt(self.hd))
        self._inv = 1.0 / self.theta ** (np.arange(0, self.hd, 2, dtype=np.float64) / self.hd)
        self._cos = self._sin = np.empty((0, 1, self.hd // 2), dt)
        self._reset()

    def _reset(self) -> None:
        self.n_ctx = 0
        self.root_feat = np.zeros(self.d, self._dt)
        self._k = np.empty((self.nkv, 0, self.hd), self._dt)   # cache rows (see Notes)
        self._v = np.empty((self.nkv, 0, self.hd), self._dt)
        # per tree node: predicted feature, depth and parent (ids in call order)
        self.node_feat = np.empty((0, self.d), self._dt)
        self._depth = np.empty(0, np.int64)
        self._parent = np.empty(0, np.int64)
        self._m = 0

    def _reserve(self, rows: int, nodes: int) -> None:
        """Room for ``rows`` cache rows and ``nodes`` tree nodes (contents kept)."""
        if self._k.shape[1] < rows:
            cap = max(rows, 2 * self._k.shape[1], 256)
            for name in ("_k", "_v"):
                old = getattr(self, name)
                new = np.empty((self.nkv, cap, self.hd), self._dt)
                new[:, :old.shape[1]] = old
                setattr(self, name, new)
        if self.node_feat.shape[0] < nodes:
            cap = max(nodes, 2 * self.node_feat.shape[0], 64)
            feat = np.empty((cap, self.d), self._dt)
            feat[:self._m] = self.node_feat[:self._m]
            self.node_feat = feat
            self._depth = np.resize(self._depth, cap)
            self._parent = np.resize(self._parent, cap)

    def _angles(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """cos and sin (n, 1, hd/2) of the rotary angles at ``pos`` (from a table computed
        in float64, rounded once)."""
        top = int(pos.max()) + 1
        if self._cos.shape[0] < top:
            size = max(top, 2 * self._cos.shape[0], 512)
            ang = np.arange(size, dtype=np.float64)[:, None] * self._inv
            self._cos = np.cos(ang).astype(self._dt)[:, None, :]
            self._sin = np.sin(ang).astype(self._dt)[:, None, :]
        return self._cos[pos], self._sin[pos]

    def _rope(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """(n, heads, hd) rows rotated (:func:`~brwsim.backends.numpyforward.rotate_half`)."""
        return rotate_half(x, cos, sin)

    def _layer(self, tok: np.ndarray, feat: np.ndarray, pos: np.ndarray, at: Any,
               full: int, rows: Any, bias: np.ndarray) -> np.ndarray:
        """Predicted features of new positions, whose K/V go to the cache rows ``at`` (a
        slice or index array): row j attends to every cache row below ``full`` and to the
        rows ``rows`` (a slice or index array) under the additive mask ``bias`` ((n rep,
        len(rows)): 0 or -inf; query rows token-major, j rep + r)."""
        n = tok.size
        nh, nkv, hd = self.nh, self.nkv, self.hd
        rep = nh // nkv
        x = np.empty((n, 2 * self.d), self._dt)
        x[:, :self.d] = self.embed[tok]
        x[:, self.d:] = feat
        h = x @ self.fc_t
        qkv = h @ self.wqkv_t
        nq, nk = nh * hd, nkv * hd
        cos, sin = self._angles(pos)
        qk = self._rope(qkv[:, :nq + nk].reshape(n, nh + nkv, hd), cos, sin)
        self._k[:, at] = qk[:, nh:].transpose(1, 0, 2)
        self._v[:, at] = qkv[:, nq + nk:].reshape(n, nkv, hd).transpose(1, 0, 2)
        qg = np.empty((nkv, n * rep, hd), self._dt)
        np.multiply(qk[:, :nh].reshape(n, nkv, rep, hd).transpose(1, 0, 2, 3), self._scale,
                    out=qg.reshape(nkv, n, rep, hd))
        s = np.empty((nkv, n * rep, full + bias.shape[1]), self._dt)
        sf, st = s[:, :, :full], s[:, :, full:]
        np.matmul(qg, self._k[:, :full].transpose(0, 2, 1), out=sf)
        np.matmul(qg, self._k[:, rows].transpose(0, 2, 1), out=st)
        st += bias
        s -= s.max(axis=-1, keepdims=True)
        np.exp(s, out=s)
        tot = s.sum(axis=-1, keepdims=True)
        o = sf @ self._v[:, :full]
        o += st @ self._v[:, rows]
        o /= tot
        h += o.reshape(nkv, n, rep, hd).transpose(1, 0, 2, 3).reshape(n, nq) @ self.wo_t
        gu = _rms(h, self.g_post, self.eps) @ self.wgu_t
        ff = gu.shape[1] // 2
        g = gu[:, :ff]
        t = np.negative(g)
        np.exp(t, out=t)
        t += 1.0
        np.divide(g, t, out=t)                   # silu(gate)
        t *= gu[:, ff:]
        h += t @ self.wd_t
        return h

    def _logprobs(self, feat: np.ndarray) -> np.ndarray:
        z = feat @ self.lm_d_t
        z -= z.max(axis=-1, keepdims=True)
        e = np.exp(z)
        z -= np.log(e.sum(axis=-1, keepdims=True))
        # widened to the whole vocabulary by one gather: column ``dv`` holds -inf
        ext = np.empty((z.shape[0], z.shape[1] + 1))
        ext[:, :-1] = z
        ext[:, -1] = -np.inf
        return np.take(ext, self._widen, axis=1)

    def start(self, context: np.ndarray, features: np.ndarray | None = None) -> np.ndarray:
        """Run the head over a context with the target's true features.

        Parameters
        ----------
        context : numpy.ndarray
            int64 token ids x_0..x_{n-1}, n >= 2.
        features : numpy.ndarray
            The target's final normed hidden states at positions 0..n-2 (or 0..n-1; the
            last is not read), shape (>= n-1, hidden_size).

        Returns
        -------
        numpy.ndarray
            float64 (vocab_size,): the draft log-probabilities of the depth-1 tokens
            (``-inf`` outside the draft vocabulary).
        """
        ctx = np.asarray(context, dtype=np.int64)
        if features is None:
            raise UserError("an EAGLE head needs the target's features of its context "
                            "(kind=eagle works on transformer targets only)")
        n = ctx.size
        if n < 2 or features.ndim != 2 or features.shape[0] < n - 1 or features.shape[1] != self.d:
            raise UserError(f"EAGLE head: a context of {n} tokens needs at least 2 tokens and "
                            f"features of shape ({n - 1}, {self.d}), got {features.shape}")
        self._reset()
        m = n - 1
        self._reserve(m + 64, 64)
        causal = np.repeat(np.triu(np.full((m, m), -np.inf, self._dt), 1), self.nh // self.nkv,
                           axis=0)
        out = self._layer(ctx[1:], features[:m], np.arange(m), slice(0, m), 0, slice(0, m),
                          causal)
        self.n_ctx = m
        self.root_feat = out[-1]
        return self._logprobs(out[-1:])[0]

    def extend(self, parents: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Draft log-probabilities after each new node (see :class:`TreeEvaluator`).

        A node whose parent is in the same batch is evaluated in a later wave, after it.
        """
        parents = np.asarray(parents, dtype=np.int64).ravel()
        tokens = np.asarray(tokens, dtype=np.int64).ravel()
        base, n = self._m, tokens.size
        ids = base + np.arange(n)
        if parents.size != n or (n and (parents.min() < -1 or np.any(parents >= ids))):
            raise UserError("EAGLE head: a node's parent must be the root or an earlier node")
        if n == 0:
            return np.empty((0, self.vocab_size))
        self._reserve(self.n_ctx + base + n, base + n)
        self._parent[base:base + n] = parents
        rep = self.nh // self.nkv
        done = np.zeros(n, dtype=bool)
        while not done.all():
            local = parents - base
            ready = np.flatnonzero(~done & ((local < 0) | done[np.clip(local, 0, None)]))
            par = parents[ready]
            top = par < 0
            feats = self.node_feat[np.where(top, 0, par)]
            feats[top] = self.root_feat
            depth = np.where(top, 1, self._depth[np.maximum(par, 0)] + 1)
            node = base + ready
            self._depth[node] = depth
            # each ready node's ancestors and itself: the wave's union, masked per row
            anc = ancestor_mask(self._parent, node, base + n)
            cols = np.flatnonzero(anc.any(axis=0))
            bias = np.repeat(np.where(anc[:, cols], self._dt.type(0), self._dt.type(-np.inf)),
                             rep, axis=0)
            self.node_feat[node] = self._layer(tokens[ready], feats, self.n_ctx - 1 + depth,
                                               self.n_ctx + node, self.n_ctx, self.n_ctx + cols,
                                               bias)
            done[ready] = True
        self._m = base + n
        return self._logprobs(self.node_feat[base:base + n])
