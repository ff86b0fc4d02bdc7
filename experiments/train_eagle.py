"""Train an EAGLE-style draft head for SmolLM2-135M-Instruct (the shipped ``eagle-smollm2``).

The head follows EAGLE (Li et al., ICML 2024; EAGLE-2, EMNLP 2024): at a position whose
token is x_{t+1} it reads [embedding(x_{t+1}) ; f_t], the target's final (normed) hidden
state at the previous position, through one linear layer (2d -> d) and one Llama decoder
layer (causal attention over the head's own earlier positions; no input norm before its
attention and no final norm, as EAGLE removes both), and predicts f_{t+1}. The target's own
LM head reads the prediction; as in EAGLE-3, only a reduced draft vocabulary (the most
frequent tokens of the training answers) is scored. The loss is EAGLE's: smooth-L1 on the
feature plus 0.1 x the cross-entropy of the draft distribution against the target's own
distribution (restricted to the draft vocabulary), with uniform noise on the input
features during training.

Data: the target's own answers, sampled at T = 1, to training prompts built from
brwsim's bundled corpora (the Python documentation and standard-library sources) and
instruction templates; the evaluation prompt sets (HumanEval and
``brwsim/data/prompts/chat.jsonl``) are never used here. Held out: 10% of the generated
answers, on which the card reports top-1 and top-k agreement with the target's sampled
tokens at depth 1 (from the target's true feature) and at depths 2-6 (the head fed its own
predicted features, tokens teacher-forced).

Needs torch (``pip install 'brwsim[torch]'``) and the model (``brwsim models fetch
smollm2-135m-instruct``, or ``--model`` with a Hugging Face folder or GGUF file). Run from
the repository root: ``python experiments/train_eagle.py`` (``--quick`` for a smoke run).
The runtime (:mod:`brwsim.drafters.eagle`) needs no torch.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "brwsim" / "data" / "drafters" / "eagle-smollm2"
CORPORA = ROOT / "brwsim" / "data" / "corpora"

SEED = 20261204
DRAFT_VOCAB = 8192
NOISE = 0.2              # uniform noise half-width on input features (EAGLE's default)
CE_WEIGHT = 0.1          # EAGLE's classification weight beside the feature regression
DEPTHS = 6
TOPK = (1, 4, 10)

CODE_ASKS = ["Explain what this Python code does:", "Review this code and suggest one improvement:",
             "Write a docstring for the following code:", "What could go wrong in this code?",
             "Rewrite this code to be more readable:", "Summarise this code in two sentences:"]
PROSE_ASKS = ["Summarise the following documentation:", "Explain this to a beginner:",
              "Give an example that illustrates this passage:",
              "List the key points of the following text:",
              "Write three quiz questions about this text:"]
TOPICS = ["a lighthouse keeper", "a lost umbrella", "the first day of school", "a robot gardener",
          "a rainy market", "an old map", "a chess tournament", "a mountain village",
          "a broken clock", "a friendly dragon", "a night train", "a bakery at dawn"]
TASKS = ["Write a short story about {}.", "Write a poem about {}.",
         "Describe {} in one paragraph.", "Give three facts one might invent about {}."]


def training_prompts(n: int, rng: random.Random) -> list[str]:
    """Instruction prompts over corpus snippets and templates (none from evaluation sets)."""
    code = (CORPORA / "code.txt").read_text(encoding="utf-8").split("\n\n")
    prose = (CORPORA / "prose.txt").read_text(encoding="utf-8").split("\n\n")
    code = [c for c in code if 80 <= len(c) <= 500]
    prose = [p for p in prose if 120 <= len(p) <= 500]
    out = []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            out.append(f"{rng.choice(CODE_ASKS)}\n```python\n{rng.choice(code)}\n```")
        elif kind == 1:
            out.append(f"{rng.choice(PROSE_ASKS)}\n\n{rng.choice(prose)}")
        else:
            out.append(rng.choice(TASKS).format(rng.choice(TOPICS)))
    return out


def load_target(model: str, torch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = Path(model)
    kw = {"gguf_file": p.name} if p.suffix == ".gguf" else {}
    folder = p.parent if p.suffix == ".gguf" else p
    tok = AutoTokenizer.from_pretrained(folder, **kw)
    m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **kw).eval()
    return tok, m


def generate(tok, m, prompts, max_new, batch, torch, seed):
    """Sample the target's answers at T = 1; returns token id arrays (prompt + answer) and
    the answer's start index per sequence."""
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    seqs = []
    gen = torch.Generator().manual_seed(seed)
    for b in range(0, len(prompts), batch):
        chunk = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                         add_generation_prompt=True) for p in prompts[b:b + batch]]
        enc = tok(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
        torch.manual_seed(int(torch.randint(0, 2 ** 31, (1,), generator=gen)))
        with torch.inference_mode():
            out = m.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                             max_new_tokens=max_new, pad_token_id=tok.pad_token_id)
        for i in range(out.shape[0]):
            mask = enc["attention_mask"][i].bool()
            prompt = enc["input_ids"][i][mask]
            answer = out[i, enc["input_ids"].shape[1]:]
            stop = (answer == tok.eos_token_id).nonzero()
            if len(stop):
                answer = answer[: int(stop[0]) + 1]
            seqs.append((np.concatenate([prompt.numpy(), answer.numpy()]), int(prompt.shape[0])))
        print(f"  generated {len(seqs)}/{len(prompts)}", flush=True)
    return seqs


def features(m, seqs, torch):
    """The target's final normed hidden states over each whole sequence (float32)."""
    out = []
    with torch.no_grad():
        for ids, _ in seqs:
            h = m.model(input_ids=torch.as_tensor(ids)[None]).last_hidden_state[0]
            out.append(h.float().clone())
    return out


def build_head(cfg, torch):
    """fc (2d -> d, no bias) and one LlamaDecoderLayer without its input norm."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    lc = LlamaConfig(**{k: cfg[k] for k in (
        "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
        "rms_norm_eps", "max_position_embeddings", "rope_theta") if k in cfg},
        num_hidden_layers=1, vocab_size=cfg["vocab_size"])
    lc._attn_implementation = "eager"
    head = torch.nn.Module()
    head.fc = torch.nn.Linear(2 * lc.hidden_size, lc.hidden_size, bias=False)
    head.layer = LlamaDecoderLayer(lc, 0)
    head.layer.input_layernorm = torch.nn.Identity()
    head.rotary = LlamaRotaryEmbedding(lc)
    return head, lc


def head_forward(head, emb, feat, torch, pos=None, mask=None):
    """Predicted features: emb, feat (b, n, d) -> (b, n, d); causal over the n inputs
    unless ``pos`` (n,) and an additive ``mask`` (n, n) are given."""
    x = head.fc(torch.cat([emb, feat], dim=-1))
    n = x.shape[1]
    if pos is None:
        pos = torch.arange(n)
        mask = torch.full((n, n), float("-inf")).triu(1)
    pos = pos[None].expand(x.shape[0], n)
    cos_sin = head.rotary(x, pos)
    out = head.layer(x, attention_mask=mask[None, None], position_ids=pos,
                     position_embeddings=cos_sin)
    return out[0] if isinstance(out, tuple) else out


def unrolled_mask(n: int, levels: int, torch):
    """Positions and additive mask for ``levels`` stacked copies of an n-position sequence,
    level j of chain t standing for position t + j: it sees the true positions s <= t
    (level 0) and its own chain's levels 1..j, as the head does when drafting j steps
    ahead of the true context (EAGLE-3's training-time test uses the same view)."""
    t = torch.arange(n).repeat(levels)
    lev = torch.arange(levels).repeat_interleave(n)
    qt, qj = t[:, None], lev[:, None]
    kt, kj = t[None, :], lev[None, :]
    ok = ((kj == 0) & (kt <= qt)) | ((kj >= 1) & (kt == qt) & (kj <= qj))
    mask = torch.zeros(ok.shape).masked_fill(~ok, float("-inf"))
    return t + lev, mask


def pairs(seq, feat, emb_w):
    """EAGLE's aligned inputs over one sequence: at index i the token x_{i+1} and f_i,
    target f_{i+1}; positions 0 .. n-2."""
    ids = seq[0]
    return emb_w[ids[1:]], feat[:-1], feat[1:], ids


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="HF folder or .gguf (default: the catalogue's)")
    ap.add_argument("--prompts", type=int, default=300)
    ap.add_argument("--max-new", type=int, default=96)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 24 prompts, 1 epoch")
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args(argv)
    import torch

    torch.set_num_threads(a.threads)
    torch.manual_seed(SEED)
    rng = random.Random(SEED)
    if a.quick:
        a.prompts, a.epochs, a.max_new = 24, 1, 32
    model = a.model
    if model is None:
        from brwsim.models.catalogue import local_path   # the fetched GGUF
        model = local_path("smollm2-135m-instruct")
    t0 = time.time()
    tok, m = load_target(model, torch)
    for p in m.parameters():
        p.requires_grad_(False)
    cfg = m.config.to_dict()
    prompts = training_prompts(a.prompts, rng)
    seqs = generate(tok, m, prompts, a.max_new, 24, torch, SEED)
    t_gen = time.time() - t0
    feats = features(m, seqs, torch)
    emb_w = m.model.embed_tokens.weight.detach()
    lm_w = m.lm_head.weight.detach()
    counts = np.bincount(np.concatenate([s[0][s[1]:] for s in seqs]), minlength=lm_w.shape[0])
    counts[tok.eos_token_id] += 1 << 30                    # the stop token is always draftable
    draft_ids = np.sort(np.argsort(-counts, kind="stable")[:DRAFT_VOCAB])
    lm_d = lm_w[torch.as_tensor(draft_ids)]
    order = list(range(len(seqs)))
    rng.shuffle(order)
    n_hold = max(1, len(order) // 10)
    held, train = order[:n_hold], order[n_hold:]
    head, lc = build_head(cfg, torch)
    opt = torch.optim.AdamW(head.parameters(), lr=3e-4, betas=(0.9, 0.95))
    steps = a.epochs * len(train)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps)))
    t1 = time.time()
    for ep in range(a.epochs):
        rng.shuffle(train)
        tot = 0.0
        for j in train:
            emb, f_in, f_out, _ = pairs(seqs[j], feats[j], emb_w)
            noisy = f_in + (torch.rand_like(f_in) * 2 - 1) * NOISE
            pred = head_forward(head, emb[None], noisy[None], torch)[0]
            start = max(seqs[j][1] - 1, 0)                 # loss on answer positions only
            pred, f_out = pred[start:], f_out[start:]
            reg = torch.nn.functional.smooth_l1_loss(pred, f_out)
            with torch.no_grad():
                p_t = torch.softmax(f_out @ lm_d.T, dim=-1)
            ce = -(p_t * torch.log_softmax(pred @ lm_d.T, dim=-1)).sum(-1).mean()
            loss = reg + CE_WEIGHT * ce
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), 0.5)
            opt.step()
            sched.step()
            tot += float(loss.detach())
        print(f"epoch {ep + 1}/{a.epochs}: loss {tot / len(train):.4f} "
              f"({time.time() - t1:.0f} s)", flush=True)
    t_train = time.time() - t1
    metrics = evaluate(head, [seqs[j] for j in held], [feats[j] for j in held], emb_w, lm_d,
                       draft_ids, torch)
    save(head, lc, cfg, draft_ids, metrics, a, len(train), len(held), t_gen, t_train, seqs)
    return 0


def evaluate(head, seqs, feats, emb_w, lm_d, draft_ids, torch):
    """Top-k agreement of the head with the target's sampled answer tokens at depths
    1..DEPTHS: depth 1 reads the target's true feature, deeper ones the head's own
    predictions (tokens teacher-forced), all chains of a sequence in one stacked pass."""
    hits = np.zeros((DEPTHS, len(TOPK)))
    seen = np.zeros(DEPTHS)
    with torch.inference_mode():
        for (ids, start), feat in zip(seqs, feats):
            n = len(ids) - 1                       # chains t = 0 .. n-1 read x_{t+1}, f_t
            tok = torch.as_tensor(ids)
            f_levels = [feat[:n]]
            for d in range(DEPTHS):
                L = d + 1
                pos, mask = unrolled_mask(n, L, torch)
                # level j of chain t reads token x_{t+1+j} (padded past the end)
                idx = torch.clamp(torch.arange(n)[None] + 1 + torch.arange(L)[:, None], max=n)
                emb = emb_w[tok[idx.reshape(-1)]]
                f = torch.cat(f_levels)
                pred = head_forward(head, emb[None], f[None], torch, pos, mask)[0]
                last = pred[d * n:(d + 1) * n]     # predicts x_{t+2+d}
                t = torch.arange(max(start - 1, 0), n - 1 - d)
                if len(t):
                    top = draft_ids[torch.topk(last[t] @ lm_d.T, max(TOPK)).indices.numpy()]
                    truth = ids[t.numpy() + 2 + d]
                    for k_i, k in enumerate(TOPK):
                        hits[d, k_i] += (top[:, :k] == truth[:, None]).any(1).sum()
                    seen[d] += len(t)
                f_levels.append(last)
    return {f"depth_{d + 1}": {f"top_{k}": round(hits[d, i] / max(seen[d], 1), 4)
                               for i, k in enumerate(TOPK)} | {"positions": int(seen[d])}
            for d in range(DEPTHS)}


def model_card(train: dict, conf: dict) -> str:
    """The head's model card, every number from the training record."""
    rows = "\n".join(
        f"| {d.split('_')[1]} | {v['top_1']:.3f} | {v['top_4']:.3f} | {v['top_10']:.3f} | {v['positions']:,} |"
        for d, v in train["held_out"].items())
    return f"""# eagle-smollm2: an EAGLE-style draft head for SmolLM2-135M-Instruct

Trained by `experiments/train_eagle.py` (seed {train['seed']}); read by
`brwsim.drafters.eagle.EagleHead` in numpy (no torch at run time).

- **Design** (EAGLE, Li et al. 2024): [embedding(x_(i+1)) ; f_i] -> linear (2d -> d) -> one
  Llama decoder layer (no norm before its attention, none after it) -> predicted f_(i+1),
  read by the target's own LM head restricted to a draft vocabulary of
  {conf['draft_vocab_size']:,} tokens (the most frequent in the training answers, as EAGLE-3
  reduces its head). d = {conf['hidden_size']}, {conf['num_attention_heads']} query and
  {conf['num_key_value_heads']} key/value heads, MLP {conf['intermediate_size']}.
- **Parameters**: {train['parameters']:,} trained (the embedding and LM head are the
  target's), stored in float16.
- **Data**: the target's own answers, sampled at T = 1 (at most {train['max_new_tokens']}
  new tokens), to {train['prompts']} training prompts built from brwsim's bundled corpora and
  instruction templates ({train['answer_tokens']:,} answer tokens); the evaluation sets
  (HumanEval, `brwsim/data/prompts/chat.jsonl`) are never used.
  {train['train_sequences']} answers trained, {train['held_out_sequences']} held out.
- **Training**: {train['epochs']} epochs, AdamW, EAGLE's loss (smooth-L1 on the feature +
  {train['ce_weight']} x cross-entropy against the target's distribution), uniform input
  noise +-{train['noise']}; {train['generation_seconds']} s loading the target and generating, and
  {train['training_seconds']} s training with {train['threads']} threads on a 2-core CPU.
- **Held-out agreement** with the target's sampled tokens (answer positions), depth 1 from
  the target's true feature, deeper depths fed the head's own predicted features (tokens
  teacher-forced):

| depth | top-1 | top-4 | top-10 | positions |
|---:|---:|---:|---:|---:|
{rows}

This is a small head trained briefly on little data: it shows the mechanism (its agreement
falls with depth once it reads its own features), not a tuned EAGLE drafter.
Licence: MIT (brwsim); the target model is Apache-2.0.
"""


def save(head, lc, cfg, draft_ids, metrics, a, n_train, n_held, t_gen, t_train, seqs):
    from safetensors.numpy import save_file

    out = Path(a.out)
    tmp = out.with_name(out.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    sd = {"fc.weight": head.fc.weight}
    for k, v in head.layer.state_dict().items():
        sd["layer." + k] = v
    # float16 halves the shipped size; the runtime computes in float32 or float64
    save_file({k: v.detach().numpy().astype(np.float16) for k, v in sd.items()}
              | {"draft_vocab": draft_ids.astype(np.int32)}, str(tmp / "model.safetensors"))
    n_params = int(sum(v.numel() for v in sd.values()))
    conf = {"architecture": "eagle", "target": "smollm2-135m-instruct",
            "hidden_size": lc.hidden_size, "intermediate_size": lc.intermediate_size,
            "num_attention_heads": lc.num_attention_heads,
            "num_key_value_heads": lc.num_key_value_heads, "rms_norm_eps": lc.rms_norm_eps,
            "rope_theta": cfg.get("rope_theta", getattr(lc, "rope_theta", 10000.0)),
            "vocab_size": cfg["vocab_size"], "draft_vocab_size": int(draft_ids.size)}
    (tmp / "config.json").write_text(json.dumps(conf, indent=1) + "\n")
    train = {"seed": SEED, "prompts": a.prompts, "train_sequences": n_train,
             "held_out_sequences": n_held, "max_new_tokens": a.max_new, "epochs": a.epochs,
             "answer_tokens": int(sum(len(s[0]) - s[1] for s in seqs)),
             "generation_seconds": round(t_gen, 1), "training_seconds": round(t_train, 1),
             "threads": a.threads, "parameters": n_params, "held_out": metrics,
             "noise": NOISE, "ce_weight": CE_WEIGHT}
    (tmp / "training.json").write_text(json.dumps(train, indent=1) + "\n")
    (tmp / "README.md").write_text(model_card(train, conf))
    if out.exists():
        import shutil
        shutil.rmtree(out)
    os.replace(tmp, out)
    print(json.dumps(train, indent=1))


if __name__ == "__main__":
    sys.exit(main())
