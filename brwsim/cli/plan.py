"""``brwsim plan`` and ``brwsim export-acceptance``: budgets for a GPU, settings for an engine."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from brwsim.cli.common import (
    DEFAULT_BUDGETS,
    add_command,
    parse_batch_sizes,
    write_output,
)
from brwsim.cli.output import add_format, emit, report, stdout_to_stderr
from brwsim.errors import UserError

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``plan`` and ``export-acceptance``."""
    pl = add_command(sub, "plan", _cmd_plan, "the draft budget P* that maximises tokens/s per "
                     "batch size, under a GPU roofline or a measured cost table")
    pl.add_argument("--family", default=None,
                    help="family string (default: an LLM-like mixture, not your workload: prefer "
                         "--bank or --tau/--at-budget)")
    pl.add_argument("--bank", metavar="FILE",
                    help="your model's logprob bank (brwsim import-logprobs): the empirical family of its rows")
    pl.add_argument("--tau", type=float, metavar="T",
                    help="your measured tokens per call (bonus included) at --at-budget: the family's "
                         "entropy is fitted to it as brwsim ceiling does")
    pl.add_argument("--at-budget", type=int, metavar="P", help="the draft budget of the measured --tau")
    pl.add_argument("--tau-se", type=float, default=0.0, metavar="SE",
                    help="standard error of --tau; carried through the fit to the speedup (default 0)")
    pl.add_argument("--shape", default="zipf-spread",
                    help="distribution shape of the --tau fit (default zipf-spread; see brwsim ceiling)")
    pl.add_argument("--vocab", type=int, default=32000, help="vocabulary of the --tau fit (default 32000)")
    pl.add_argument("--batch", default="1,8,64", help="batch sizes B, e.g. '1,8,64' or '1..256' (default 1,8,64)")
    pl.add_argument("--budgets", default=DEFAULT_BUDGETS,
                    help="shared draft budgets P offered (nodes over the batch; default 1..4096)")
    pl.add_argument("--iterations", type=int, default=300, help="steps simulated per batch size (default 300)")
    pl.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    pl.add_argument("--gpu", help="GPU preset of the roofline: a100, h100, h200, b200, rtx4090 (default h100)")
    pl.add_argument("--params", type=float, help="target model parameters, e.g. 8e9 (roofline)")
    pl.add_argument("--bytes-per-param", type=float, default=2.0, help="weight bytes per parameter (default 2: BF16)")
    pl.add_argument("--kv-bytes-per-token", type=float, default=0.0,
                    help="KV-cache bytes per context token over all layers (default 0)")
    pl.add_argument("--context", type=float, default=0.0, help="context length per request in tokens (default 0)")
    pl.add_argument("--overhead-ms", type=float, default=0.0, help="fixed ms per verifier call (default 0)")
    pl.add_argument("--peak-tflops", type=float, help="override the GPU's dense BF16 TFLOP/s")
    pl.add_argument("--bandwidth-tbs", type=float, help="override the GPU's memory bandwidth in TB/s")
    pl.add_argument("--cost-table", metavar="FILE", help="CSV with 'tokens' and 'ms' columns: measured "
                    "verifier call times (instead of the roofline)")
    pl.add_argument("--constant-ms", type=float, help="every verifier call takes this long (instead of the roofline)")
    pl.add_argument("--draft-level-ms", type=float, default=0.0, help="drafter ms per forest depth level (default 0)")
    pl.add_argument("--draft-node-ms", type=float, default=0.0, help="drafter ms per drafted node (default 0)")
    pl.add_argument("--out", default=None, help="netCDF output (default: none)")
    pl.add_argument("--quiet", action="store_true",
                     help="no progress bar or compile notice: stderr holds errors and warnings only")
    add_format(pl)
    exp = add_command(sub, "export-acceptance", _cmd_export, "a predicted acceptance schedule as "
                      "vLLM, SGLang and TensorRT-LLM synthetic-acceptance settings (JSON)", family=True)
    exp.add_argument("--policy", default="chain()", help="drafting policy (default chain(); "
                     "optimal() is the speed-of-light)")
    exp.add_argument("--budget", type=int, required=True, help="draft nodes P (a chain: num_speculative_tokens)")
    exp.add_argument("--iterations", type=int, default=20000, help="simulated calls (default 20000)")
    exp.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    exp.add_argument("--positions", type=int, help="schedule length K (default: budget for a chain, "
                     "else the deepest accepted path)")
    exp.add_argument("--out", default=None, help="also write the JSON here")


def _plan_family(args: argparse.Namespace) -> tuple[Any, str, Any]:
    """(family, where it came from, (h, h_se, shape, vocab) of a --tau fit or None)."""
    import math

    from brwsim.families import DEFAULT_FAMILY, Empirical, parse_family
    from brwsim.theory.ceiling import entropy_family, implied_entropy

    given = [name for name, v in (("--family", args.family), ("--bank", args.bank),
                                  ("--tau", args.tau)) if v is not None]
    if len(given) > 1:
        raise UserError(f"plan: give one of --family, --bank, --tau (got {', '.join(given)})")
    if (args.tau is None) != (args.at_budget is None):
        raise UserError("plan: --tau and --at-budget go together (a measured tokens per call "
                        "and the budget it was measured at)")
    if args.bank is not None:

        family = Empirical(path=args.bank)
        digest = family.input_files().get(str(args.bank), "?")
        return family, f"your bank {args.bank} (sha256 {digest[:16]})", None
    if args.tau is not None:

        se = args.tau_se
        if not (math.isfinite(se) and se >= 0):
            raise UserError(f"--tau-se must be >= 0, got {se:g}")
        h = implied_entropy(args.tau, args.at_budget, args.shape, args.vocab)
        if math.isinf(h):
            raise UserError(f"plan: tau = {args.tau:g} at P = {args.at_budget} constrains no entropy "
                            f"of shape {args.shape} (every entropy reaches it); use a larger tau or budget")
        h_se = 0.0
        if se > 0:           # the delta method through the fit: dh/dtau by a central difference
            lo = implied_entropy(max(args.tau - se, 1.0 + 1e-9), args.at_budget, args.shape, args.vocab)
            hi = implied_entropy(min(args.tau + se, args.at_budget + 1.0 - 1e-9), args.at_budget,
                                 args.shape, args.vocab)
            h_se = abs(lo - hi) / 2.0 if math.isfinite(lo) and math.isfinite(hi) else math.inf
        return (entropy_family(args.shape, h, args.vocab),
                f"fitted to your tau = {args.tau:g} ± {se:g} at P = {args.at_budget}: shape "
                f"{args.shape}, mean entropy h* = {h:.4g} ± {h_se:.2g} nats (an optimal tree's "
                "ceiling; a real drafter reaches tau at a lower entropy, so this plan is an upper bound)",
                (h, h_se, args.shape, args.vocab))
    if args.family is not None:
        return parse_family(args.family), "your --family", None
    return (parse_family(DEFAULT_FAMILY), "the default family, an LLM-like mixture: not your "
            "workload (give --bank FILE or --tau T --at-budget P for your own numbers)", None)


def _cmd_plan(args: argparse.Namespace) -> int:
    import numpy as np

    from brwsim.cost import make_cost
    from brwsim.plan import plan
    from brwsim.textform import format_table, parse_budgets
    from brwsim.theory.ceiling import entropy_family
    from brwsim.validate import check_output_path

    if args.out:
        check_output_path(args.out, "--out")          # before the simulation, not after it
    family, source, fit = _plan_family(args)
    sizes = parse_batch_sizes(args.batch)
    budgets = parse_budgets(args.budgets)
    if args.iterations < 1:
        raise UserError(f"--iterations must be >= 1, got {args.iterations}")
    if args.seed < 0:
        raise UserError(f"--seed must be >= 0, got {args.seed}")
    roofline = args.cost_table is None and args.constant_ms is None
    if roofline and args.params is None:
        raise UserError("plan: give --params (the target model's parameters) or --cost-table FILE")
    gpu = args.gpu if args.gpu is not None else "h100" if roofline else None   # '' is refused
    cost = make_cost(gpu=gpu, params=args.params,     # make_cost refuses a mixed verifier
                     bytes_per_param=args.bytes_per_param, kv_bytes_per_token=args.kv_bytes_per_token,
                     context=args.context, overhead_ms=args.overhead_ms,
                     peak_tflops=args.peak_tflops, bandwidth_tbs=args.bandwidth_tbs,
                     table=args.cost_table, constant_ms=args.constant_ms,
                     draft_level_ms=args.draft_level_ms, draft_node_ms=args.draft_node_ms)
    show = not args.quiet and sys.stderr.isatty()
    command = "brwsim " + " ".join(shlex.quote(a) for a in args.argv)
    ds = plan(family, cost, sizes, budgets, args.iterations, args.seed, progress=show,
              command=command)
    ds.attrs["family_source"] = source
    spread = None
    if fit is not None and fit[1] > 0 and np.isfinite(fit[1]):
        # the measurement's SE through h*: the same plan at h* -/+ SE (same seed, paired)

        h, h_se, shape, vocab = fit
        ends = [plan(entropy_family(shape, max(x, 1e-3), vocab), cost, sizes, budgets,
                     args.iterations, args.seed)["best_speedup"].values for x in (h - h_se, h + h_se)]
        spread = np.abs(ends[0] - ends[1]) / 2.0
        ds["best_speedup_measurement_se"] = ("batch", spread, {
            "long_name": "SE of best_speedup from the SE of the measured tau (plans at h* -/+ SE)",
            "units": "1"})
    if args.format != "table":
        rows = []
        for i, b in enumerate(ds["batch"].values):
            p = int(ds["best_budget"][i])
            j = int(np.nonzero(ds["budget"].values == p)[0][0]) if p > 0 else None
            rows.append({
                "batch": int(b), "best_budget": p, "best_budget_per_request": p / b,
                "best_tokens_per_call": float(ds["best_tokens_per_call"][i]),
                "best_tokens_per_call_se": float(ds["best_tokens_per_call_se"][i]),
                "best_step_time_ms": float(ds["best_step_time"][i]) * 1e3,
                "plain_step_time_ms": float(ds["plain_step_time"][i]) * 1e3,
                "best_speedup": float(ds["best_speedup"][i]),
                "best_speedup_se": float(ds["best_speedup_se"][i]),
                "best_speedup_measurement_se": None if spread is None else float(spread[i]),
                "best_tokens_per_second": float(ds["best_tokens_per_second"][i]),
                "sharing_gain": float(ds["sharing_gain"][i, j]) if j is not None and b > 1 else None})
        units = {"batch": "requests", "best_budget": "draft tokens over the batch (0: do not speculate)",
                 "best_budget_per_request": "draft tokens", "best_tokens_per_call": "tokens per request per call",
                 "best_tokens_per_call_se": "tokens", "best_step_time_ms": "ms", "plain_step_time_ms": "ms",
                 "best_speedup": "1 (tokens/s over plain decoding)", "best_speedup_se": "1",
                 "best_speedup_measurement_se": "1", "best_tokens_per_second": "tokens/s",
                 "sharing_gain": "1 (shared over equal split)"}
        emit(args.format, report("plan", rows, units, family=repr(family), family_source=source,
                                 cost=cost.describe(), iterations=args.iterations, seed=args.seed,
                                 out=args.out or None))
        with stdout_to_stderr(args.format):
            write_output(ds, args.out)
        return 0
    print(f"family: {family!r}   iterations: {args.iterations}   seed: {args.seed}")
    print(f"family source: {source}")
    print(f"cost: {cost.describe()}")
    rows = []
    for i, b in enumerate(ds["batch"].values):
        p = int(ds["best_budget"][i])
        j = int(np.nonzero(ds["budget"].values == p)[0][0]) if p > 0 else None
        gain = f"{float(ds['sharing_gain'][i, j]):.3f}" if j is not None and b > 1 else "-"
        rows.append([str(b), str(p), f"{p / b:.3g}", f"{float(ds['best_tokens_per_call'][i]):.3f}",
                     f"{float(ds['best_tokens_per_call_se'][i]):.3f}",
                     f"{float(ds['best_step_time'][i]) * 1e3:.3f}",
                     f"{float(ds['plain_step_time'][i]) * 1e3:.3f}",
                     f"{float(ds['best_speedup'][i]):.3f}", f"{float(ds['best_speedup_se'][i]):.3f}",
                     f"{float(ds['best_tokens_per_second'][i]):.4g}", gain])
    print(format_table(rows, ["B", "P*", "P*/B", "tokens/call", "SE", "step ms", "plain ms",
                              "speedup", "SE", "tokens/s", "shared/split"]))
    for line in edge_notes(ds["batch"].values, ds["best_budget"].values, ds["budget"].values):
        print(line)
    if spread is not None:
        print("speedup SE from your tau's SE (plans at h* -/+ SE): "
              + ", ".join(f"B={int(b)}: {s:.3f}" for b, s in zip(ds["batch"].values, spread)))
    print("tokens/call: per request, 1 + E[X]/B; speedup: tokens/s over plain decoding "
          "(B tokens per call); P* = 0: speculation does not pay")
    write_output(ds, args.out)
    return 0


def edge_notes(batches: Any, best: Any, budgets: Any) -> list[str]:
    """One note per batch size whose P* is the largest budget offered (the optimum may lie
    beyond it) or the smallest one above 1 (it may lie below it)."""
    lo, hi = int(min(budgets)), int(max(budgets))
    out = []
    for b, p in zip(batches, best):
        b, p = int(b), int(p)
        if p > 0 and p == hi:
            out.append(f"note: B={b}: P* = {p} is the largest of --budgets; the optimum may "
                       "lie beyond it (offer larger budgets)")
        elif p > 1 and p == lo:
            out.append(f"note: B={b}: P* = {p} is the smallest of --budgets; the optimum may "
                       "lie below it (offer smaller budgets)")
    return out


def _cmd_export(args: argparse.Namespace) -> int:
    import json

    from brwsim.export import engine_settings, predicted_schedule
    from brwsim.io import atomic_path
    from brwsim.validate import check_output_path

    if args.out:
        check_output_path(args.out, "--out")
    sched = predicted_schedule(args.family, args.policy, args.budget, args.iterations,
                               args.seed, args.positions)
    out = engine_settings(sched)
    out["predicted"] = {"family": args.family, "policy": args.policy, "budget": args.budget,
                        "iterations": args.iterations, "seed": args.seed,
                        "acceptance_length_se": round(sched.acceptance_length_se, 6)}
    text = json.dumps(out, indent=2) + "\n"
    if args.out:        # stdout first, inside the write: if it fails, no file is left
        with atomic_path(args.out) as tmp:
            tmp.write_text(text, encoding="utf-8")
            print(text, end="")
            sys.stdout.flush()
    else:
        print(text, end="")
    return 0
