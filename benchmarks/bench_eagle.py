"""Drafting speed of the EAGLE-style head's numpy runtime (brwsim.drafters.eagle).

Runs on one thread (BLAS pinned to one core before numpy loads): the head starts a
context of ``--context`` positions with features, then builds ``--roots`` best-first
draft trees of ``--budget`` nodes (:func:`brwsim.drafters.shapes.best_first`) and EAGLE-2
dynamic trees (depth 6, top-k 10, 59 nodes). Reports draft nodes evaluated per second
(the head's layer plus its reduced LM head and the tree builder's own work; the target
is not run), per wall second and per CPU second of this process, beside numpy's
float32 matmul rate measured in the same process. The head's speed depends only on its
shapes, so the embedding and LM head are the target's when the model is fetched
(``brwsim models fetch smollm2-135m-instruct``), else random arrays of the same shapes.

Usage::

    python benchmarks/bench_eagle.py [--head DIR] [--roots 8] [--budget 64] [--context 256]
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from brwsim.drafters.eagle import EagleHead, load_head  # noqa: E402
from brwsim.drafters.shapes import best_first, dynamic  # noqa: E402

HEAD = Path(__file__).resolve().parents[1] / "brwsim" / "data" / "drafters" / "eagle-smollm2"


class Counting:
    """Counts the nodes a draft model evaluates."""

    def __init__(self, inner):
        self.inner, self.nodes = inner, 0
        self.vocab_size, self.max_positions, self.dtype = (inner.vocab_size, inner.max_positions,
                                                           inner.dtype)

    def extend(self, parents, tokens):
        self.nodes += len(tokens)
        return self.inner.extend(parents, tokens)


def target_arrays(cfg):
    try:
        from brwsim.families.checkpoint import TensorMap, open_checkpoint
        from brwsim.models.catalogue import local_path

        _, t = open_checkpoint(local_path("smollm2-135m-instruct"))
        emb = TensorMap(t)["model.embed_tokens.weight"]
        return emb, emb, "SmolLM2's (tied)"
    except Exception:                                  # not fetched: shapes are what matter
        rng = np.random.default_rng(0)
        a = rng.normal(0, 0.02, (cfg["vocab_size"], cfg["hidden_size"])).astype(np.float32)
        return a, a, "random, SmolLM2's shapes"


def matmul_gflops(d: int) -> float:
    a = np.random.default_rng(1).normal(size=(64, 2 * d)).astype(np.float32)
    b = np.random.default_rng(2).normal(size=(2 * d, d)).astype(np.float32)
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 1.0:
        a @ b
        reps += 1
    return reps * 2 * 64 * 2 * d * d / (time.perf_counter() - t0) / 1e9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--head", default=str(HEAD))
    ap.add_argument("--roots", type=int, default=8)
    ap.add_argument("--budget", type=int, default=64)
    ap.add_argument("--context", type=int, default=256)
    a = ap.parse_args(argv)
    cfg, _ = load_head(a.head)
    emb, lm, what = target_arrays(cfg)
    head = EagleHead(a.head, emb, lm, dtype="float32")
    rng = np.random.default_rng(3)
    peak = matmul_gflops(cfg["hidden_size"])
    for name, build in (("best-first P=%d" % a.budget, lambda h, r: best_first(h, r, a.budget)),
                        ("EAGLE-2 dynamic(6, 10, 59)", lambda h, r: dynamic(h, r, 6, 10, 59))):
        nodes, secs, cpu = 0, 0.0, 0.0
        for _ in range(a.roots):
            ctx = rng.integers(0, cfg["vocab_size"], a.context)
            feats = rng.normal(0, 1, (a.context, cfg["hidden_size"])).astype(np.float32)
            root = head.start(ctx, feats)
            counted = Counting(head)
            t0, c0 = time.perf_counter(), time.process_time()
            build(counted, root)
            secs += time.perf_counter() - t0
            cpu += time.process_time() - c0
            nodes += counted.nodes
        print(f"{name}: {nodes / secs:,.0f} draft nodes/s ({nodes} nodes in {secs:.2f} s, "
              f"one thread; {nodes / cpu:,.0f} per CPU second; embedding and LM head {what})")
    print(f"numpy float32 matmul (64 x {2 * cfg['hidden_size']}) @ ({2 * cfg['hidden_size']} x "
          f"{cfg['hidden_size']}): {peak:.1f} GFLOP/s in the same process")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
