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

Gemma 3 270M (``--model gemma3-270m`` or a gemma3 ``.gguf``; transformers' classes
through :class:`brwsim.backends.torchforward.TorchEvaluator`, since the numpy backend
has no gemma3 architecture) runs part (a) only: it has no head, and the drafters are the
SmolLM2 experiment's. Its GGUF has no chat template, so its prompts are their plain text
after BOS.

Root r reads prompt ``(r // per_prompt) mod n_prompts`` at k answer tokens, k uniform in
0..128 (``--per-prompt``, default 4: a prompt's roots share the cost of generating its
answer one token at a time, which dominates a row at P <= 64; their correlation is why
the notebook's SEs are clustered by prompt).

Each (prompt set, temperature, root) is saved as it completes, as one ``.npz`` in a shard
folder keyed by the run's model, seed, largest budget and roots per prompt
(``<parts>/<model>-s<seed>-p<pmax>-pp<per_prompt>/``, ``<parts>`` by default ``--out`` with
the suffix ``.parts``: ``data/real_gap.parts``), so an interrupted run
resumes where it stopped and runs with different ``--sets``/``--temps`` fill one folder;
two runs of the same set share the work when one has ``--reverse`` (each skips the roots
the other has saved).
Roots run a prompt's block at a time across every set and temperature (the block of
roots 0..3 of each, then 4..7, ...), so a run stopped early leaves every (set,
temperature) with nearly the same number of roots. The merge
(at the end of every run, or alone with ``--merge-only``) reads every completed shard,
computes the matched i.i.d. view from the completed roots' distributions, and writes the
dataset atomically; missing roots are NaN and ``n_roots`` counts the completed ones.

Usage::

    python experiments/real_gap.py [--quick] [--roots 300] [--pmax 1024]
        [--sets humaneval,chat] [--temps 1,0] [--model smollm2-135m-instruct]
        [--parts DIR] [--merge-only] [--out data/real_gap.nc]
    python experiments/real_gap.py --model /tmp/models/gemma-3-270m-q4_k_m.gguf --temps 1 \
        --threads 1 --out data/real_gap_gemma3.nc          # Gemma 3: part (a) only
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

# One BLAS thread unless the caller says otherwise: a row's products are small (one token
# while answers are generated), and on a shared machine OpenBLAS's threads then spin-wait.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import xarray as xr

from brwsim.backends.contexts import AnswerRoots
from brwsim.drafters.compare import curve, measure_root
from brwsim.drafters.promptlookup import lookup_chain, lookup_tree
from brwsim.drafters.score import tempered
from brwsim.drafters.shapes import DraftTree, best_first, dynamic, greedy_chain
from brwsim.errors import UserError
from brwsim.io import provenance_attrs, write_netcdf_atomic
from brwsim.keys import seed_key
from brwsim.models.catalogue import local_path
from brwsim.models.gguf import load_gguf
from brwsim.models.tokenizer import gguf_tokenizer
from brwsim.prompts import load_prompts, prompt_text

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
HEAD = ROOT / "brwsim" / "data" / "drafters" / "eagle-smollm2"
PROMPT_SETS = ("humaneval", "chat")
TEMPS = (1.0, 0.0)
BUDGETS = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024])
CHAIN_K = 8
IID_TREES = 2000
DRAFTERS = ("lookup_chain", "lookup_tree", "eagle_best", "eagle_dynamic", "eagle_chain",
            "target_chain")
EAGLE_CHAIN_MAX = 64        # the head's chain: its path probability is ~0 long before this
K_MAX = 128                 # answer tokens before a root: uniform in 0..K_MAX
PER_PROMPT = 4              # consecutive roots on one prompt's answer (they share its cost)
TARGET_CHAIN = CHAIN_K      # the target's own chain, for per-position acceptance only


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
        return greedy_chain(head, root, min(budget, EAGLE_CHAIN_MAX))
    return draft


def target_chain_drafter(target, temperature: float):
    """The target's own argmax chain of ``TARGET_CHAIN`` tokens at temperature T > 0: the
    best chain there is, so its per-position acceptance is the environment's alone."""
    from brwsim.drafters.compare import Tempered

    view = target if temperature == 1 else Tempered(target, temperature)

    def draft(context, budget):
        return greedy_chain(view, view.start(context), min(budget, TARGET_CHAIN))
    return draft


def iid_view(rows: np.ndarray, budgets: np.ndarray, trees: int, temperature: float,
             rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """E[X | T_P] of the optimal tree when every node draws an i.i.d. distribution from
    ``rows`` (log-probabilities, one per root): mean and SE over ``trees`` trees."""
    lq = tempered(rows, temperature) if temperature != 1 else np.array(rows, np.float64)
    # a child ranked below P among its siblings never enters a tree of P nodes: each row
    # keeps its P largest entries (and any tied with the P-th), the rest are -inf
    pmax = int(budgets.max())
    if pmax < lq.shape[1]:
        kth = -np.partition(-lq, pmax - 1, axis=1)[:, pmax - 1:pmax]
        lq[lq < kth] = -np.inf

    class Draws:
        vocab_size, max_positions, dtype = rows.shape[1], 1 << 30, "float64"

        def start(self, context):
            return lq[rng.integers(len(lq))]

        def extend(self, parents, tokens):
            return lq[rng.integers(len(lq), size=len(tokens))]

    out = np.empty((trees, budgets.size))
    for i in range(trees):
        d = Draws()
        tree = best_first(d, d.start(None), int(budgets.max()))
        out[i] = curve(np.exp(tree.log_value), budgets)
    return out.mean(0), out.std(0, ddof=1) / np.sqrt(trees)


# -- arguments -------------------------------------------------------------------------

def _names(text: str, allowed, what: str) -> list:
    out = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in out if t not in allowed]
    if not out or bad:
        raise UserError(f"--{what}: expected a comma-separated list of "
                        f"{', '.join(map(str, allowed))}, got {text!r}")
    return out


def _temps(text: str) -> list[float]:
    try:
        out = [float(t) for t in text.split(",") if t.strip()]
    except ValueError:
        out = []
    if not out or any(t < 0 or not np.isfinite(t) for t in out):
        raise UserError(f"--temps: expected comma-separated temperatures >= 0, got {text!r}")
    return out


def is_gemma(model: str) -> bool:
    """Whether ``model`` names Gemma 3 (catalogue name or a gemma .gguf file)."""
    return "gemma" in Path(model).name.lower()


def shard_dir(parts: Path, model: str, seed: int, pmax: int, per_prompt: int) -> Path:
    """The run's shard folder: one per (model, seed, largest budget, roots per prompt)."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(model).name.removesuffix(".gguf"))
    return parts / f"{stem}-s{seed}-p{pmax}-pp{per_prompt}"


def shard_name(prompt_set: str, temp: float, root: int) -> str:
    return f"{prompt_set}_T{temp:g}_r{root:05d}.npz"


def _save_atomic(path: Path, **arrays) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
    os.replace(tmp, path)


# -- running ---------------------------------------------------------------------------

def load_target(model: str, threads: int | None):
    """(target evaluator, gguf model, tokenizer, path) for a catalogue name or .gguf."""
    path = model if model.endswith(".gguf") else local_path(model)
    if not Path(path).is_file():
        raise UserError(f"model file not found: {path}")
    meta = load_gguf(path)
    tok = gguf_tokenizer(path)
    if is_gemma(model):
        from brwsim.backends.torchforward import TorchEvaluator
        target = TorchEvaluator(path, dtype="float32", threads=threads)
    else:
        from brwsim.backends.numpyforward import NumpyEvaluator
        from brwsim.families.checkpoint import TensorMap, open_checkpoint
        config, tensors = open_checkpoint(path)
        target = NumpyEvaluator(config, TensorMap(tensors), dtype="float32")
    return target, meta, tok, path


def encode_prompt(meta, tok, conversation) -> list[int]:
    """A prompt's tokens: rendered with the model's chat template, or, for a model without
    one (Gemma 3 270M's GGUF), its plain text after the tokenizer's special tokens (BOS)."""
    if getattr(meta, "chat_template", None):
        return tok.encode(meta.render_chat(conversation), add_special_tokens=False).ids
    return tok.encode(prompt_text(conversation)).ids


def run(a, budgets: np.ndarray, roots: int, folder: Path) -> None:
    """Run every missing (set, temperature, root) shard, root-major."""
    pp = a.per_prompt                     # a prompt's roots run together: they share its prefix
    blocks = range(0, roots, pp)
    todo = [(r, s, t) for b in (reversed(blocks) if a.reverse else blocks)
            for s in a.sets for t in a.temps for r in range(b, min(b + pp, roots))
            if not (folder / shard_name(s, t, r)).is_file()]
    print(f"{len(todo)} of {roots * len(a.sets) * len(a.temps)} rows to run in {folder}",
          flush=True)
    if not todo:
        return
    t0 = time.time()
    target, meta, tok, _ = load_target(a.model, a.threads)
    print(f"loaded {a.model} ({time.time() - t0:.0f} s)", flush=True)
    drafters = {}
    if not is_gemma(a.model):
        drafters = {"lookup_chain": lookup_drafter("chain"),
                    "lookup_tree": lookup_drafter("tree")}
        if HEAD.is_dir():
            from brwsim.drafters.eagle import EagleHead
            head = EagleHead(str(HEAD), target.embedding(), target.lm_head(), dtype="float32")
            drafters |= {"eagle_best": eagle_drafter(head, target, "best"),
                         "eagle_dynamic": eagle_drafter(head, target, "dynamic"),
                         "eagle_chain": eagle_drafter(head, target, "chain")}
    names = list(drafters)
    eos = [meta.eos_token_id] if meta.eos_token_id is not None else ()
    answers = {}
    for s in a.sets:
        si = PROMPT_SETS.index(s)
        prompts = [encode_prompt(meta, tok, c) for c in load_prompts(s)]
        for t in a.temps:
            answers[s, t] = AnswerRoots(target, prompts, seed_key(a.seed + 7919 * si),
                                        k_max=K_MAX, per_prompt=a.per_prompt, eos=eos,
                                        beta=1e9 if t == 0 else 1.0 / t)  # T = 0: greedy
    for n, (r, s, t) in enumerate(todo):
        if (folder / shard_name(s, t, r)).is_file():
            continue                      # another run on this folder made it meanwhile
        t1 = time.time()
        ctx = answers[s, t].context(r, r)
        extra = ({"target_chain": target_chain_drafter(target, t)}
                 if t > 0 and not is_gemma(a.model) else {})       # at T = 0 it is exact
        res = measure_root(target, ctx, budgets, drafters | extra, temperature=t)
        row = target.start(ctx)
        done = names + list(extra)
        dra = np.array([res.drafters[d] for d in done]).reshape(len(done), budgets.size)
        chain = np.full((len(done), CHAIN_K), np.nan)
        for di, d in enumerate(done):
            if d.endswith("chain"):
                pp = res.path_prob[d][:CHAIN_K]
                chain[di] = 0.0
                chain[di, :pp.size] = pp
        _save_atomic(folder / shard_name(s, t, r), optimal=res.optimal, budgets=budgets,
                     drafter_expected=dra, chain_path_prob=chain,
                     drafters=np.array(done, dtype=str), root_row=row.astype(np.float32),
                     context_len=np.int64(ctx.size), seconds=np.float64(time.time() - t1))
        print(f"{s} T={t:g} root {r + 1}/{roots}: {time.time() - t1:.1f} s "
              f"[{n + 1}/{len(todo)} in {time.time() - t0:.0f} s]", flush=True)


def merge(a, budgets: np.ndarray, folder: Path) -> xr.Dataset:
    """Every completed shard of ``folder`` as one dataset (missing roots NaN)."""
    pat = re.compile(r"^(\w+?)_T([0-9.e+-]+)_r(\d+)\.npz$")
    found = {}
    for f in sorted(folder.glob("*.npz")) if folder.is_dir() else []:
        m = pat.match(f.name)
        if m and m.group(1) in PROMPT_SETS:
            found[m.group(1), float(m.group(2)), int(m.group(3))] = f
    if not found:
        raise UserError(f"no completed roots in {folder}")
    sets = [s for s in PROMPT_SETS if any(k[0] == s for k in found)]
    temps = sorted({k[1] for k in found}, reverse=True)
    roots = max(k[2] for k in found) + 1
    seen = set()
    for f in found.values():
        with np.load(f) as z:
            seen |= {str(d) for d in z["drafters"]}
    names = [d for d in DRAFTERS if d in seen]
    nb = budgets.size
    opt = np.full((len(sets), len(temps), roots, nb), np.nan)
    dra = np.full((len(sets), len(temps), len(names), roots, nb), np.nan)
    chain = np.full((len(sets), len(temps), len(names), roots, CHAIN_K), np.nan)
    secs = np.full((len(sets), len(temps), roots), np.nan)
    ctxlen = np.zeros((len(sets), len(temps), roots), np.int64)
    rows = {}
    for (s, t, r), f in sorted(found.items()):
        si, ti = sets.index(s), temps.index(t)
        with np.load(f) as z:
            if not np.array_equal(z["budgets"], budgets):
                raise UserError(f"{f}: budgets differ from this run's")
            opt[si, ti, r] = z["optimal"]
            for di, d in enumerate(z["drafters"]):
                dra[si, ti, names.index(str(d)), r] = z["drafter_expected"][di]
                chain[si, ti, names.index(str(d)), r] = z["chain_path_prob"][di]
            secs[si, ti, r] = float(z["seconds"])
            ctxlen[si, ti, r] = int(z["context_len"])
            if t > 0:
                rows.setdefault((si, ti), []).append(z["root_row"].astype(np.float64))
    iid = np.full((len(sets), len(temps), nb), np.nan)
    iid_se = np.full_like(iid, np.nan)
    rng = np.random.default_rng(a.seed)
    for (si, ti), rr in sorted(rows.items()):
        t1 = time.time()
        iid[si, ti], iid_se[si, ti] = iid_view(np.array(rr), budgets, a.iid_trees,
                                               temps[ti], rng)
        print(f"i.i.d. view {sets[si]} T={temps[ti]:g}: {len(rr)} roots, {a.iid_trees} "
              f"trees ({time.time() - t1:.0f} s)", flush=True)
    n_roots = np.isfinite(opt[..., 0]).sum(-1)
    n_prompts = np.array([len(load_prompts(s)) for s in sets])
    prompt = (np.arange(roots)[None, :] // a.per_prompt) % n_prompts[:, None]
    dims = ("prompt_set", "temperature")
    return xr.Dataset(
        {"optimal": (dims + ("root", "budget"), opt,
                     {"long_name": "E[X | T_P] of the optimal tree on the real model",
                      "units": "1"}),
         "drafter_expected": (dims + ("drafter", "root", "budget"), dra,
                              {"long_name": "E[X | T_P] of the drafter's tree", "units": "1"}),
         "chain_path_prob": (dims + ("drafter", "root", "position"), chain,
                             {"long_name": "target path probability of a chain's k-th node "
                                           "(chain drafters; NaN for trees)", "units": "1"}),
         "iid_view": (dims + ("budget",), iid,
                      {"long_name": "E[X | T_P] of the matched i.i.d. view (NaN at T = 0)",
                       "units": "1"}),
         "iid_view_se": (dims + ("budget",), iid_se,
                         {"long_name": "standard error of iid_view over its trees",
                          "units": "1"}),
         "prompt_index": (("prompt_set", "root"), prompt,
                          {"long_name": "the prompt a root's context answers (roots of one "
                                        "prompt are correlated: cluster SEs by it)"}),
         "n_roots": (dims, n_roots, {"long_name": "completed roots", "units": "1"}),
         "root_seconds": (dims + ("root",), secs,
                          {"long_name": "wall time of the root's row", "units": "s"}),
         "context_length": (dims + ("root",), ctxlen,
                            {"long_name": "tokens in the root's context", "units": "1"})},
        coords={"prompt_set": sets, "temperature": temps, "drafter": names,
                "budget": budgets, "position": np.arange(1, CHAIN_K + 1),
                "root": np.arange(roots)},
        attrs=provenance_attrs(
            "real drafters on a real model: the environment's and the drafter's share of "
            "the shortfall",
            {"model": a.model, "roots_requested": a.roots_run, "quick": a.quick,
             "pmax": int(budgets[-1]), "eagle_head": "eagle_best" in names,
             "iid_trees": a.iid_trees, "part_a_only": is_gemma(a.model),
             "eagle_chain_max": EAGLE_CHAIN_MAX, "per_prompt": a.per_prompt,
             "k_max": K_MAX, "target_chain": TARGET_CHAIN},
            a.seed, " ".join(["python experiments/real_gap.py", *a.argv])))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="4 roots, P <= 64, 50 i.i.d. trees (for the notebook's tests)")
    ap.add_argument("--roots", type=int, default=300)
    ap.add_argument("--model", default="smollm2-135m-instruct",
                    help="catalogue name or .gguf; gemma3 runs part (a) only")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pmax", type=int, default=1024, help="largest budget (default 1024)")
    ap.add_argument("--sets", default=",".join(PROMPT_SETS))
    ap.add_argument("--temps", default="1,0")
    ap.add_argument("--iid-trees", type=int, default=IID_TREES,
                    help=f"trees of the matched i.i.d. view per set (default {IID_TREES})")
    ap.add_argument("--per-prompt", type=int, default=PER_PROMPT,
                    help=f"consecutive roots on one prompt's answer (default {PER_PROMPT})")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (gemma3)")
    ap.add_argument("--parts", default=None,
                    help="shard folder (default: --out with the suffix .parts)")
    ap.add_argument("--reverse", action="store_true",
                    help="run the prompts' blocks last first (a second run on the same "
                         "shard folder then meets the first in the middle)")
    ap.add_argument("--merge-only", action="store_true",
                    help="only merge the completed shards into --out")
    ap.add_argument("--out", default=str(DATA / "real_gap.nc"))
    a = ap.parse_args(argv)
    a.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        a.sets = _names(a.sets, PROMPT_SETS, "sets")
        a.temps = _temps(a.temps)
        if a.roots < 1 or a.pmax < 1 or a.per_prompt < 1 or a.iid_trees < 2:
            raise UserError("--roots, --pmax and --per-prompt must be >= 1 and "
                            "--iid-trees >= 2")
        budgets = BUDGETS[BUDGETS <= (64 if a.quick else a.pmax)]
        a.roots_run = 4 if a.quick else a.roots
        if a.quick:
            a.iid_trees = 50
        parts = Path(a.parts) if a.parts else Path(a.out).with_suffix(".parts")
        folder = shard_dir(parts, a.model + ("-quick" if a.quick else ""), a.seed,
                           int(budgets[-1]), a.per_prompt)
        folder.mkdir(parents=True, exist_ok=True)
        if not a.merge_only:
            run(a, budgets, a.roots_run, folder)
        ds = merge(a, budgets, folder)
    except UserError as exc:
        print(f"real_gap: {exc}")
        return 2
    write_netcdf_atomic(ds, a.out)
    print(f"wrote {a.out}: roots per (set, T) {ds.n_roots.values.tolist()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
