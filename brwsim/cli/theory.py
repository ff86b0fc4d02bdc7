"""``brwsim theory`` and ``brwsim ceiling``: what the theory says, no simulation."""

from __future__ import annotations

import argparse
import math
from typing import Any

from brwsim.cli.common import (
    DEFAULT_BUDGETS,
    add_command,
    meaningful_asymptotic,
    small_budget_column,
    value_se,
)
from brwsim.cli.output import add_format, emit, report
from brwsim.errors import UserError

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``theory`` and ``ceiling``."""
    theory = add_command(sub, "theory", _cmd_theory, "the paper's bound, proven bounds and "
                         "renewal-theory predictions, no simulation", family=True)
    theory.add_argument("--budgets", default=DEFAULT_BUDGETS, help="as for run (default 1..4096)")
    add_format(theory)
    ceil = add_command(sub, "ceiling", _cmd_ceiling, "the optimal ceiling at a mean entropy, and "
                       "the entropy a measured tokens-per-call number implies")
    ceil.add_argument("--budget", type=int, required=True, help="draft budget P (root excluded)")
    ceil.add_argument("--tau", type=float, help="measured tokens per target call (bonus token included)")
    ceil.add_argument("--entropy", type=float, help="mean next-token entropy in nats")
    ceil.add_argument("--shape", choices=["zipf", "zipf-spread", "geometric"],
                      help="distribution shape (default: all three; see brwsim.theory.ceiling)")
    ceil.add_argument("--vocab", type=int, default=32000, help="vocabulary of the Zipf shapes (default 32000)")
    add_format(ceil)


def _cmd_theory(args: argparse.Namespace) -> int:
    import numpy as np

    from brwsim.families import parse_family
    from brwsim.simulate import predictions, validate_budgets
    from brwsim.textform import format_table, parse_budgets
    from brwsim.theory import BOUND_ALPHA, check_family, paper_bound, paper_bound_reason
    from brwsim.theory.conditioned import DEFAULT_EXPAND, DEFAULT_SAMPLES

    family = parse_family(args.family)
    check_family(family)
    budgets = validate_budgets(parse_budgets(args.budgets))
    mom = family.moments()
    pred, reasons = predictions(family, budgets, with_reasons=True)
    pred["prediction_asymptotic"] = meaningful_asymptotic(pred["prediction_asymptotic"], mom.mu, budgets)
    why = paper_bound_reason(family)
    bound = paper_bound(mom.mu, mom.mu2, budgets) if why is None else np.full(budgets.shape, np.nan)
    if why is not None:
        reasons["paper_bound"] = why
    small, small_note = small_budget_column(family, budgets)
    if args.format != "table":
        units = {"budget": "draft tokens (tree nodes, root excluded)", "paper_bound": "tokens",
                 "upper_bound": "tokens (proven; at confidence 1 - alpha where the spine law is sampled)",
                 "upper_bound_se": "tokens", "upper_bound_point": "tokens", "small_budget_bound": "tokens",
                 "small_budget_bound_se": "tokens", "prediction": "tokens", "prediction_se": "tokens",
                 "prediction_asymptotic": "tokens", "tokens_per_call_prediction": "tokens per target call",
                 "mu": "nats", "mu2": "nats^2", "h2": "nats^2"}
        rows = [{"budget": int(p), "paper_bound": float(bound[i]),
                 "upper_bound": float(pred["upper_bound"][i]),
                 "upper_bound_se": float(pred["upper_bound_se"][i]),
                 "upper_bound_point": float(pred["upper_bound_point"][i]),
                 "small_budget_bound": float(small.value[i]), "small_budget_bound_se": float(small.se[i]),
                 "prediction": float(pred["prediction"][i]), "prediction_se": float(pred["prediction_se"][i]),
                 "prediction_asymptotic": float(pred["prediction_asymptotic"][i]),
                 "tokens_per_call_prediction": float(pred["prediction"][i]) + 1}
                for i, p in enumerate(budgets)]
        emit(args.format, report("theory", rows, units, family=repr(family), mu=mom.mu, mu2=mom.mu2,
                                 h2=mom.h2, exact=bool(mom.exact), alpha=BOUND_ALPHA,
                                 reasons=reasons))
        return 0
    print(f"family: {family!r}")
    print(f"mu = {mom.mu:.6g} nats, mu2 = {mom.mu2:.6g} nats^2, E[H^2] = {mom.h2:.6g} nats^2"
          f"{'' if mom.exact else f' (Monte Carlo, SE {mom.mu_se:.2g}, {mom.mu2_se:.2g})'}")
    fmt = value_se
    rows = [[str(p), fmt(bound[i]), fmt(pred["upper_bound"][i], pred["upper_bound_se"][i]),
             fmt(small.value[i], small.se[i]),
             fmt(pred["prediction"][i], pred["prediction_se"][i]),
             fmt(pred["prediction_asymptotic"][i]), fmt(pred["prediction"][i] + 1)]
            for i, p in enumerate(budgets)]
    print(format_table(rows, ["P", "paper bound", "upper bound", "small-P bound",
                              "prediction", "asymptotic", "tau pred."]))
    print("upper bound: proven, min over lam of the mean tree's Lagrangian (renewal functions); "
          "small-P bound: also proven, lam chosen per sampled tree after its first "
          f"{DEFAULT_EXPAND} nodes (up to {DEFAULT_SAMPLES} trees, ± its SE; sharp at small P){small_note}; "
          "prediction: the renewal prediction; asymptotic: key renewal theorem, for large P "
          "only (n/a where mu P < 1 or it is negative)")
    for name in ("paper_bound", "upper_bound", "prediction", "prediction_asymptotic"):
        if name in reasons:
            print(f"{name.replace('_', ' ')}: n/a: {reasons[name]}")
    if "prediction_asymptotic" not in reasons and np.isnan(pred["prediction_asymptotic"]).all():
        print("asymptotic: n/a (lattice spine steps: the key renewal theorem does not apply)")
    if (pred["prediction_se"] > 0).any() or (pred["upper_bound_se"] > 0).any():
        print("± of the proven bound and the prediction: standard error from sampling the "
              "spine-step law (no exact law for this family); the upper bound is then proven "
              f"at confidence 1 - alpha, alpha = {BOUND_ALPHA:g}: the sampled law's own minimum "
              "plus Student's t quantile times that SE")
    return 0


def _cmd_ceiling(args: argparse.Namespace) -> int:

    from brwsim.textform import format_table
    from brwsim.theory.ceiling import ceiling, implied_entropy, SHAPES

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
    records = []
    for shape in shapes:
        cells = [shape]
        rec: dict = {"shape": shape, "budget": args.budget}
        if args.entropy is not None:
            c = float(ceiling(args.entropy, [args.budget], shape, args.vocab)[0])
            cells.append(f"{c:.4f}")
            rec.update(entropy=args.entropy, ceiling=c)
            if args.tau is not None:
                cells.append(f"{args.tau / c:.3f}")
                rec["tau_over_ceiling"] = args.tau / c
                if args.tau > c:
                    above.append(shape)
        if args.tau is not None:
            h = implied_entropy(args.tau, args.budget, shape, args.vocab)
            cells.append("any" if math.isinf(h) else f"{h:.4f}")
            rec.update(tau=args.tau, implied_entropy=None if math.isinf(h) else h)
        rows.append(cells)
        records.append(rec)
    if args.format != "table":
        units = {"shape": "zipf | zipf-spread | geometric", "budget": "draft tokens",
                 "entropy": "nats", "ceiling": "tokens per target call (1 + E[X])",
                 "tau": "tokens per target call", "tau_over_ceiling": "1",
                 "implied_entropy": "nats (null: every entropy reaches tau)"}
        emit(args.format, report("ceiling", records, units, vocab=args.vocab, above_ceiling=above))
        return 0
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
