"""Tree nodes per second of the ``transformer`` family, and its FLOP rate against numpy's.

Two checkpoints, built in a temporary folder unless the shipped target exists:

* a GPT-2 byte-level model of about 3.3M parameters (d = 256, 4 layers, 4 heads, 256
  positions, vocabulary 257; random N(0, 0.1) weights), or the shipped target
  ``brwsim/data/transformers/target`` if present: optimal trees at P = 1024;
* a 0.5B-parameter Llama-architecture model with Qwen2.5-0.5B's shape (hidden 896, 24
  layers, 14 heads, 2 KV heads, intermediate 4864, vocabulary 151936, tied, q/k/v biases;
  random weights, a word-level tokenizer.json): optimal trees at a small P, nodes/s and
  memory (the process's peak RSS and the tree workspace).

*tree nodes/s* counts the P nodes of each optimal tree (as ``bench_core.py``); *visited/s*
every node the threshold passes set up (each costs one token's forward pass). The FLOP
rate is 2 x (multiply-adds of one token: the weight matrices, the lm head, the attention
over the node's context) x visited/s, against numpy's float64 matmul (one thread) on
1024 x 1024 matrices timed in the same run (brwsim computes in float64 from float32
weights).

Usage::

    python benchmarks/bench_transformer.py            # about 3 minutes (+ the 0.5B model)
    python benchmarks/bench_transformer.py --small    # the GPT-2 model only
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")          # one core for numpy's BLAS too
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from brwsim import Transformer  # noqa: E402
from brwsim.kernels.tree import first_levels  # noqa: E402
from brwsim.simulate import run_iterations, seed_key, validate_budgets  # noqa: E402

SHIPPED = Path(__file__).resolve().parents[1] / "brwsim" / "data" / "transformers" / "target"


def numpy_peak(n: int = 1024, reps: int = 5) -> float:
    """Best float64 matmul FLOP rate of numpy (n x n times n x n) over ``reps`` runs."""
    a = np.random.default_rng(0).standard_normal((n, n))
    b = a.T.copy()
    a @ b
    best = np.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best


def _save(folder: Path, cfg: dict, tensors: dict) -> Path:
    from safetensors.numpy import save_file

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


def gpt2_checkpoint(folder: Path, d=256, layers=4, heads=4, npos=256, vocab=257, std=0.1) -> Path:
    rng = np.random.default_rng(0)
    r = lambda *s: (std * rng.standard_normal(s)).astype(np.float32)  # noqa: E731
    one = lambda n: (1 + r(n)).astype(np.float32)  # noqa: E731
    t = {"wte.weight": r(vocab, d), "wpe.weight": r(npos, d), "ln_f.weight": one(d),
         "ln_f.bias": r(d)}
    for i in range(layers):
        h = f"h.{i}."
        t.update({h + "ln_1.weight": one(d), h + "ln_1.bias": r(d),
                  h + "attn.c_attn.weight": r(d, 3 * d), h + "attn.c_attn.bias": r(3 * d),
                  h + "attn.c_proj.weight": r(d, d), h + "attn.c_proj.bias": r(d),
                  h + "ln_2.weight": one(d), h + "ln_2.bias": r(d),
                  h + "mlp.c_fc.weight": r(d, 4 * d), h + "mlp.c_fc.bias": r(4 * d),
                  h + "mlp.c_proj.weight": r(4 * d, d), h + "mlp.c_proj.bias": r(d)})
    cfg = {"model_type": "gpt2", "vocab_size": vocab, "n_embd": d, "n_layer": layers,
           "n_head": heads, "n_positions": npos}
    return _save(folder, cfg, t)


def qwen_checkpoint(folder: Path, d=896, layers=24, heads=14, kv=2, ff=4864, vocab=151936,
                    npos=32768) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    rng = np.random.default_rng(0)
    hd = d // heads

    def r(*s, std=0.02):
        return (std * rng.standard_normal(s, dtype=np.float32)).astype(np.float32)

    t = {"model.embed_tokens.weight": r(vocab, d), "model.norm.weight": np.ones(d, np.float32)}
    for i in range(layers):
        h = f"model.layers.{i}."
        t.update({h + "input_layernorm.weight": np.ones(d, np.float32),
                  h + "post_attention_layernorm.weight": np.ones(d, np.float32),
                  h + "self_attn.q_proj.weight": r(heads * hd, d),
                  h + "self_attn.q_proj.bias": r(heads * hd),
                  h + "self_attn.k_proj.weight": r(kv * hd, d), h + "self_attn.k_proj.bias": r(kv * hd),
                  h + "self_attn.v_proj.weight": r(kv * hd, d), h + "self_attn.v_proj.bias": r(kv * hd),
                  h + "self_attn.o_proj.weight": r(d, heads * hd),
                  h + "mlp.gate_proj.weight": r(ff, d), h + "mlp.up_proj.weight": r(ff, d),
                  h + "mlp.down_proj.weight": r(d, ff)})
    cfg = {"model_type": "qwen2", "vocab_size": vocab, "hidden_size": d,
           "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv,
           "intermediate_size": ff, "max_position_embeddings": npos, "rms_norm_eps": 1e-6,
           "rope_theta": 1e6, "hidden_act": "silu", "tie_word_embeddings": True}
    folder = _save(folder, cfg, t)
    del t
    words = {f"w{i}": i for i in range(vocab - 1)}
    words["[UNK]"] = vocab - 1
    tok = Tokenizer(models.WordLevel(words, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))
    return folder


def macs_per_token(fam: Transformer, ctx: float) -> float:
    """Multiply-adds of one token's forward pass over a context of ``ctx`` tokens."""
    c = fam._block
    v, d, nl, nh, nkv, hd, ff = (int(c[i]) for i in range(1, 8))
    ff1 = 2 * ff if int(c[0]) == 1 else ff
    layer = d * (nh * hd + 2 * nkv * hd) + nh * hd * d + d * ff1 + ff * d + 2 * nh * hd * ctx
    return nl * layer + d * v


def rates(fam, p: int, seconds: float, min_trees: int = 1):
    """(tree nodes/s, visited nodes/s, trees) after a warm-up tree."""
    spec, budgets, key = fam.spec(), validate_budgets([p]), seed_key(0)
    *_, t = run_iterations(spec, budgets, key, 0, 1)
    trees, visited, first = 0, 0, 1
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds or trees < min_trees:
        *_, v, t = run_iterations(spec, budgets, key, first, 1, t)
        first += 1
        trees += 1
        visited += v
    dt = time.perf_counter() - t0
    return trees * p / dt, visited / dt, trees


def report(name: str, fam: Transformer, p: int, seconds: float, peak: float, min_trees=1):
    tree, vis, n = rates(fam, p, seconds, min_trees)
    ctx = fam.window + fam.carry / 2                     # mean context of a node
    flops = 2.0 * macs_per_token(fam, ctx) * vis
    cap = fam.spec().head_cap
    ws = first_levels(cap) * cap * 8
    print(f"{name:34s} {fam.n_params / 1e6:8.1f}M P={p:<5d} tree nodes/s {tree:9.4g}  "
          f"visited/s {vis:9.4g}  ({n} trees)  {flops / 1e9:6.2f} GFLOP/s = "
          f"{flops / peak:5.1%} of numpy's  workspace {ws / 2**20:6.0f} MiB  "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:5.2f} GiB",
          flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="only the few-million-parameter GPT-2")
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f} (cores: {os.cpu_count()})")
    peak = numpy_peak()
    print(f"numpy float64 matmul peak (1 thread, 1024^3): {peak / 1e9:.2f} GFLOP/s")
    with tempfile.TemporaryDirectory() as tmp:
        if SHIPPED.is_dir():
            small, name = SHIPPED, "shipped target"
        else:
            small, name = gpt2_checkpoint(Path(tmp) / "gpt2"), "random GPT-2 (d 256, 4 layers)"
        fam = Transformer(small, prompts="prose")
        report(name, fam, 1024, args.seconds, peak)
        report(name, fam, 64, args.seconds / 2, peak)
        if not args.small:
            t0 = time.perf_counter()
            words = np.random.default_rng(1).integers(0, 151935, 400)
            big = Transformer(qwen_checkpoint(Path(tmp) / "qwen"),
                              prompts=" ".join(f"w{i}" for i in words) + "\n")
            print(f"0.5B checkpoint built and loaded in {time.perf_counter() - t0:.0f} s")
            report("random Qwen2.5-0.5B shape", big, 16, 0.0, peak)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
