"""Tiny random-weight Hugging Face checkpoints and an independent numpy forward pass.

``write_gpt2`` / ``write_llama`` write ``config.json`` + ``model.safetensors`` with the
tensor names and layouts of ``GPT2LMHeadModel`` (Conv1D weights (in, out)) and
``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` (Linear weights (out, in)). ``reference_logits``
recomputes the logits of a whole prefix from scratch in float64 numpy, written from the
architectures' definitions (not from brwsim's kernel): full causal attention over every
position, no cache.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np


def _save(folder: Path, cfg: dict, tensors: dict) -> Path:
    from safetensors.numpy import save_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    save_file({k: np.ascontiguousarray(v, np.float32) for k, v in tensors.items()},
              str(folder / "model.safetensors"))
    return folder


def write_gpt2(folder: Path, *, vocab=257, d=32, layers=2, heads=4, npos=128, seed=0,
               scale=0.3, act="gelu_new") -> Path:
    rng = np.random.default_rng(seed)
    r = lambda *s: rng.normal(0.0, scale, s)  # noqa: E731
    t = {"transformer.wte.weight": r(vocab, d), "transformer.wpe.weight": r(npos, d),
         "transformer.ln_f.weight": 1 + r(d), "transformer.ln_f.bias": r(d)}
    for i in range(layers):
        h = f"transformer.h.{i}."
        t.update({h + "ln_1.weight": 1 + r(d), h + "ln_1.bias": r(d),
                  h + "attn.c_attn.weight": r(d, 3 * d), h + "attn.c_attn.bias": r(3 * d),
                  h + "attn.c_proj.weight": r(d, d), h + "attn.c_proj.bias": r(d),
                  h + "ln_2.weight": 1 + r(d), h + "ln_2.bias": r(d),
                  h + "mlp.c_fc.weight": r(d, 4 * d), h + "mlp.c_fc.bias": r(4 * d),
                  h + "mlp.c_proj.weight": r(4 * d, d), h + "mlp.c_proj.bias": r(d)})
    cfg = {"model_type": "gpt2", "vocab_size": vocab, "n_embd": d, "n_layer": layers,
           "n_head": heads, "n_positions": npos, "layer_norm_epsilon": 1e-5,
           "activation_function": act}
    return _save(folder, cfg, t)


def write_llama(folder: Path, *, vocab=259, d=32, layers=2, heads=4, kv_heads=2, ff=48,
                npos=256, seed=0, scale=0.3, model_type="llama", tied=False, bias=False,
                theta=10000.0) -> Path:
    rng = np.random.default_rng(seed)
    r = lambda *s: rng.normal(0.0, scale, s)  # noqa: E731
    hd = d // heads
    t = {"model.embed_tokens.weight": r(vocab, d), "model.norm.weight": 1 + r(d)}
    if not tied:
        t["lm_head.weight"] = r(vocab, d)
    for i in range(layers):
        h = f"model.layers.{i}."
        t.update({h + "input_layernorm.weight": 1 + r(d),
                  h + "self_attn.q_proj.weight": r(heads * hd, d),
                  h + "self_attn.k_proj.weight": r(kv_heads * hd, d),
                  h + "self_attn.v_proj.weight": r(kv_heads * hd, d),
                  h + "self_attn.o_proj.weight": r(d, heads * hd),
                  h + "post_attention_layernorm.weight": 1 + r(d),
                  h + "mlp.gate_proj.weight": r(ff, d), h + "mlp.up_proj.weight": r(ff, d),
                  h + "mlp.down_proj.weight": r(d, ff)})
        if bias or model_type == "qwen2":
            t.update({h + "self_attn.q_proj.bias": r(heads * hd),
                      h + "self_attn.k_proj.bias": r(kv_heads * hd),
                      h + "self_attn.v_proj.bias": r(kv_heads * hd)})
    cfg = {"model_type": model_type, "vocab_size": vocab, "hidden_size": d,
           "num_hidden_layers": layers, "num_attention_heads": heads,
           "num_key_value_heads": kv_heads, "intermediate_size": ff,
           "max_position_embeddings": npos, "rms_norm_eps": 1e-6, "rope_theta": theta,
           "hidden_act": "silu", "tie_word_embeddings": tied, "attention_bias": bias}
    return _save(folder, cfg, t)


def _f64(folder: Path) -> tuple[dict, dict]:
    from safetensors.numpy import load_file

    cfg = json.loads((folder / "config.json").read_text())
    w = {k.removeprefix("transformer.").removeprefix("model."): v.astype(np.float64)
         for k, v in load_file(str(folder / "model.safetensors")).items()}
    return cfg, w


def _softmax_attend(q, k, v):
    """Causal attention of (T, hd) queries over (T, hd) keys and values."""
    s = q @ k.T / math.sqrt(q.shape[1])
    s = s + np.triu(np.full(s.shape, -np.inf), 1)
    e = np.exp(s - s.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True)) @ v


def reference_logits(folder: Path, tokens) -> np.ndarray:
    """Logits (V,) after ``tokens``: the whole prefix recomputed in float64 numpy."""
    cfg, w = _f64(Path(folder))
    toks = np.asarray(tokens, np.int64)
    n = toks.size
    if cfg["model_type"] == "gpt2":
        d, nh = cfg["n_embd"], cfg["n_head"]
        hd = d // nh

        def ln(x, g, b):
            mu = x.mean(-1, keepdims=True)
            var = ((x - mu) ** 2).mean(-1, keepdims=True)
            return (x - mu) / np.sqrt(var + cfg["layer_norm_epsilon"]) * g + b

        x = w["wte.weight"][toks] + w["wpe.weight"][np.arange(n)]
        for i in range(cfg["n_layer"]):
            p = f"h.{i}."
            qkv = ln(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"]) @ w[p + "attn.c_attn.weight"] \
                + w[p + "attn.c_attn.bias"]
            q, k, v = np.split(qkv, 3, axis=1)
            a = np.hstack([_softmax_attend(q[:, j * hd:(j + 1) * hd], k[:, j * hd:(j + 1) * hd],
                                           v[:, j * hd:(j + 1) * hd]) for j in range(nh)])
            x = x + a @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
            hdn = ln(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"]) @ w[p + "mlp.c_fc.weight"] \
                + w[p + "mlp.c_fc.bias"]
            hdn = 0.5 * hdn * (1 + np.tanh(math.sqrt(2 / math.pi) * (hdn + 0.044715 * hdn ** 3)))
            x = x + hdn @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
        x = ln(x, w["ln_f.weight"], w["ln_f.bias"])
        return x[-1] @ w["wte.weight"].T
    d, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", nh)
    hd = d // nh
    eps = cfg["rms_norm_eps"]
    inv = cfg.get("rope_theta", 10000.0) ** (-np.arange(0, hd, 2) / hd)
    ang = np.arange(n)[:, None] * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)

    def rope(x):                          # (T, hd): pairs (i, i + hd/2)
        x1, x2 = x[:, :hd // 2], x[:, hd // 2:]
        return np.hstack([x1 * cos - x2 * sin, x2 * cos + x1 * sin])

    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g

    x = w["embed_tokens.weight"][toks]
    bias = cfg.get("attention_bias") or cfg["model_type"] == "qwen2"
    for i in range(cfg["num_hidden_layers"]):
        p = f"layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q, k, v = (h @ w[p + f"self_attn.{m}_proj.weight"].T
                   + (w[p + f"self_attn.{m}_proj.bias"] if bias else 0) for m in "qkv")
        heads = []
        for j in range(nh):
            g = j // (nh // nkv)
            heads.append(_softmax_attend(rope(q[:, j * hd:(j + 1) * hd]),
                                         rope(k[:, g * hd:(g + 1) * hd]), v[:, g * hd:(g + 1) * hd]))
        x = x + np.hstack(heads) @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        gt = h @ w[p + "mlp.gate_proj.weight"].T
        x = x + (gt / (1 + np.exp(-gt)) * (h @ w[p + "mlp.up_proj.weight"].T)) \
            @ w[p + "mlp.down_proj.weight"].T
    x = rms(x, w["norm.weight"])
    head = w["embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return x[-1] @ head.T
