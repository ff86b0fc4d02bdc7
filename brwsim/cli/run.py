"""``brwsim run``: optimal draft trees (and policies) on one family; a table and a netCDF file."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from brwsim.cli.common import (
    DEFAULT_BUDGETS,
    add_command,
    bound_check,
    family_epilog,
    reason_lines,
    small_budget_column,
    value_se,
    write_output,
)
from brwsim.cli.output import add_format, emit, report, stdout_to_stderr
from brwsim.errors import UserError

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``run``."""
    run = add_command(sub, "run", _cmd_run,
                      "optimal draft trees on one family; prints a table, writes netCDF", family=True)
    run.epilog_source = lambda: family_epilog(policies=True)
    run.add_argument("--budgets", default=DEFAULT_BUDGETS,
                     help="comma list and ranges: '1,4,16', '1..4096' (powers of 2), '1-8' (default 1..4096)")
    run.add_argument("--iterations", type=int, default=2000, help="independent trees (default 2000)")
    run.add_argument("--seed", type=int, default=0, help="root seed, any non-negative integer (default 0)")
    run.add_argument("--out", default="run.nc", help="netCDF output (default run.nc)")
    run.add_argument("--no-out", action="store_true", help="print the table only, write no file")
    run.add_argument("--policy", action="append", metavar="POLICY",
                     help="also evaluate a drafting policy on the same trees, e.g. "
                          "'dynamic(depth=6, topk=10)' (repeatable; optimal() is always first)")
    run.add_argument("--batch", type=int, default=1,
                     help="requests B sharing each budget: forests of B roots, the equal split alongside (default 1)")
    run.add_argument("--quiet", action="store_true",
                     help="no progress bar or compile notice: stderr holds errors and warnings only")
    add_format(run)


def _cmd_run(args: argparse.Namespace) -> int:
    from brwsim.families import parse_family
    from brwsim.simulate import simulate, summarize, validate_budgets
    from brwsim.textform import format_table, parse_budgets
    from brwsim.validate import check_output_path

    if args.no_out:
        args.out = None
    family = parse_family(args.family)
    budgets = validate_budgets(parse_budgets(args.budgets))
    if args.iterations < 1:
        raise UserError(f"--iterations must be >= 1, got {args.iterations}")
    if args.seed < 0:
        raise UserError(f"--seed must be >= 0, got {args.seed}")
    policies = _run_policies(args.policy)
    if args.batch < 1:
        raise UserError(f"--batch must be >= 1 (B >= 1), got {args.batch}")
    if args.batch > 1 and policies:
        raise UserError("--policy cannot be combined with --batch > 1 (only the optimal allocation)")
    if args.out:        # writable, with room, before the simulation (not after it)
        n_pol = len(policies) if policies else 1
        check_output_path(args.out, "--out", n_pol * budgets.size * float(args.iterations) * 16)
    show = not args.quiet and sys.stderr.isatty()
    ds = simulate(family, budgets, args.iterations, seed=args.seed, progress=show, batch=args.batch,
                  policies=policies, command="brwsim " + " ".join(shlex.quote(a) for a in args.argv))
    if args.batch > 1:
        return _batch_run_table(ds, family, args)
    opt = ds.isel(policy=0) if policies else ds          # the optimal policy comes first
    s = summarize(opt)
    mu, mu2 = float(ds["mu"]), float(ds["mu2"])
    small, small_note = small_budget_column(family, ds["budget"].values)
    if args.format != "table":
        doc = _run_report(ds, s, small, family, args)
        emit(args.format, doc, doc.get("policies"))
        with stdout_to_stderr(args.format):
            write_output(ds, args.out)
        return 0
    rows = []
    for i, p in enumerate(ds["budget"].values):
        e, e_se = float(s.expected_mean[i]), float(s.expected_se[i])
        rows.append([str(p), f"{float(s.accepted_mean[i]):.4f}", f"{float(s.accepted_se[i]):.4f}",
                     f"{float(s.tokens_per_call[i]):.4f}", f"{e:.4f} ± {e_se:.4f}",
                     _fmt_se(ds, "upper_bound", i), value_se(small.value[i], small.se[i]),
                     bound_check(e, e_se, float(ds["upper_bound"][i]),
                                 float(ds["upper_bound_se"][i])),
                     _fmt_se(ds, "prediction", i), value_se(float(ds["paper_bound"][i])),
                     f"{float(s.depth_mean[i]):.2f}"])
    header = ["P", "mean X", "SE", "tau=X+1", "E[X|T] ± SE", "upper bound", "small-P bound",
              "E[X|T] vs bound", "prediction", "paper bound", "depth"]
    print(f"family: {family!r}   iterations: {args.iterations}   seed: {args.seed}")
    se = f" (SE {float(ds['mu_se']):.2g}, {float(ds['mu2_se']):.2g})" if float(ds["mu_se"]) > 0 else " (exact)"
    print(f"mu = {mu:.6g} nats, mu2 = {mu2:.6g} nats^2{se}; natural logarithms throughout")
    print(format_table(rows, header))
    print("upper bound: a proven upper bound on E[X] (± its SE where the spine law is sampled); "
          "small-P bound: also proven, sharp at small P (lam chosen per sampled tree; "
          f"brwsim theory){small_note}; 'within SE': E[X|T] above the upper bound by at most "
          "4 SE (sampling error)")
    for line in reason_lines(ds, ("upper_bound", "prediction", "paper_bound")):
        print(line)
    if policies:
        print(_policy_table(ds))
    write_output(ds, args.out)
    return 0


#: Units of the fields of ``run``'s JSON and CSV rows.
RUN_UNITS = {
    "budget": "draft tokens (tree nodes, root excluded)", "accepted_mean": "tokens",
    "accepted_se": "tokens", "tokens_per_call": "tokens per target call",
    "expected_mean": "tokens", "expected_se": "tokens", "upper_bound": "tokens",
    "upper_bound_se": "tokens", "small_budget_bound": "tokens",
    "small_budget_bound_se": "tokens", "bound_check": "below | within SE | ABOVE (bug) | n/a",
    "prediction": "tokens", "prediction_se": "tokens", "paper_bound": "tokens",
    "depth_mean": "tree levels", "policy": "policy string", "fraction_of_optimal": "1",
    "fraction_se": "1", "mu": "nats", "mu2": "nats^2",
}


def _run_report(ds, s, small, family, args: argparse.Namespace) -> dict:
    """``run``'s report (:func:`brwsim.cli.output.report`): one row per budget of the
    optimal trees; with policies, ``policies``: one row per (policy, budget)."""
    from brwsim.simulate import policy_gap

    rows = []
    for i, p in enumerate(ds["budget"].values):
        e, e_se = float(s.expected_mean[i]), float(s.expected_se[i])
        ub, ub_se = float(ds["upper_bound"][i]), float(ds["upper_bound_se"][i])
        rows.append({
            "budget": int(p), "accepted_mean": float(s.accepted_mean[i]),
            "accepted_se": float(s.accepted_se[i]), "tokens_per_call": float(s.tokens_per_call[i]),
            "expected_mean": e, "expected_se": e_se, "upper_bound": ub, "upper_bound_se": ub_se,
            "small_budget_bound": float(small.value[i]), "small_budget_bound_se": float(small.se[i]),
            "bound_check": bound_check(e, e_se, ub, ub_se),
            "prediction": float(ds["prediction"][i]),
            "prediction_se": float(ds["prediction_se"][i]) if "prediction_se" in ds else 0.0,
            "paper_bound": float(ds["paper_bound"][i]), "depth_mean": float(s.depth_mean[i])})
    doc = report("run", rows, RUN_UNITS, family=repr(family), iterations=args.iterations,
                 seed=args.seed, mu=float(ds["mu"]), mu2=float(ds["mu2"]),
                 mu_se=float(ds["mu_se"]), mu2_se=float(ds["mu2_se"]),
                 reasons={v: ds[v].attrs["reason"] for v in ("upper_bound", "prediction", "paper_bound")
                          if "reason" in ds[v].attrs},
                 out=args.out or None)
    if "policy" in ds.dims:
        g = policy_gap(ds)
        doc["policies"] = [
            {"policy": str(name), "budget": int(p), "expected_mean": float(g.expected_mean[k, j]),
             "fraction_of_optimal": float(g.fraction_of_optimal[k, j]),
             "fraction_se": float(g.fraction_se[k, j])}
            for k, name in enumerate(ds["policy"].values) for j, p in enumerate(ds["budget"].values)]
    return doc


def _fmt_se(ds, name: str, i: int) -> str:
    """:func:`value_se` of a per-budget variable of ``ds`` and its ``_se`` companion."""
    se = float(ds[name + "_se"][i]) if name + "_se" in ds else 0.0
    return value_se(float(ds[name][i]), se)


def _batch_run_table(ds, family, args: argparse.Namespace) -> int:
    """``brwsim run --batch B``: forest totals, per-request tokens and the equal split."""
    from brwsim.simulate import summarize
    from brwsim.textform import format_table

    s = summarize(ds)
    b = args.batch
    if args.format != "table":
        units = {"budget": RUN_UNITS["budget"] + ", over the batch", "budget_per_request": "draft tokens",
                 "expected_mean": "tokens (batch total)", "expected_se": "tokens",
                 "tokens_per_call": "tokens per request per call", "split_expected_mean": "tokens",
                 "sharing_gain": "1", "sharing_gain_se": "1", "depth_mean": "tree levels"}
        rows = [{"budget": int(p), "budget_per_request": p / b,
                 **{k: float(s[k][i]) for k in units if k not in ("budget", "budget_per_request")}}
                for i, p in enumerate(ds["budget"].values)]
        emit(args.format, report("run", rows, units, family=repr(family), iterations=args.iterations,
                                 seed=args.seed, batch=b, out=args.out or None))
        with stdout_to_stderr(args.format):
            write_output(ds, args.out)
        return 0
    rows = []
    for i, p in enumerate(ds["budget"].values):
        rows.append([str(p), f"{p / b:.3g}", f"{float(s.expected_mean[i]):.4f}", f"{float(s.expected_se[i]):.4f}",
                     f"{float(s.tokens_per_call[i]):.4f}", f"{float(s.split_expected_mean[i]):.4f}",
                     f"{float(s.sharing_gain[i]):.4f}", f"{float(s.sharing_gain_se[i]):.4f}",
                     f"{float(s.depth_mean[i]):.2f}"])
    print(f"family: {family!r}   iterations: {args.iterations}   seed: {args.seed}   batch: {b}")
    print(format_table(rows, ["P", "P/B", "E[X_F|F]", "SE", "tokens/request", "split E[X]",
                              "shared/split", "SE", "depth"]))
    print("E[X_F|F]: accepted tokens of the whole batch; tokens/request = 1 + mean X_F / B; "
          "split: P/B nodes per request (remainder to the first)")
    write_output(ds, args.out)
    return 0


def _run_policies(texts: list[str] | None) -> list | None:
    """The policies of ``run --policy`` with ``optimal()`` first (added when absent)."""
    from brwsim.policies import Optimal, parse_policy

    if not texts:
        return None

    policies = [parse_policy(t) for t in texts]
    rest = [p for p in policies if not isinstance(p, Optimal)]
    return [Optimal(), *rest]


def _policy_table(ds) -> str:
    """E[X | T] of every policy and its paired fraction of the optimum (with SE), per budget."""
    from brwsim.simulate import policy_gap
    from brwsim.textform import format_table

    g = policy_gap(ds)
    rows = []
    for j, p in enumerate(ds["budget"].values):
        cells = [str(p), f"{float(g.expected_mean[0, j]):.4f}"]
        for k in range(1, ds.sizes["policy"]):
            cells.append(f"{float(g.expected_mean[k, j]):.4f} ({float(g.fraction_of_optimal[k, j]):.3f}"
                         f" ± {float(g.fraction_se[k, j]):.3f})")
        rows.append(cells)
    names = [str(v) for v in ds["policy"].values]
    return ("E[X|T] per policy (fraction of optimal ± SE, paired on the same trees):\n"
            + format_table(rows, ["P", *names]))
