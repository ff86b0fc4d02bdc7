"""Command line: ``brwsim run | theory | ceiling | export-acceptance | import-logprobs`` (and the sweep commands).

Every user error (bad family string, budget, file) prints one line
``brwsim: error: ...`` and exits with status 2; no output file is written then.
"""

from __future__ import annotations

import argparse
import importlib
import math
import shlex
import sys
from collections.abc import Sequence

from brwsim.errors import UserError

__all__ = ["main", "build_parser", "parse_budgets", "format_table"]

DEFAULT_BUDGETS = ",".join(str(2 ** i) for i in range(13))    # 1, 2, 4, ..., 4096


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit status 2), as for every other bad input."""

    def error(self, message: str) -> None:  # noqa: D401 - argparse API
        raise UserError(f"{self.prog}: {message}")


def parse_budgets(text: str) -> list[int]:
    """Budgets from ``"1,4,16"`` or ranges ``"1..4096"`` (powers of two) / ``"1-64"`` (all).

    Raises
    ------
    brwsim.errors.UserError
        On anything that is not a positive integer.
    """
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            if ".." in part:
                lo, hi = (int(x) for x in part.split(".."))
                if lo < 1:
                    raise UserError(f"budgets must be >= 1, got {part!r}")
                p = lo
                while p <= hi:
                    out.append(p)
                    p *= 2
            elif "-" in part[1:]:
                lo, hi = (int(x) for x in part.split("-", 1))
                out.extend(range(lo, hi + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise UserError(f"budgets: {part!r} is not an integer (use e.g. 1,4,16 or 1..4096)") from None
    if not out:
        raise UserError("budgets must not be empty")
    if min(out) < 1:
        raise UserError(f"budgets must be positive integers (P >= 1), got {min(out)}")
    return out


def format_table(rows: list[list[str]], header: list[str]) -> str:
    """Right-aligned text table: a header line, a rule, then one line per row."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _cmd_run(args: argparse.Namespace) -> int:
    from brwsim.families import parse_family
    from brwsim.io import write_netcdf_atomic
    from brwsim.simulate import simulate, summarize

    family = parse_family(args.family)
    budgets = parse_budgets(args.budgets)
    if args.iterations < 1:
        raise UserError(f"--iterations must be >= 1, got {args.iterations}")
    if args.seed < 0:
        raise UserError(f"--seed must be >= 0, got {args.seed}")
    policies = _run_policies(args.policy)
    show = not args.quiet and sys.stderr.isatty()
    ds = simulate(family, budgets, args.iterations, seed=args.seed, progress=show,
                  policies=policies, command="brwsim " + " ".join(shlex.quote(a) for a in args.argv))
    opt = ds.isel(policy=0) if policies else ds          # the optimal policy comes first
    s = summarize(opt)
    mu, mu2 = float(ds["mu"]), float(ds["mu2"])
    rows = []
    for i, p in enumerate(ds["budget"].values):
        rows.append([str(p), f"{float(s.accepted_mean[i]):.4f}", f"{float(s.accepted_se[i]):.4f}",
                     f"{float(s.tokens_per_call[i]):.4f}", f"{float(s.expected_mean[i]):.4f}",
                     f"{float(s.expected_se[i]):.4f}", f"{float(s.depth_mean[i]):.2f}",
                     f"{float(ds['paper_bound'][i]):.4f}"])
        if "prediction" in ds:
            rows[-1].append(f"{float(ds['prediction'][i]):.4f}")
    header = ["P", "mean X", "SE", "tau=X+1", "E[X|T]", "SE", "depth", "paper bound"]
    if "prediction" in ds:
        header.append("prediction")
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


def _run_policies(texts: list[str] | None) -> list | None:
    """The policies of ``run --policy`` with ``optimal()`` first (added when absent)."""
    if not texts:
        return None
    from brwsim.policies import Optimal, parse_policy

    policies = [parse_policy(t) for t in texts]
    rest = [p for p in policies if not isinstance(p, Optimal)]
    return [Optimal(), *rest]


def _policy_table(ds) -> str:
    """E[X | T] of every policy and its paired fraction of the optimum (with SE), per budget."""
    from brwsim.simulate import policy_gap

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

    from brwsim.families import parse_family
    from brwsim.simulate import predictions, validate_budgets
    from brwsim.theory import paper_bound

    family = parse_family(args.family)
    budgets = validate_budgets(parse_budgets(args.budgets))
    mom = family.moments()
    num, asy = predictions(family, budgets)
    bound = paper_bound(mom.mu, mom.mu2, budgets)
    print(f"family: {family!r}")
    print(f"mu = {mom.mu:.6g} nats, mu2 = {mom.mu2:.6g} nats^2, E[H^2] = {mom.h2:.6g} nats^2"
          f"{'' if mom.exact else f' (Monte Carlo, SE {mom.mu_se:.2g}, {mom.mu2_se:.2g})'}")
    fmt = lambda v: "n/a" if np.isnan(v) else f"{v:.4f}"  # noqa: E731
    rows = [[str(p), fmt(b), fmt(n), fmt(a), fmt(n + 1)] for p, b, n, a in zip(budgets, bound, num, asy)]
    print(format_table(rows, ["P", "paper bound", "prediction", "asymptotic", "tau pred."]))
    if np.isnan(asy).all():
        print("asymptotic: n/a (lattice spine steps: the key renewal theorem does not apply)")
    return 0


def _cmd_ceiling(args: argparse.Namespace) -> int:
    from brwsim.ceiling import SHAPES, ceiling, implied_entropy

    if args.tau is None and args.entropy is None:
        raise UserError("ceiling: give --tau (measured tokens per call), --entropy (nats), or both")
    shapes = [args.shape] if args.shape else list(SHAPES)
    header, rows = ["shape"], []
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
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    import json

    from brwsim.export import engine_settings, predicted_schedule
    from brwsim.io import atomic_path

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
    from brwsim import __version__
    from brwsim.families import DEFAULT_FAMILY

    parser = _Parser(prog="brwsim", description="Monte Carlo speed-of-light of speculative decoding.")
    parser.add_argument("--version", action="version", version=f"brwsim {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    run = sub.add_parser("run", help="optimal draft trees on one family; prints a table, writes netCDF")
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
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(func=_cmd_run)
    theory = sub.add_parser("theory", help="the paper's bound and renewal-theory predictions, no simulation")
    theory.add_argument("--family", default=DEFAULT_FAMILY, help="family string (default: an LLM-like mixture)")
    theory.add_argument("--budgets", default=DEFAULT_BUDGETS, help="as for run (default 1..4096)")
    theory.set_defaults(func=_cmd_theory)
    ceil = sub.add_parser("ceiling", help="the optimal ceiling at a mean entropy, and the entropy a "
                          "measured tokens-per-call number implies")
    ceil.add_argument("--budget", type=int, required=True, help="draft budget P (root excluded)")
    ceil.add_argument("--tau", type=float, help="measured tokens per target call (bonus token included)")
    ceil.add_argument("--entropy", type=float, help="mean next-token entropy in nats")
    ceil.add_argument("--shape", choices=["zipf", "zipf-spread", "geometric"],
                      help="distribution shape (default: all three; see brwsim.ceiling)")
    ceil.add_argument("--vocab", type=int, default=32000, help="vocabulary of the Zipf shapes (default 32000)")
    ceil.set_defaults(func=_cmd_ceiling)
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
    try:
        from brwsim import logprobs
    except ImportError:  # pragma: no cover - optional module missing
        logprobs = None
    if logprobs is not None:
        logprobs.register(sub)
    importlib.import_module("brwsim.bankstats").register(sub)
    for module in ("brwsim.sweep", "brwsim.inspect_cmd"):
        importlib.import_module(module).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``brwsim`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if args.command is None:
            args = parser.parse_args(["run", *argv])
        args.argv = argv
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"brwsim: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("brwsim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
