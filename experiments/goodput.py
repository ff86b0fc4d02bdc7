"""Speed-of-light goodput: the best draft budget and speedup against batch size.

For each family and batch size B, optimal shared forests of every budget P are grown on
the same roots (``brwsim.simulate(batch=B)``, the equal split alongside). Each
(GPU, model) roofline then prices every step (``brwsim.plan.plan_from_runs``): the
verifier reads the weights once and every request's KV cache at a context of 512 or 8192
tokens; drafting is free (the speed-of-light of the verifier, the figure) or costs an
EAGLE-style head (one decoder layer plus the LM head) read once per forest level. Outputs: the speedup over plain
decoding at every (B, P), P* and its speedup per B, and the gain of a shared budget over
an equal split. Families: the LLM-like default mixture and order-5 character n-grams of
English prose and Python code. Writes ``data/goodput.nc`` and ``data/goodput.png``.

Models (dense, BF16 weights and KV cache; KV bytes per token = 2 x layers x KV heads x
head dim x 2 bytes, Llama-3 shapes): 8B (32 layers, 8 KV heads, head dim 128: 128 KiB per
token) on one GPU, and 70B (80 layers, 8 KV heads, 128: 320 KiB per token) on four GPUs
with ideal tensor parallelism (FLOP/s, bandwidth and memory times four, no
communication cost). Configurations whose weights and KV cache exceed the memory are
flagged (``fits`` = 0) and left out of the figure.

Usage::

    python experiments/goodput.py [--quick] [--jobs 2] [--replot]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import xarray as xr
from joblib import Parallel, delayed

from brwsim import parse_family, simulate
from brwsim.cost import GPU, GPUS, CostModel, Drafter, Roofline
from brwsim.families import DEFAULT_FAMILY
from brwsim.io import provenance_attrs, write_netcdf_atomic
from brwsim.plan import plan_from_runs
from brwsim.simulate import summarize, validate_budgets

DATA = Path(__file__).resolve().parents[1] / "data"
FAMILIES = {"LLM-like mixture (default)": DEFAULT_FAMILY,
            "n-gram prose (order 5)": "ngram(corpus=prose, order=5)",
            "n-gram code (order 5)": "ngram(corpus=code, order=5)"}
GPU_NAMES = ["a100", "h100", "b200"]
#: label -> (parameters, KV-cache bytes per context token, GPUs in tensor parallel,
#: parameters of an EAGLE-style draft head: one decoder layer plus the LM head)
MODELS = {"8B": (8.0e9, 2 * 32 * 8 * 128 * 2, 1, 8.0e9 / 32 + 128256 * 4096),
          "70B": (70.6e9, 2 * 80 * 8 * 128 * 2, 4, 70.6e9 / 80 + 128256 * 8192)}
#: free drafting (the verifier's speed-of-light) or an EAGLE-style head costing one
#: memory-bound read of its weights per forest level
DRAFTERS = ["free", "eagle-head"]
CONTEXTS = [512, 8192]
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
BUDGETS = sorted({1} | {int(m * 2 ** k) for k in range(13) for m in (1, 3)} - {0})


def budgets_for(quick: bool) -> np.ndarray:
    b = validate_budgets([p for p in BUDGETS if p <= (1024 if quick else 4096)])
    return b


def cost_of(gpu: str, model: str, context: int, drafter: str = "free") -> tuple[CostModel, GPU]:
    """The roofline of ``model`` on ``gpu`` (times its tensor-parallel degree) and the device."""
    params, kv, tp, head = MODELS[model]
    g = GPUS[gpu]
    device = GPU(f"{tp} x {g.name}", tp * g.peak_flops, tp * g.bandwidth, tp * g.memory, g.source)
    per_level = 2.0 * head / device.bandwidth if drafter == "eagle-head" else 0.0
    return CostModel(Roofline(params, device, 2.0, kv, context), Drafter(per_level=per_level)), device


def simulate_family(label: str, text: str, budgets: np.ndarray, batches: list[int], trees: int,
                    seed: int):
    """One family: the forests of every batch size (returned as small per-iteration arrays)."""
    fam = parse_family(text)
    t0 = time.perf_counter()
    runs = []
    for b in batches:
        ds = simulate(fam, budgets, trees, seed=seed, batch=b)
        keep = ["expected_accepted", "depth"] + (["expected_accepted_split"] if b > 1 else [])
        s = summarize(ds)
        gain = s["sharing_gain"].values if b > 1 else np.ones(budgets.size)
        gain_se = s["sharing_gain_se"].values if b > 1 else np.zeros(budgets.size)
        runs.append((ds[keep].load(), gain, gain_se))
    return label, runs, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description="speed-of-light goodput against batch size")
    ap.add_argument("--quick", action="store_true", help="fewer trees, batch sizes and budgets")
    ap.add_argument("--jobs", type=int, default=None,
                    help="worker processes (default 2; 1 with --quick, a smoke run)")
    ap.add_argument("--out", default=str(DATA / "goodput.nc"))
    ap.add_argument("--replot", action="store_true", help="redraw the figure from --out, no simulation")
    args = ap.parse_args()
    args.jobs = args.jobs or (1 if args.quick else 2)
    if args.replot:
        from brwsim.io import open_dataset

        out = Path(args.out)
        ds = open_dataset(out)
        figure(ds, out.with_suffix(".png"))
        report(ds)
        return
    budgets = budgets_for(args.quick)
    batches = [1, 4, 16, 64] if args.quick else BATCHES
    trees = 60 if args.quick else 400
    t0 = time.perf_counter()
    rows = Parallel(n_jobs=args.jobs)(delayed(simulate_family)(k, v, budgets, batches, trees, 11 + i)
                                      for i, (k, v) in enumerate(FAMILIES.items()))
    fam_labels = [r[0] for r in rows]
    configs = [(g, m, c, d) for d in DRAFTERS for g in GPU_NAMES for m in MODELS for c in CONTEXTS]
    nf, nc, nb, npb = len(rows), len(configs), len(batches), budgets.size
    speed, speed_se = np.empty((nf, nc, nb, npb)), np.empty((nf, nc, nb, npb))
    p_star, best, best_se = np.empty((nf, nc, nb), np.int64), np.empty((nf, nc, nb)), np.empty((nf, nc, nb))
    gain_star, tpc_star = np.empty((nf, nc, nb)), np.empty((nf, nc, nb))
    fits = np.empty((nc, nb), np.int8)
    ridge = np.empty((nc, nb))
    gain = np.array([[g for _, g, _ in r[1]] for r in rows])            # family, batch, budget
    gain_se = np.array([[s for _, _, s in r[1]] for r in rows])
    tpc = np.empty((nf, nb, npb))
    for j, (g, m, c, d) in enumerate(configs):
        cost, device = cost_of(g, m, c, d)
        for k, b in enumerate(batches):
            need = cost.verifier.bytes_moved(b)
            fits[j, k] = int(need <= device.memory)
            ridge[j, k] = cost.verifier.ridge_tokens(b)
        for i, (_, runs, _) in enumerate(rows):
            datasets = []
            for (ds, _, _), b in zip(runs, batches):
                ds = ds.copy()
                ds.attrs["batch"] = b
                datasets.append(ds)
            pl = plan_from_runs(datasets, cost)
            speed[i, j], speed_se[i, j] = pl.speedup.values, pl.speedup_se.values
            p_star[i, j], best[i, j], best_se[i, j] = (pl.best_budget.values, pl.best_speedup.values,
                                                       pl.best_speedup_se.values)
            tpc_star[i, j] = pl.best_tokens_per_call.values
            tpc[i] = pl.tokens_per_call.values
            for k in range(nb):
                hit = np.nonzero(budgets == p_star[i, j, k])[0]
                gain_star[i, j, k] = gain[i, k, hit[0]] if hit.size else np.nan
    cfg_labels = [f"{m} on {cost_of(g, m, c)[1].name}, context {c}, {d} drafting"
                  for g, m, c, d in configs]
    a = lambda long, units="1": {"long_name": long, "units": units}  # noqa: E731
    ds = xr.Dataset(
        {"speedup": (("family", "config", "batch", "budget"), speed,
                     a("tokens/s over plain decoding at a shared budget P (free drafting)")),
         "speedup_se": (("family", "config", "batch", "budget"), speed_se, a("standard error of speedup")),
         "best_budget": (("family", "config", "batch"), p_star, a("P*: budget of the highest speedup (0: none pays)")),
         "best_speedup": (("family", "config", "batch"), best, a("speed-of-light speedup at P*")),
         "best_speedup_se": (("family", "config", "batch"), best_se, a("standard error of best_speedup")),
         "best_tokens_per_call": (("family", "config", "batch"), tpc_star, a("tokens per request per call at P*")),
         "sharing_gain_at_best": (("family", "config", "batch"), gain_star,
                                  a("E[X | shared] / E[X | equal split] at P*")),
         "tokens_per_call": (("family", "batch", "budget"), tpc, a("tokens per request per call, 1 + E[X_F] / B")),
         "sharing_gain": (("family", "batch", "budget"), gain, a("E[X | shared budget] / E[X | equal split]")),
         "sharing_gain_se": (("family", "batch", "budget"), gain_se, a("standard error of sharing_gain")),
         "fits": (("config", "batch"), fits, a("1 when weights + KV cache fit in the GPUs' memory")),
         "ridge_tokens": (("config", "batch"), ridge, a("tokens per call at which the verifier turns compute-bound")),
         "family_string": (("family",), [FAMILIES[k] for k in fam_labels], a("family string form", ""))},
        {"family": ("family", fam_labels, a("family", "")), "config": ("config", cfg_labels, a("model on GPUs", "")),
         "gpu": ("config", [g for g, _, _, _ in configs], a("GPU preset", "")),
         "model": ("config", [m for _, m, _, _ in configs], a("model size", "")),
         "context": ("config", np.asarray([c for _, _, c, _ in configs]), a("context length per request (tokens)")),
         "drafter": ("config", [d for _, _, _, d in configs],
                     a("free drafting, or an EAGLE-style head: one read of its weights per level", "")),
         "batch": ("batch", np.asarray(batches), a("requests per verifier call B")),
         "budget": ("budget", budgets, a("shared draft budget P (nodes over the batch)"))})
    config = {"families": FAMILIES, "gpus": GPU_NAMES, "models": {k: list(v) for k, v in MODELS.items()},
              "contexts": CONTEXTS, "drafters": DRAFTERS, "batches": batches, "budgets": budgets.tolist(), "trees": trees,
              "quick": bool(args.quick)}
    ds.attrs.update(provenance_attrs("brwsim goodput: speed-of-light speedup and P* against batch size",
                                     config, 11, "python experiments/goodput.py"
                                     + (" --quick" if args.quick else "")))
    ds.attrs["run_seconds"] = round(time.perf_counter() - t0, 1)
    ds.attrs["simulation_seconds_per_family"] = ", ".join(f"{r[0]}: {r[2]:.0f}" for r in rows)
    out = Path(args.out)
    write_netcdf_atomic(ds, out)
    figure(ds, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')} in {time.perf_counter() - t0:.0f} s")
    report(ds)


def figure(ds: xr.Dataset, path: Path | None = None):
    """Speedup at P*, P*/B and the sharing gain against B, one column per family; GPU and
    model by colour, context by line style (brwsim.plotting); returns the figure."""
    from brwsim import plotting

    fams = ds.family.values
    fig, axes = plotting.new_figure(3, len(fams), width=4.2, height=3.0)
    b = ds.batch.values
    shown = [j for j in range(ds.sizes["config"])
             if ds.gpu.values[j] in ("a100", "h100") and ds.drafter.values[j] == "free"]
    keys = [("a100", "8B"), ("a100", "70B"), ("h100", "8B"), ("h100", "70B")]
    colors = {k: plotting.COLORS[i] for i, k in enumerate(keys)}
    for i, fam in enumerate(fams):
        for j in shown:
            ok = ds.fits.values[j].astype(bool)
            ctx = int(ds.context.values[j])
            style = "-" if ctx == max(CONTEXTS) else ":"
            key = (str(ds.gpu.values[j]), str(ds.model.values[j]))
            label = f"{key[1]} on {key[0].upper()}, context {ctx}"
            axes[0, i].errorbar(b[ok], ds.best_speedup.values[i, j][ok], ds.best_speedup_se.values[i, j][ok],
                                ls=style, color=colors[key], marker="o", ms=3, label=label)
            pays = ok & (ds.best_budget.values[i, j] > 0)       # P* = 0: speculation does not pay
            axes[1, i].plot(b[pays], ds.best_budget.values[i, j][pays] / b[pays], ls=style,
                            color=colors[key], marker="o", ms=3, label=label)
        for k, per in enumerate((1, 4, 16)):
            kk = [np.nonzero(ds.budget.values == per * bb)[0] for bb in b]
            sel = [(bb, ds.sharing_gain.values[i, n, idx[0]]) for n, (bb, idx) in enumerate(zip(b, kk))
                   if idx.size and bb > 1]
            if sel:
                axes[2, i].plot(*zip(*sel), marker="o", ms=3, color=plotting.COLORS[k],
                                label=f"P = {per} B")
        axes[0, i].axhline(1.0, color="grey", lw=0.8)
        axes[0, i].set_title(f"speed-of-light goodput: {fam}", fontsize=plotting.TITLE_SIZE)
        axes[0, i].set_ylabel("speedup at P*")
        axes[1, i].set_title(f"best budget per request: {fam}", fontsize=plotting.TITLE_SIZE)
        axes[2, i].set_title(f"one shared budget vs an equal split: {fam}", fontsize=plotting.TITLE_SIZE - 1)
        axes[1, i].set_ylabel("P* / B (nodes per request)")
        axes[1, i].set_yscale("log", base=2)
        axes[2, i].set_ylabel("shared / equal-split E[X]")
        for r in range(3):
            axes[r, i].set_xscale("log", base=2)
            axes[r, i].set_xlabel("batch size B")
            axes[r, i].grid(True, alpha=0.3)
    plotting.legend(axes[0, -1], title="target, GPU, context")
    plotting.legend(axes[1, -1], title="target, GPU, context")
    plotting.legend(axes[2, -1], title="shared budget")
    fig.suptitle("Speed-of-light goodput under a roofline (free drafting, BF16; solid: context "
                 f"{max(CONTEXTS)}, dotted: {min(CONTEXTS)}; B200 is in the data)",
                 fontsize=plotting.TITLE_SIZE + 1)
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


def report(ds: xr.Dataset) -> None:
    """Print P* and the speedup per (family, config, batch)."""
    for i, fam in enumerate(ds.family.values):
        print(f"\n{fam}")
        for j, cfg in enumerate(ds.config.values):
            cells = []
            for k, b in enumerate(ds.batch.values):
                mark = "" if ds.fits.values[j, k] else "!"
                cells.append(f"B={b}: P*={int(ds.best_budget.values[i, j, k])} "
                             f"x{ds.best_speedup.values[i, j, k]:.2f}{mark}")
            print(f"  {cfg:55s} " + ", ".join(cells))


if __name__ == "__main__":
    main()
