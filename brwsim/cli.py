"""Command line: ``brwsim run | theory | ceiling | plan | export-acceptance`` (and the sweep and bank commands).

Every user error (bad family string, budget, file) prints one line
``brwsim: error: ...`` and exits with status 2; no output file is written then. So do the
faults a user can cause: a full disk, an unwritable output (checked before the work
starts), memory exhausted, input nested too deeply. A closed stdout (``brwsim inspect F |
head``) ends quietly with status 141 (128 + SIGPIPE), Ctrl-C with 130.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import math
import os
import shlex
import sys
from collections.abc import Sequence

from brwsim import __version__, cli_bank
from brwsim.theory.ceiling import SHAPES, ceiling, implied_entropy
from brwsim.cli_format import format_table, parse_budgets
from brwsim.cost import make_cost
from brwsim.errors import UserError
from brwsim.export import engine_settings, predicted_schedule
from brwsim.families import DEFAULT_FAMILY, FAMILIES, parse_family
from brwsim.io import atomic_path, write_netcdf_atomic
from brwsim.plan import plan
from brwsim.policies import Optimal, parse_policy
from brwsim.simulate import (
    policy_gap,
    predictions,
    simulate,
    summarize,
    validate_budgets,
)
from brwsim.theory import check_family, paper_bound
from brwsim.validate import check_output_path

__all__ = ["main", "build_parser", "parse_budgets", "parse_batch_sizes", "format_table"]

DEFAULT_BUDGETS = ",".join(str(2 ** i) for i in range(13))    # 1, 2, 4, ..., 4096


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit status 2), as for every other bad input."""

    def error(self, message: str) -> None:  # noqa: D401 - argparse API
        raise UserError(f"{self.prog}: {message}")


def _cmd_run(args: argparse.Namespace) -> int:
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
    rows = []
    for i, p in enumerate(ds["budget"].values):
        rows.append([str(p), f"{float(s.accepted_mean[i]):.4f}", f"{float(s.accepted_se[i]):.4f}",
                     f"{float(s.tokens_per_call[i]):.4f}", f"{float(s.expected_mean[i]):.4f}",
                     f"{float(s.expected_se[i]):.4f}", f"{float(s.depth_mean[i]):.2f}",
                     f"{float(ds['paper_bound'][i]):.4f}", _fmt_se(ds, "upper_bound", i),
                     _fmt_se(ds, "prediction", i)])
    header = ["P", "mean X", "SE", "tau=X+1", "E[X|T]", "SE", "depth", "paper bound",
              "upper bound", "prediction"]
    print(f"family: {family!r}   iterations: {args.iterations}   seed: {args.seed}")
    se = f" (SE {float(ds['mu_se']):.2g}, {float(ds['mu2_se']):.2g})" if float(ds["mu_se"]) > 0 else " (exact)"
    print(f"mu = {mu:.6g} nats, mu2 = {mu2:.6g} nats^2{se}; natural logarithms throughout")
    print(format_table(rows, header))
    if policies:
        print(_policy_table(ds))
    if args.out:
        write_netcdf_atomic(ds, args.out)
        print(f"wrote {args.out}")
    return 0


def _value_se(v: float, se: float = 0.0) -> str:
    """``value``, ``value ± se`` (a sampled spine law's standard error) or ``n/a`` (NaN)."""
    if math.isnan(v):
        return "n/a"
    return f"{v:.4f}" if not se > 0 else f"{v:.4f} ± {se:.4f}"


def _fmt_se(ds, name: str, i: int) -> str:
    """:func:`_value_se` of a per-budget variable of ``ds`` and its ``_se`` companion."""
    se = float(ds[name + "_se"][i]) if name + "_se" in ds else 0.0
    return _value_se(float(ds[name][i]), se)


def _batch_run_table(ds, family, args: argparse.Namespace) -> int:
    """``brwsim run --batch B``: forest totals, per-request tokens and the equal split."""

    s = summarize(ds)
    b = args.batch
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
    if args.out:
        write_netcdf_atomic(ds, args.out)
        print(f"wrote {args.out}")
    return 0


def _run_policies(texts: list[str] | None) -> list | None:
    """The policies of ``run --policy`` with ``optimal()`` first (added when absent)."""
    if not texts:
        return None

    policies = [parse_policy(t) for t in texts]
    rest = [p for p in policies if not isinstance(p, Optimal)]
    return [Optimal(), *rest]


def _policy_table(ds) -> str:
    """E[X | T] of every policy and its paired fraction of the optimum (with SE), per budget."""

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


def _cmd_theory(args: argparse.Namespace) -> int:
    import numpy as np

    family = parse_family(args.family)
    check_family(family)
    budgets = validate_budgets(parse_budgets(args.budgets))
    mom = family.moments()
    pred = predictions(family, budgets)
    bound = paper_bound(mom.mu, mom.mu2, budgets)
    print(f"family: {family!r}")
    print(f"mu = {mom.mu:.6g} nats, mu2 = {mom.mu2:.6g} nats^2, E[H^2] = {mom.h2:.6g} nats^2"
          f"{'' if mom.exact else f' (Monte Carlo, SE {mom.mu_se:.2g}, {mom.mu2_se:.2g})'}")
    fmt = _value_se
    rows = [[str(p), fmt(bound[i]), fmt(pred["upper_bound"][i], pred["upper_bound_se"][i]),
             fmt(pred["prediction"][i], pred["prediction_se"][i]),
             fmt(pred["prediction_asymptotic"][i]), fmt(pred["prediction"][i] + 1)]
            for i, p in enumerate(budgets)]
    print(format_table(rows, ["P", "paper bound", "upper bound", "prediction", "asymptotic",
                              "tau pred."]))
    if np.isnan(pred["prediction_asymptotic"]).all():
        print("asymptotic: n/a (lattice spine steps: the key renewal theorem does not apply)")
    if (pred["prediction_se"] > 0).any():
        print("±: standard error from sampling the spine-step law (no exact law for this family)")
    return 0


def _cmd_ceiling(args: argparse.Namespace) -> int:

    if args.tau is None and args.entropy is None:
        raise UserError("ceiling: give --tau (measured tokens per call), --entropy (nats), or both")
    shapes = [args.shape] if args.shape else list(SHAPES)
    header, rows, above = ["shape"], [], []
    if args.entropy is not None:
        header.append(f"ceiling at h={args.entropy:g}")
        if args.tau is not None:
            header.append(f"tau={args.tau:g} / ceiling")
    if args.tau is not None:
        header.append(f"h* for tau={args.tau:g} (nats)")
    for shape in shapes:
        cells = [shape]
        if args.entropy is not None:
            c = float(ceiling(args.entropy, [args.budget], shape, args.vocab)[0])
            cells.append(f"{c:.4f}")
            if args.tau is not None:
                cells.append(f"{args.tau / c:.3f}")
                if args.tau > c:
                    above.append(shape)
        if args.tau is not None:
            h = implied_entropy(args.tau, args.budget, shape, args.vocab)
            cells.append("any" if math.isinf(h) else f"{h:.4f}")
        rows.append(cells)
    print(f"optimal tokens per call (1 + E[X]) at P = {args.budget}, vocabulary {args.vocab} "
          "(Zipf shapes); natural logarithms")
    print(format_table(rows, header))
    if args.tau is not None:
        print("h*: the largest mean entropy at which an oracle drafter reaches tau (a real "
              "drafter needs lower)")
    if above:
        print(f"note: tau = {args.tau:g} is above the optimal (oracle) ceiling at h = "
              f"{args.entropy:g} for shape {', '.join(above)}: no drafter can do that, so the "
              f"entropy given is too high for that system (its mean entropy must be at most h*)")
    return 0


def family_epilog() -> str:
    """The family names and parameters (from ``brwsim.families.FAMILIES``) for ``--help``."""
    import inspect


    lines = ["families (name(parameters), defaults after '='; see the docstrings of brwsim.<Name>):"]
    for name, cls in sorted(FAMILIES.items()):
        params = []
        for p in list(inspect.signature(cls.__init__).parameters.values())[1:]:
            params.append(p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}")
        lines.append(f"  {name}({', '.join(params)})")
    return "\n".join(lines)


def parse_batch_sizes(text: str) -> list[int]:
    """Batch sizes from ``"1,8,64"`` or ranges as for budgets (``"1..64"``: powers of two)."""
    try:
        return parse_budgets(text)
    except UserError as exc:
        raise UserError(str(exc).replace("budgets", "batch sizes").replace("P >= 1", "B >= 1")) from None


def _cmd_plan(args: argparse.Namespace) -> int:
    import numpy as np


    family = parse_family(args.family)
    sizes = parse_batch_sizes(args.batch)
    budgets = parse_budgets(args.budgets)
    if args.iterations < 1:
        raise UserError(f"--iterations must be >= 1, got {args.iterations}")
    if args.seed < 0:
        raise UserError(f"--seed must be >= 0, got {args.seed}")
    roofline = args.cost_table is None and args.constant_ms is None
    if roofline and args.params is None:
        raise UserError("plan: give --params (the target model's parameters) or --cost-table FILE")
    cost = make_cost(gpu=(args.gpu or "h100") if roofline else None,
                     params=args.params if roofline else None,
                     bytes_per_param=args.bytes_per_param, kv_bytes_per_token=args.kv_bytes_per_token,
                     context=args.context, overhead_ms=args.overhead_ms,
                     peak_tflops=args.peak_tflops if roofline else None,
                     bandwidth_tbs=args.bandwidth_tbs if roofline else None,
                     table=args.cost_table, constant_ms=args.constant_ms,
                     draft_level_ms=args.draft_level_ms, draft_node_ms=args.draft_node_ms)
    show = not args.quiet and sys.stderr.isatty()
    ds = plan(family, cost, sizes, budgets, args.iterations, args.seed, progress=show,
              command="brwsim " + " ".join(shlex.quote(a) for a in args.argv))
    print(f"family: {family!r}   iterations: {args.iterations}   seed: {args.seed}")
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
    print("tokens/call: per request, 1 + E[X]/B; speedup: tokens/s over plain decoding "
          "(B tokens per call); P* = 0: speculation does not pay")
    if args.out:
        write_netcdf_atomic(ds, args.out)
        print(f"wrote {args.out}")
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    import json


    sched = predicted_schedule(args.family, args.policy, args.budget, args.iterations,
                               args.seed, args.positions)
    out = engine_settings(sched)
    out["predicted"] = {"family": args.family, "policy": args.policy, "budget": args.budget,
                        "iterations": args.iterations, "seed": args.seed,
                        "acceptance_length_se": round(sched.acceptance_length_se, 6)}
    text = json.dumps(out, indent=2) + "\n"
    if args.out:
        with atomic_path(args.out) as tmp:
            tmp.write_text(text, encoding="utf-8")
    print(text, end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``brwsim`` argument parser with every subcommand."""

    parser = _Parser(prog="brwsim", description="Monte Carlo speed-of-light of speculative decoding.")
    parser.add_argument("--version", action="version", version=f"brwsim {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    run = sub.add_parser("run", help="optimal draft trees on one family; prints a table, writes netCDF",
                         epilog=family_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--family", default=DEFAULT_FAMILY,
                     help="family string, e.g. 'dirichlet(alpha=0.05, vocab=200)' (default: an LLM-like mixture)")
    run.add_argument("--budgets", default=DEFAULT_BUDGETS,
                     help="comma list and ranges: '1,4,16', '1..4096' (powers of 2), '1-8' (default 1..4096)")
    run.add_argument("--iterations", type=int, default=2000, help="independent trees (default 2000)")
    run.add_argument("--seed", type=int, default=0, help="root seed, any non-negative integer (default 0)")
    run.add_argument("--out", default="run.nc", help="netCDF output (default run.nc; '' to skip)")
    run.add_argument("--policy", action="append", metavar="POLICY",
                     help="also evaluate a drafting policy on the same trees, e.g. "
                          "'dynamic(depth=6, topk=10)' (repeatable; optimal() is always first)")
    run.add_argument("--batch", type=int, default=1,
                     help="requests B sharing each budget: forests of B roots, the equal split alongside (default 1)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(func=_cmd_run)
    theory = sub.add_parser("theory", help="the paper's bound and renewal-theory predictions, no simulation",
                            epilog=family_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    theory.add_argument("--family", default=DEFAULT_FAMILY, help="family string (default: an LLM-like mixture)")
    theory.add_argument("--budgets", default=DEFAULT_BUDGETS, help="as for run (default 1..4096)")
    theory.set_defaults(func=_cmd_theory)
    ceil = sub.add_parser("ceiling", help="the optimal ceiling at a mean entropy, and the entropy a "
                          "measured tokens-per-call number implies")
    ceil.add_argument("--budget", type=int, required=True, help="draft budget P (root excluded)")
    ceil.add_argument("--tau", type=float, help="measured tokens per target call (bonus token included)")
    ceil.add_argument("--entropy", type=float, help="mean next-token entropy in nats")
    ceil.add_argument("--shape", choices=["zipf", "zipf-spread", "geometric"],
                      help="distribution shape (default: all three; see brwsim.theory.ceiling)")
    ceil.add_argument("--vocab", type=int, default=32000, help="vocabulary of the Zipf shapes (default 32000)")
    ceil.set_defaults(func=_cmd_ceiling)
    cli_bank.register(sub)
    pl = sub.add_parser("plan", help="the draft budget P* that maximises tokens/s per batch size, "
                        "under a GPU roofline or a measured cost table")
    pl.add_argument("--family", default=DEFAULT_FAMILY, help="family string (default: an LLM-like mixture)")
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
    pl.add_argument("--out", default="", help="netCDF output (default: none)")
    pl.add_argument("--quiet", action="store_true", help="no progress bar")
    pl.set_defaults(func=_cmd_plan)
    exp = sub.add_parser("export-acceptance", help="a predicted acceptance schedule as vLLM, "
                         "SGLang and TensorRT-LLM synthetic-acceptance settings (JSON)")
    exp.add_argument("--family", default=DEFAULT_FAMILY, help="family string (default: an LLM-like mixture)")
    exp.add_argument("--policy", default="chain()", help="drafting policy (default chain(); "
                     "optimal() is the speed-of-light)")
    exp.add_argument("--budget", type=int, required=True, help="draft nodes P (a chain: num_speculative_tokens)")
    exp.add_argument("--iterations", type=int, default=20000, help="simulated calls (default 20000)")
    exp.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    exp.add_argument("--positions", type=int, help="schedule length K (default: budget for a chain, "
                     "else the deepest accepted path)")
    exp.add_argument("--out", default="", help="also write the JSON here")
    exp.set_defaults(func=_cmd_export)
    for module in ("brwsim.sweep", "brwsim.inspect_cmd"):
        importlib.import_module(module).register(sub)
    return parser


#: Exit status after the reader of stdout went away (``brwsim inspect F | head``): 128 + SIGPIPE.
EXIT_BROKEN_PIPE = 141


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``brwsim`` console script; returns the exit status.

    Every failure a user can cause ends in one line on stderr and status 2: a
    :class:`~brwsim.errors.UserError`, a full disk or another operating-system error on a
    file, memory exhausted, or input nested too deeply (RecursionError). A closed stdout
    (a pipe into ``head``) ends quietly with status 141; Ctrl-C with 130.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            args = parser.parse_args(["run", *argv])
        args.argv = argv
        code = int(args.func(args) or 0)
        sys.stdout.flush()                # a closed pipe shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print("brwsim: interrupted", file=sys.stderr)
        return 130
    except (UserError, MemoryError, RecursionError, OSError) as exc:
        _error_line(exc)
        return 2


def _error_line(exc: BaseException) -> None:
    """Print the one-line message of a failure a user can cause."""
    if isinstance(exc, UserError):
        msg = str(exc)
    elif isinstance(exc, MemoryError):
        msg = "out of memory: use fewer iterations, budgets or grid points"
    elif isinstance(exc, RecursionError):
        msg = "input nested too deeply (recursion limit reached)"
    elif getattr(exc, "errno", None) == errno.ENOSPC:
        where = f" writing {exc.filename}" if getattr(exc, "filename", None) else ""
        msg = f"disk full{where}: free some space or write elsewhere"
    else:
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        msg = f"{where}{exc.strerror or exc}" if isinstance(exc, OSError) else str(exc)
    msg = " ".join(msg.split()) if "\n" in msg else msg
    try:
        print(f"brwsim: error: {msg}", file=sys.stderr)
    except (OSError, ValueError):  # pragma: no cover - stderr closed too
        pass


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again
    (the recipe of the Python documentation, "Note on SIGPIPE")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # pragma: no cover - stdout is not a file
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
