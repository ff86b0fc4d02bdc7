r"""Train the shipped byte-level GPT-2 target/draft pair on the bundled corpora.

Two models of the GPT-2 architecture (learned positions, pre-LayerNorm blocks, ``gelu_new``
MLP, tied input/output embeddings) over the 256 byte values are trained with AdamW on the
training split of ``brwsim/data/corpora/prose.txt`` and ``code.txt`` and written as Hugging
Face checkpoint folders (``config.json``, ``model.safetensors``, ``training.json``,
``README.md``) into ``brwsim/data/transformers/{target,draft}``.

* **Split.** Each corpus's bytes are cut at the first line start at or after 90% of its
  length: the part before is the training split, the part from there to the end is the
  held-out split, never seen in training (the byte ranges and SHA-256 of both are written to
  ``training.json``).
* **Held-out bits per byte.** The held-out split of each corpus is cut into consecutive
  windows of ``n_positions`` bytes (a last shorter window included); in each window every
  byte but the first is predicted from the bytes before it in the window, and the bits per
  byte is the mean of ``-log2 p`` over all predicted bytes (both corpora pooled, and per
  corpus). It is measured on the saved weights. The unigram baseline is
  the training split's byte frequencies (add-one smoothed) scored on the same bytes.
* **Check subset.** The bits per byte of the first ``CHECK_WINDOWS`` windows of each
  held-out corpus is recorded as well, for the unit test that recomputes it with a plain
  numpy forward pass (``tests/unit/test_shipped_transformers.py``).
* **Reproducibility.** Fixed seeds (torch for the initial weights and dropout, numpy for the
  batches), ``torch.use_deterministic_algorithms(True)``, a fixed thread count
  (``--threads``, default 1: on a shared machine one thread is several times faster
  than two), float32 on CPU. torch is the pinned optional extra
  ``pip install 'brwsim[train]'``. A rerun with the same torch version, thread count and
  CPU gives the same weights; a different CPU or thread count may change the last bits of
  the float32 sums and so the weights.

The sizes fit the machine the pair was trained on (2 cores shared with several other jobs,
about 10 GFLOP/s for torch on one thread there, far less when it was busiest): the target
(0.86M parameters) sees 1.8M training bytes (3.4 passes over the 534K-byte training split)
in 41 minutes; the draft (83K parameters) 1.0M bytes in 4 minutes. The target is
under-trained (its loss was still falling; the same draft trained 1,500 steps instead of
500 reached 2.915 bits per byte, better than the target's 3.103), so the draft's steps
were chosen to leave a clear gap.
The parameters are stored as float32.

Usage::

    python experiments/train_transformers.py [--which target draft] [--threads 1]
        [--out brwsim/data/transformers]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CORPUS_DIR = ROOT / "brwsim" / "data" / "corpora"
CORPORA = {"prose": "prose.txt", "code": "code.txt"}
HELD_OUT_FRACTION = 0.1
CHECK_WINDOWS = 2
DTYPE = "float32"

#: The two models: architecture (GPT2Config keys) and training schedule.
MODELS = {
    "target": dict(n_embd=128, n_layer=4, n_head=4, n_positions=256, dropout=0.0,
                   seed=1, steps=900, batch=8, lr=2e-3, warmup=100, weight_decay=0.1),
    "draft": dict(n_embd=64, n_layer=1, n_head=2, n_positions=256, dropout=0.0,
                  seed=2, steps=500, batch=8, lr=3e-3, warmup=100, weight_decay=0.1),
}


# ----------------------------------------------------------------------------------- data

def split_corpus(data: bytes) -> int:
    """Start of the held-out split: the first line start at or after 90% of ``data``."""
    cut = int(len(data) * (1.0 - HELD_OUT_FRACTION))
    nl = data.find(b"\n", cut - 1)
    return len(data) if nl < 0 else nl + 1


def load_splits() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict]:
    """(training bytes, held-out bytes, description) of each corpus."""
    train, held, desc = {}, {}, {}
    for name, file in CORPORA.items():
        data = (CORPUS_DIR / file).read_bytes()
        cut = split_corpus(data)
        train[name] = np.frombuffer(data[:cut], dtype=np.uint8)
        held[name] = np.frombuffer(data[cut:], dtype=np.uint8)
        desc[name] = {"file": f"brwsim/data/corpora/{file}", "bytes": len(data),
                      "train": [0, cut], "held_out": [cut, len(data)],
                      "sha256_train": hashlib.sha256(data[:cut]).hexdigest(),
                      "sha256_held_out": hashlib.sha256(data[cut:]).hexdigest()}
    return train, held, desc


def windows(data: np.ndarray, n: int) -> list[np.ndarray]:
    """Consecutive windows of ``n`` bytes of ``data`` (the last one may be shorter, >= 2)."""
    out = [data[i:i + n] for i in range(0, len(data), n)]
    return [w for w in out if len(w) >= 2]


def unigram_bpb(train: dict[str, np.ndarray], held: dict[str, np.ndarray], n: int) -> float:
    """Bits per byte of the add-one smoothed training byte frequencies on the scored bytes."""
    counts = np.ones(256) + sum(np.bincount(t, minlength=256) for t in train.values())
    logp = np.log2(counts / counts.sum())
    bits, count = 0.0, 0
    for h in held.values():
        for w in windows(h, n):
            bits -= logp[w[1:]].sum()
            count += len(w) - 1
    return bits / count


# ---------------------------------------------------------------------------------- model

def build_model(torch, cfg: dict):
    """A GPT-2 LM in plain torch with Hugging Face ``GPT2LMHeadModel``'s parameter names.

    Linear maps are ``Conv1D``-style: weight ``(in_features, out_features)``, ``y = x @ W + b``;
    the output head is the transposed token embedding (``tie_word_embeddings``).
    """
    nn, F = torch.nn, torch.nn.functional
    d, nh, p = cfg["n_embd"], cfg["n_head"], cfg["dropout"]

    class Conv1D(nn.Module):
        def __init__(self, nin: int, nout: int, std: float):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(nin, nout) * std)
            self.bias = nn.Parameter(torch.zeros(nout))

        def forward(self, x):
            return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).reshape(
                *x.shape[:-1], -1)

    proj_std = 0.02 / math.sqrt(2 * cfg["n_layer"])

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = Conv1D(d, 3 * d, 0.02)
            self.c_proj = Conv1D(d, d, proj_std)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.c_attn(x).split(d, dim=2)
            q, k, v = (z.view(b, t, nh, d // nh).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               dropout_p=p if self.training else 0.0)
            return F.dropout(self.c_proj(y.transpose(1, 2).reshape(b, t, d)), p, self.training)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = Conv1D(d, 4 * d, 0.02)
            self.c_proj = Conv1D(4 * d, d, proj_std)

        def forward(self, x):
            h = F.gelu(self.c_fc(x), approximate="tanh")  # gelu_new
            return F.dropout(self.c_proj(h), p, self.training)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            eps = cfg["layer_norm_epsilon"]
            self.ln_1, self.attn = nn.LayerNorm(d, eps=eps), Attention()
            self.ln_2, self.mlp = nn.LayerNorm(d, eps=eps), MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT2Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(cfg["vocab_size"], d)
            self.wpe = nn.Embedding(cfg["n_positions"], d)
            nn.init.normal_(self.wte.weight, std=0.02)
            nn.init.normal_(self.wpe.weight, std=0.01)
            self.h = nn.ModuleList(Block() for _ in range(cfg["n_layer"]))
            self.ln_f = nn.LayerNorm(d, eps=cfg["layer_norm_epsilon"])

        def forward(self, idx):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = F.dropout(self.wte(idx) + self.wpe(pos), p, self.training)
            for block in self.h:
                x = block(x)
            return self.ln_f(x)

    class GPT2LMHeadModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = GPT2Model()

        def forward(self, idx):
            return self.transformer(idx) @ self.transformer.wte.weight.T

    return GPT2LMHeadModel()


def hf_config(cfg: dict) -> dict:
    """The ``config.json`` of a model: Hugging Face ``GPT2Config`` keys."""
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "vocab_size": cfg["vocab_size"], "n_positions": cfg["n_positions"],
        "n_embd": cfg["n_embd"], "n_layer": cfg["n_layer"], "n_head": cfg["n_head"],
        "n_inner": None, "activation_function": "gelu_new",
        "resid_pdrop": cfg["dropout"], "embd_pdrop": cfg["dropout"],
        "attn_pdrop": cfg["dropout"], "layer_norm_epsilon": cfg["layer_norm_epsilon"],
        "initializer_range": 0.02, "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True, "bos_token_id": None, "eos_token_id": None,
        "torch_dtype": DTYPE, "use_cache": True,
    }


# ------------------------------------------------------------------------------- training

def held_out_bits(torch, model, held: dict[str, np.ndarray], n: int,
                  max_windows: int | None = None) -> dict[str, tuple[float, int]]:
    """(bits, predicted bytes) of each held-out corpus (see the module docstring)."""
    F = torch.nn.functional
    out = {}
    model.eval()
    with torch.no_grad():
        for name, h in held.items():
            ws = windows(h, n)[:max_windows]
            bits, count = 0.0, 0
            for w in ws:
                x = torch.from_numpy(w.astype(np.int64))[None]
                logp = F.log_softmax(model(x[:, :-1]).double(), dim=-1)
                bits -= logp[0].gather(1, x[0, 1:, None]).sum().item() / math.log(2)
                count += len(w) - 1
            out[name] = (bits, count)
    return out


def pooled(bits: dict[str, tuple[float, int]]) -> float:
    """Bits per byte of the corpora together."""
    return sum(b for b, _ in bits.values()) / sum(c for _, c in bits.values())


def train(torch, name: str, spec: dict, data: dict, threads: int):
    """Train one model; returns (model, facts)."""
    train_bytes, held, _ = data
    cfg = dict(spec, vocab_size=256, layer_norm_epsilon=1e-5)
    torch.manual_seed(spec["seed"])
    rng = np.random.default_rng(spec["seed"])
    model = build_model(torch, cfg)
    n, steps = cfg["n_positions"], spec["steps"]
    names = list(train_bytes)
    sizes = np.array([len(train_bytes[c]) - n - 1 for c in names], dtype=float)
    decay = [p for k, p in model.named_parameters() if p.dim() == 2 and "wpe" not in k]
    rest = [p for k, p in model.named_parameters() if not (p.dim() == 2 and "wpe" not in k)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": spec["weight_decay"]},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=spec["lr"], betas=(0.9, 0.95))
    nparams = sum(p.numel() for p in model.parameters())
    print(f"[{name}] {nparams:,} parameters, {steps} steps of {spec['batch']} x {n} bytes, "
          f"{threads} threads", flush=True)
    t0 = time.time()
    for step in range(steps):
        lr = spec["lr"] * (min(1.0, (step + 1) / spec["warmup"])
                           * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps))))
        for g in opt.param_groups:
            g["lr"] = lr
        which = rng.choice(len(names), size=spec["batch"], p=sizes / sizes.sum())
        batch = np.stack([train_bytes[names[c]][s:s + n + 1] for c, s in zip(
            which, (rng.integers(0, int(sizes[c]) + 1) for c in which))]).astype(np.int64)
        x = torch.from_numpy(batch)
        model.train()
        logits = model(x[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0 or step == steps - 1:
            el = time.time() - t0
            msg = (f"[{name}] step {step:5d}/{steps}  train {loss.item() / math.log(2):.3f} "
                   f"bits/byte  lr {lr:.2e}  {el:6.0f} s")
            if step % 500 == 0 or step == steps - 1:
                msg += f"  held-out (2 windows/corpus) {pooled(held_out_bits(torch, model, held, n, 2)):.3f}"
            print(msg, flush=True)
    seconds = time.time() - t0
    return model, cfg, {"parameters": nparams, "train_seconds": round(seconds, 1)}


def save(torch, model, cfg: dict, facts: dict, folder: Path, data: dict, argv: list[str]) -> dict:
    """Write the checkpoint folder; returns training.json's content."""
    from safetensors.torch import save_file

    _, held, split = data
    n = cfg["n_positions"]
    # measure on the stored weights (rounded to DTYPE)
    state = {k: v.detach().to(getattr(torch, DTYPE)).contiguous()
             for k, v in model.state_dict().items()}
    model.load_state_dict({k: v.float() for k, v in state.items()})
    full = held_out_bits(torch, model, held, n)
    check = held_out_bits(torch, model, held, n, CHECK_WINDOWS)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(hf_config(cfg), indent=2) + "\n")
    blob = (folder / "model.safetensors").read_bytes()
    info = {
        "model": folder.name,
        "command": "python " + " ".join(argv),
        "seed": cfg["seed"],
        "schedule": {k: cfg[k] for k in ("steps", "batch", "lr", "warmup", "weight_decay",
                                         "dropout")},
        "optimizer": "AdamW(betas=(0.9, 0.95)), linear warm-up then cosine decay to 0.1 lr, "
                     "gradient norm clipped to 1, weight decay on the matrices but wpe",
        "threads": torch.get_num_threads(),
        "torch": torch.__version__, "python": platform.python_version(),
        "machine": platform.machine(),
        "parameters": facts["parameters"],
        "dtype": DTYPE,
        "train_seconds": facts["train_seconds"],
        "split": split,
        "held_out_windows": n,
        "held_out_bpb": round(pooled(full), 5),
        "held_out_bpb_by_corpus": {c: round(b / k, 5) for c, (b, k) in full.items()},
        "held_out_bytes_scored": sum(k for _, k in full.values()),
        "unigram_bpb": round(unigram_bpb(data[0], held, n), 5),
        "check": {"windows_per_corpus": CHECK_WINDOWS,
                  "bits": {c: b for c, (b, _) in check.items()},
                  "bytes_scored": {c: k for c, (_, k) in check.items()},
                  "bpb": pooled(check)},
        "model_safetensors_bytes": len(blob),
        "model_safetensors_sha256": hashlib.sha256(blob).hexdigest(),
        "config_json_sha256": hashlib.sha256((folder / "config.json").read_bytes()).hexdigest(),
    }
    (folder / "training.json").write_text(json.dumps(info, indent=2) + "\n")
    (folder / "README.md").write_text(model_card(hf_config(cfg), info))
    print(f"[{folder.name}] held-out {info['held_out_bpb']:.4f} bits/byte "
          f"({info['held_out_bpb_by_corpus']}), unigram {info['unigram_bpb']:.4f}; "
          f"wrote {folder}", flush=True)
    return info


def model_card(cfg: dict, info: dict) -> str:
    """README.md of a checkpoint folder, from its ``config.json`` and ``training.json``."""
    by, sch = info["held_out_bpb_by_corpus"], info["schedule"]
    threads = f"{info['threads']} CPU thread" + ("s" if info["threads"] > 1 else "")
    return f"""# brwsim byte-level GPT-2 {info['model']} model

A GPT-2 architecture language model over the 256 byte values (no tokenizer: token id =
byte value; no BOS/EOS token), trained by `experiments/train_transformers.py` on the
training split of brwsim's two bundled corpora (`brwsim/data/corpora`: English prose from
the Python 3.11 documentation, and Python standard library source). It is the
{info['model']} of brwsim's shipped target/draft pair (`../README.md`). The folder is a
standard Hugging Face checkpoint: `transformers.GPT2LMHeadModel.from_pretrained` loads it
unchanged (output embedding tied to `wte`).

| | |
|---|---|
| architecture | GPT-2: n_embd {cfg['n_embd']}, n_layer {cfg['n_layer']}, n_head {cfg['n_head']}, n_positions {cfg['n_positions']}, vocab 256, gelu_new, LayerNorm eps {cfg['layer_norm_epsilon']:g} |
| parameters | {info['parameters']:,} |
| weights | `model.safetensors`, {info['dtype']}, {info['model_safetensors_bytes']:,} bytes |
| SHA-256 of model.safetensors | `{info['model_safetensors_sha256']}` |
| held-out bits per byte | **{info['held_out_bpb']:.4f}** (prose {by['prose']:.4f}, code {by['code']:.4f}; unigram baseline {info['unigram_bpb']:.4f}) |
| training | {sch['steps']} steps of {sch['batch']} windows of {cfg['n_positions'] + 1} bytes, {info['optimizer']}, peak lr {sch['lr']:g}, dropout {sch['dropout']:g} |
| seed | {info['seed']} (torch: initial weights and dropout; numpy: batches) |
| training time | {info['train_seconds']:.0f} s on {threads} of a 2-core machine shared with other jobs (torch {info['torch']}, Python {info['python']}, {info['machine']}) |

Training command (from the repository root, after `pip install -e '.[train]'`):

    {info['command']}

## Data split and evaluation

Each corpus is cut at the first line start at or after 90% of its bytes; the last part is
the held-out split, which training never reads (byte ranges and SHA-256 of both parts in
`training.json`, key `split`). The held-out bits per byte is measured on the stored
{info['dtype']} weights: each held-out split is cut into consecutive windows of
{cfg['n_positions']} bytes, every byte of a window but its first is predicted from the
bytes before it in that window, and the mean of -log2 p over the
{info['held_out_bytes_scored']:,} predicted bytes of both corpora is reported. The
unigram baseline is the training split's add-one smoothed byte frequencies on the same
bytes. `training.json` holds these facts in machine-readable form.

## Licence

The weights are derived from the training text, which is part of Python 3.11.7 and is
distributed under the Python Software Foundation License Version 2 (code examples in the
documentation are dual licensed under the PSF License Version 2 and the Zero-Clause BSD
licence): "Copyright (c) 2001-2023 Python Software Foundation; All Rights Reserved". The
weights are redistributed under the same terms; the full licence text is in
`brwsim/data/corpora/LICENSE-PSF.txt` (and at <https://docs.python.org/3.11/license.html>).
As the PSF License asks, a brief summary of the changes made: the corpora were selected and
concatenated as described in `brwsim/data/corpora/README.md`, and a language model was
trained on them.
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--which", nargs="+", choices=list(MODELS), default=list(MODELS),
                    help="models to train (default: both)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--out", default=str(ROOT / "brwsim" / "data" / "transformers"),
                    help="folder of the checkpoint folders")
    ap.add_argument("--steps", type=int, default=None,
                    help="override the number of training steps (for a quick trial)")
    ap.add_argument("--cards", action="store_true",
                    help="only rewrite each folder's README.md from its config.json and "
                         "training.json (no training)")
    args = ap.parse_args(argv)
    if args.cards:
        for name in args.which:
            folder = Path(args.out) / name
            cfg = json.loads((folder / "config.json").read_text())
            info = json.loads((folder / "training.json").read_text())
            (folder / "README.md").write_text(model_card(cfg, info))
        return 0
    try:
        import torch
        import safetensors  # noqa: F401
    except ImportError as exc:
        print(f"train_transformers: needs torch and safetensors: pip install 'brwsim[train]' "
              f"({exc})", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    data = load_splits()
    for name in args.which:
        spec = dict(MODELS[name])
        if args.steps is not None:
            spec["steps"] = args.steps
        model, cfg, facts = train(torch, name, spec, data, args.threads)
        cmd = [str(Path(sys.argv[0]).resolve().relative_to(ROOT))
               if Path(sys.argv[0]).resolve().is_relative_to(ROOT) else sys.argv[0]]
        save(torch, model, cfg, facts, Path(args.out) / name, data,
             cmd + (sys.argv[1:] if argv is None else argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
