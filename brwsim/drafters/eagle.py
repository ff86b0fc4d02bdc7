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
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * g


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
        self._dt = dt
        self._inv = 1.0 / self.theta ** (np.arange(0, self.hd, 2, dtype=np.float64) / self.hd)
        self._reset()

    def _reset(self) -> None:
        self.k = np.zeros((0, self.nkv, self.hd), self._dt)
        self.v = np.zeros((0, self.nkv, self.hd), self._dt)
        self.n_ctx = 0
        self.root_feat = np.zeros(self.d, self._dt)
        # per tree node: predicted feature, depth, and the cache rows it attends to
        # beyond the context (its ancestors' rows and its own)
        self.node_feat: list[np.ndarray] = []
        self.node_depth: list[int] = []
        self.node_rows: list[np.ndarray] = []

    def _rope(self, x: np.ndarray, pos: np.ndarray) -> np.ndarray:
        ang = pos[:, None].astype(np.float64) * self._inv[None, :]
        cos = np.concatenate([np.cos(ang)] * 2, axis=-1).astype(self._dt)[:, None, :]
        sin = np.concatenate([np.sin(ang)] * 2, axis=-1).astype(self._dt)[:, None, :]
        half = self.hd // 2
        rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * cos + rot * sin

    def _layer(self, tok: np.ndarray, feat: np.ndarray, pos: np.ndarray,
               visible: list[np.ndarray]) -> np.ndarray:
        """Predicted features of new positions; ``visible[i]`` lists the cache rows (after
        this call's rows are appended) that row i attends to."""
        x = np.concatenate([self.embed[tok].astype(self._dt), feat.astype(self._dt)], axis=1)
        h = x @ self.fc_t
        qkv = h @ self.wqkv_t
        nq, nk = self.nh * self.hd, self.nkv * self.hd
        q = self._rope(qkv[:, :nq].reshape(-1, self.nh, self.hd), pos)
        k = self._rope(qkv[:, nq:nq + nk].reshape(-1, self.nkv, self.hd), pos)
        v = qkv[:, nq + nk:].reshape(-1, self.nkv, self.hd)
        self.k = np.concatenate([self.k, k])
        self.v = np.concatenate([self.v, v])
        rep = self.nh // self.nkv
        n, m = len(tok), self.k.shape[0]
        seen = np.zeros((n, m), dtype=bool)                 # row i attends to visible[i]
        for i, rows in enumerate(visible):
            seen[i, rows] = True
        # grouped-query attention as BLAS products: (kv head, query row x rep, key row)
        qg = q.reshape(n, self.nkv, rep, self.hd).transpose(1, 0, 2, 3).reshape(self.nkv, n * rep, self.hd)
        s = qg @ self.k.transpose(1, 2, 0) * (1.0 / np.sqrt(self.hd))
        s = np.where(np.repeat(seen, rep, axis=0)[None], s, -np.inf)
        s -= s.max(axis=-1, keepdims=True)
        e = np.exp(s)
        e /= e.sum(axis=-1, keepdims=True)
        att = (e @ self.v.transpose(1, 0, 2)).reshape(self.nkv, n, rep, self.hd)
        att = att.transpose(1, 0, 2, 3).reshape(n, self.nh, self.hd)
        h = h + att.reshape(len(tok), -1) @ self.wo_t
        gu = _rms(h, self.g_post, self.eps) @ self.wgu_t
        ff = gu.shape[1] // 2
        g = gu[:, :ff]
        return h + (g / (1.0 + np.exp(-g)) * gu[:, ff:]) @ self.wd_t

    def _logprobs(self, feat: np.ndarray) -> np.ndarray:
        z = feat @ self.lm_d_t
        z -= z.max(axis=-1, keepdims=True)
        z -= np.log(np.exp(z).sum(axis=-1, keepdims=True))
        out = np.full((feat.shape[0], self.vocab_size), -np.inf)
        out[:, self.draft_vocab] = z
        return out

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
        pos = np.arange(n - 1)
        vis = [np.arange(i + 1) for i in range(n - 1)]
        out = self._layer(ctx[1:], features[:n - 1], pos, vis)
        self.n_ctx = n - 1
        self.root_feat = out[-1]
        return self._logprobs(out[-1:])[0]

    def extend(self, parents: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Draft log-probabilities after each new node (see :class:`TreeEvaluator`).

        A node whose parent is in the same batch is evaluated in a later wave, after it.
        """
        parents = np.asarray(parents, dtype=np.int64)
        tokens = np.asarray(tokens, dtype=np.int64)
        base = len(self.node_feat)
        if parents.size and (parents.min() < -1 or np.any(parents >= base + np.arange(parents.size))):
            raise UserError("EAGLE head: a node's parent must be the root or an earlier node")
        ctx_rows = np.arange(self.n_ctx)
        done = np.zeros(tokens.size, dtype=bool)
        while not done.all():
            local = parents - base
            ready = np.flatnonzero(~done & ((local < 0) | done[np.clip(local, 0, None)]))
            feats, pos, anc = [], [], []
            for i in ready:
                p = parents[i]
                if p < 0:
                    feats.append(self.root_feat)
                    depth, rows = 1, np.empty(0, np.int64)
                else:
                    feats.append(self.node_feat[p])
                    depth, rows = self.node_depth[p] + 1, self.node_rows[p]
                pos.append(self.n_ctx - 1 + depth)
                anc.append((depth, rows))
            own = self.k.shape[0] + np.arange(ready.size)
            visible = [np.concatenate([ctx_rows, rows, [own[j]]]).astype(np.int64)
                       for j, (_, rows) in enumerate(anc)]
            res = self._layer(tokens[ready], np.array(feats), np.array(pos, np.int64), visible)
            for j, i in enumerate(ready):
                # ids are assigned in call order: fill the slots of this batch lazily
                while len(self.node_feat) <= base + i:
                    self.node_feat.append(None)
                    self.node_depth.append(0)
                    self.node_rows.append(None)
                self.node_feat[base + i] = res[j]
                self.node_depth[base + i] = anc[j][0]
                self.node_rows[base + i] = np.append(anc[j][1], own[j])
            done[ready] = True
        return self._logprobs(np.array(self.node_feat[base:]))
