"""Real drafters on a real model: where the budget curves' shortfall comes from.

On SmolLM2-135M-Instruct (brwsim's numpy backend, float32) with two prompt sets (HumanEval
and the shipped chat set), at target temperatures T = 1 and T = 0, roots are positions
along the target's own answers (:class:`brwsim.backends.contexts.AnswerRoots`). For each
root it records, per budget P:

(a) the environment's share: E[X | T_P] of the optimal tree on the real model beside the
    matched i.i.d. view, the i.i.d. model whose every node draws its distribution from the
    distributions at exactly these roots (so the two agree at P = 1 by construction; any
    gap at larger P is the context's). The i.i.d. view is estimated by Monte Carlo over
    trees whose nodes draw rows of that set with replacement.
(b) the drafter's share: E[X | T_P] of each drafter's tree (prompt lookup as vLLM's
    ``ngram`` method, as chains and as trees; the EAGLE-style head trained by
    ``experiments/train_eagle.py`` as best-first, EAGLE-2 dynamic and chain trees when the
    head is present), and the per-position acceptance along chains of K = 1..8.

Writes ``data/real_gap.nc``. ``--quick`` runs a few roots for the notebook's tests.

Usage::

    python experiments/real_gap.py [--quick] [--roots 300] [--model smollm2-135m-instruct]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import xarray as xr

from brwsim.backends.contexts import AnswerRoots
from brwsim.backends.numpyforward import NumpyEvaluator
from brwsim.drafters.compare import curve, measure_root
from brwsim.drafters.promptlookup import lookup_chain, lookup_tree
from brwsim.drafters.shapes import DraftTree, best_first, dynamic, greedy_chain
from brwsim.io import provenance_attrs, write_netcdf_atomic
from brwsim.keys import seed_key
from brwsim.families.checkpoint import TensorMap, open_checkpoint
from brwsim.models.catalogue import local_path
from brwsim.models.gguf import load_gguf
from brwsim.models.tokenizer import gguf_tokenizer
from brwsim.prompts import load_prompts

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
HEAD = ROOT / "brwsim" / "data" / "drafters" / "eagle-smollm2"
PROMPT_SETS = ("humaneval", "chat")
BUDGETS = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024])
CHAIN_K = 8
IID_TREES = 2000


def lookup_drafter(kind: str):
    """Prompt lookup (n-grams of 1..4 tokens): vLLM's chain, or every continuation merged."""
    def draft(context, budget):
        if kind == "chain":
            t = lookup_chain(context, budget, 1, 4)
            p = np.arange(-1, t.size - 1, dtype=np.int64)
        else:
            p, t = lookup_tree(context, budget, 1, 4)
        return DraftTree(p, t, np.zeros(t.size))
    return draft


def eagle_drafter(head, target, shape: str):
    """The EAGLE-style head drafting from the target's true features of the context."""
    def draft(context, budget):
        root = head.start(context, target.context_features(context))
        if shape == "best":
            return best_first(head, root, budget)
        if shape == "dynamic":                                 # EAGLE-2's released tree
            return dynamic(head, root, 6, 10, min(59, budget))
        return greedy_chain(head, root, budget)
    return draft


def iid_view(rows: np.ndarray, budgets: np.ndarray, trees: int, temperature: float,
             rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """E[X | T_P] of the optimal tree when every node draws an i.i.d. distribution from
    ``rows`` (log-probabilities, one per root): mean and SE over ``trees`` trees."""
    from brwsim.drafters.score import tempered
    from brwsim.drafters.shapes import best_first as bf

    lq = tempered(rows, temperature) if temperature > 0 else rows

    class Draws:
        vocab_size, max_positions, dtype = rows.shape[1], 1 << 30, "float64"

        def start(self, context):
            return lq[rng.integers(len(lq))]

        def extend(self, parents, tokens):
            return lq[rng.integers(len(lq), size=len(tokens))]

    out = np.empty((trees, budgets.size))
    for i in range(trees):
        d = Draws()
        tree = bf(d, d.start(None), int(budgets.max()))
        out[i] = curve(np.exp(tree.log_value), budgets)
    return out.mean(0), out.std(0, ddof=1) / np.sqrt(trees)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--roots", type=int, default=300)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pmax", type=int, default=1024, help="largest budget (default 1024)")
    ap.add_argument("--iid-trees", type=int, default=IID_TREES,
                    help=f"trees of the matched i.i.d. view per set (default {IID_TREES})")
    ap.add_argument("--out", default=str(DATA / "real_gap.nc"))
    a = ap.parse_args(argv)
    budgets = BUDGETS[BUDGETS <= (64 if a.quick else a.pmax)]
    roots = 4 if a.quick else a.roots
    iid_trees = 50 if a.quick else a.iid_trees
    path = a.model if a.model.endswith(".gguf") else local_path(a.model)
    model = load_gguf(path)
    config, tensors = open_checkpoint(path)
    target = NumpyEvaluator(config, TensorMap(tensors), dtype="float32")
    tok = gguf_tokenizer(path)
    head = None
    if HEAD.is_dir():
        from brwsim.drafters.eagle import EagleHead
        head = EagleHead(str(HEAD), target.embedding(), target.lm_head(), dtype="float32")
    drafters = {"lookup_chain": lookup_drafter("chain"), "lookup_tree": lookup_drafter("tree")}
    if head is not None:
        drafters |= {"eagle_best": eagle_drafter(head, target, "best"),
                     "eagle_dynamic": eagle_drafter(head, target, "dynamic"),
                     "eagle_chain": eagle_drafter(head, target, "chain")}
    names = list(drafters)
    temps = [1.0, 0.0]
    sets = list(PROMPT_SETS)
    opt = np.full((len(sets), len(temps), roots, budgets.size), np.nan)
    dra = np.full((len(sets), len(temps), len(names), roots, budgets.size), np.nan)
    chain = np.full((len(sets), len(temps), len(names), roots, CHAIN_K), np.nan)
    iid = np.full((len(sets), len(temps), budgets.size), np.nan)
    iid_se = np.full_like(iid, np.nan)
    rng = np.random.default_rng(a.seed)
    t0 = time.time()
    for si, s in enumerate(sets):
        convs = load_prompts(s)
        prompts = [tok.encode(model.render_chat(c), add_special_tokens=False).ids for c in convs]
        for ti, temp in enumerate(temps):
            ctxs = AnswerRoots(target, prompts, seed_key(a.seed + 7919 * si), k_max=128,
                               beta=1e9 if temp == 0 else 1.0 / temp,   # T = 0: greedy answers
                               eos=[model.eos_token_id] if model.eos_token_id is not None else (),
                               per_prompt=1)
            root_rows = []
            for r in range(roots):
                ctx = ctxs.context(r, r)
                res = measure_root(target, ctx, budgets, drafters, temperature=temp)
                root_rows.append(target.start(ctx))
                opt[si, ti, r] = res.optimal
                for di, n in enumerate(names):
                    dra[si, ti, di, r] = res.drafters[n]
                    pp = res.path_prob[n][:CHAIN_K] if n.endswith("chain") else []
                    chain[si, ti, di, r, :len(pp)] = pp
                    chain[si, ti, di, r, len(pp):] = 0.0 if n.endswith("chain") else np.nan
                print(f"{s} T={temp:g} root {r + 1}/{roots} ({time.time() - t0:.0f} s)", flush=True)
            if temp > 0:
                iid[si, ti], iid_se[si, ti] = iid_view(np.array(root_rows), budgets, iid_trees,
                                                       temp, rng)
    ds = xr.Dataset(
        {"optimal": (("prompt_set", "temperature", "root", "budget"), opt,
                     {"long_name": "E[X | T_P] of the optimal tree on the real model", "units": "1"}),
         "drafter_expected": (("prompt_set", "temperature", "drafter", "root", "budget"), dra,
                     {"long_name": "E[X | T_P] of the drafter's tree", "units": "1"}),
         "chain_path_prob": (("prompt_set", "temperature", "drafter", "root", "position"), chain,
                             {"long_name": "target path probability of a chain's k-th node "
                                           "(chain drafters; NaN for trees)", "units": "1"}),
         "iid_view": (("prompt_set", "temperature", "budget"), iid,
                      {"long_name": "E[X | T_P] of the matched i.i.d. view (NaN at T = 0)",
                       "units": "1"}),
         "iid_view_se": (("prompt_set", "temperature", "budget"), iid_se,
                         {"long_name": "standard error of iid_view", "units": "1"})},
        coords={"prompt_set": sets, "temperature": temps, "drafter": names,
                "budget": budgets, "position": np.arange(1, CHAIN_K + 1), "root": np.arange(roots)},
        attrs=provenance_attrs("real drafters on a real model: the environment's and the "
                               "drafter's share of the shortfall",
                               {"model": a.model, "roots": roots, "quick": a.quick, "pmax": int(budgets[-1]),
                                "eagle_head": head is not None, "iid_trees": iid_trees},
                               a.seed, "experiments/real_gap.py"))
    write_netcdf_atomic(ds, a.out)
    print(f"wrote {a.out} ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
