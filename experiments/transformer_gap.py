"""The environment's share of the i.i.d. breakdown, on a real transformer (issue 21, item 5).

On the shipped byte-level GPT-2 ``target`` with the bundled prose and code corpora:

1. the **contextual view**: Monte Carlo E[X | T] +- SE per budget P = 1, 2, 4, ..., 1024 of
   the optimal tree (and of the drafting policies given with ``--policy``, paired on the
   same trees) on ``transformer(path=target, prompts=CORPUS)``, every node's distribution
   the network's output after its own path; per depth d = 1..10, the reach P(X >= d) of
   the sampled accepted path (a chain's per-position acceptance is
   P(X >= d) / P(X >= d - 1), what the budget curves' chains measure);
2. the **i.i.d. view of the same model**: a bank captured from the same target on the same
   corpus (``brwsim capture target CORPUS --roots R --tokens 32``: R generations from the
   root windows the contextual run draws with the same seed, at depths 0..31 of their
   sampled paths, so every context is one a tree node of the run can have), then Monte Carlo
   on ``empirical(path=bank)`` (each node's distribution drawn i.i.d. from the bank's
   rows) and brwsim's theory for that bank (:func:`brwsim.bankstats.bank_stats`: the
   renewal prediction and the proven upper bound, both for the i.i.d. model of the bank);
3. the **ratio** contextual / i.i.d. per budget and policy with its SE (delta method;
   the two Monte Carlo runs are independent), and contextual / the i.i.d. prediction.

The default policies are the real drafter, the shipped ``draft`` checkpoint drafting for
``target`` (``drafter(path=draft)``: best-first on the draft's path probabilities, EAGLE-2's
dynamic tree and a greedy chain), and the dynamic tree and chain drawn by an oracle that
knows the target's probabilities: fraction of optimal of the drafter against the oracle's
is the drafter's share, contextual against i.i.d. the environment's.

A ratio below 1 is the share of the i.i.d. prediction's shortfall that comes from the
environment (context dependence: a path's distributions are not independent draws, and
tree nodes sit on likelier paths than sampled ones) rather than from a drafter. Writes
``data/transformer_gap.nc``; the banks themselves are not kept (their SHA-256 is).

Usage::

    python experiments/transformer_gap.py [--trees 400] [--roots 300] \
        [--policy 'drafter(path=draft)' --policy 'chain()' ...] [--quick]

``--policy`` may be repeated with any policy string :func:`brwsim.simulate` accepts; a
policy that does not apply to the i.i.d. bank family (the drafter needs the checkpoint's
contexts) gets NaN there, with the reason in the variable's attributes.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import xarray as xr

from brwsim import Transformer, UserError, parse_family, simulate
from brwsim.bankstats import bank_stats
from brwsim.capture import capture_bank
from brwsim.io import file_sha256, provenance_attrs, write_netcdf_atomic
from brwsim.simulate import policy_gap

DATA = Path(__file__).resolve().parents[1] / "data"
CORPORA = ["prose", "code"]
#: The real drafter (the shipped ``draft`` checkpoint drafting for ``target``) in three
#: shapes, then the same shapes drawn by an oracle that knows the target's probabilities.
POLICIES = ["drafter(path=draft)",
            "drafter(path=draft, shape=dynamic, depth=6, topk=10, total=59)",
            "drafter(path=draft, shape=chain)",
            "dynamic(depth=6, topk=10, total=59)", "chain()"]
#: Depths d of the accepted-path reach P(X >= d) (the budget curves' per-position view).
DEPTHS = list(range(1, 11))
BUDGETS = [2 ** i for i in range(11)]        # 1 .. 1024
CHECKPOINT = "target"
#: Tokens per captured generation: depths 0..31, within window + carry (no restart).
TOKENS = 32
SEED = 21


def _mean_se(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error over the last axis."""
    return values.mean(axis=-1), values.std(axis=-1, ddof=1) / math.sqrt(values.shape[-1])


def _ratio(a: np.ndarray, sa: np.ndarray, b: np.ndarray, sb: np.ndarray,
           ) -> tuple[np.ndarray, np.ndarray]:
    """a / b and its SE for independent estimates (delta method)."""
    r = a / b
    return r, np.abs(r) * np.sqrt((sa / a) ** 2 + (sb / b) ** 2)


def contextual(corpus: str, policies: list[str], trees: int, seed: int,
               budgets: list[int]) -> dict:
    """Per-policy mean E[X | T] and SE on the transformer family (paired trees)."""
    fam = Transformer(CHECKPOINT, prompts=corpus)
    ds = simulate(fam, budgets, trees, seed=seed, policies=["optimal()"] + policies)
    e = ds["expected_accepted"].transpose("policy", "budget", "iteration").values
    mean, se = _mean_se(e)
    x = ds["accepted"].transpose("policy", "budget", "iteration").values
    reach, reach_se = _mean_se((x[..., None, :] >= np.array(DEPTHS)[:, None]).astype(float))
    gap = policy_gap(ds)
    return {"mean": mean, "se": se, "reach": reach, "reach_se": reach_se,
            "fraction": gap.fraction_of_optimal.values,
            "fraction_se": gap.fraction_se.values, "inputs": fam.input_files(),
            "family": repr(fam), "mu": float(ds["mu"]), "mu_se": float(ds["mu_se"])}


def iid_view(bank: Path, policies: list[str], trees: int, seed: int,
             budgets: list[int]) -> dict:
    """Monte Carlo on empirical(path=bank) per policy, and the bank's theory values."""
    fam = parse_family(f"empirical(path={bank})")
    n = len(policies) + 1
    mean = np.full((n, len(budgets)), np.nan)
    se = np.full_like(mean, np.nan)
    reasons: dict[str, str] = {}
    ds = simulate(fam, budgets, trees, seed=seed)
    mean[0], se[0] = _mean_se(ds["expected_accepted"].transpose("budget", "iteration").values)
    for i, pol in enumerate(policies, 1):
        try:
            d = simulate(fam, budgets, trees, seed=seed, policies=["optimal()", pol])
        except UserError as exc:           # e.g. a drafter that needs the checkpoint's context
            reasons[pol] = str(exc)
            continue
        e = d["expected_accepted"].transpose("policy", "budget", "iteration").values[1]
        mean[i], se[i] = _mean_se(e)
    stats = bank_stats(bank, budgets)
    return {"mean": mean, "se": se, "reasons": reasons, "prediction": np.asarray(stats.prediction),
            "upper_bound": np.asarray(stats.upper_bound), "mu": stats.mu, "mu2": stats.mu2,
            "positions": stats.positions, "family": repr(fam)}


def measure(corpus: str, policies: list[str], trees: int, iid_trees: int, roots: int,
            seed: int, folder: Path, budgets: list[int]) -> dict:
    """Both views of ``target`` on one corpus."""
    t0 = time.perf_counter()
    ctx = contextual(corpus, policies, trees, seed, budgets)
    t1 = time.perf_counter()
    bank = folder / f"bank_{corpus}.nc"
    capture_bank(CHECKPOINT, corpus, bank, tokens=TOKENS, roots=roots, seed=seed,
                 command=f"brwsim capture {CHECKPOINT} {corpus} --roots {roots} "
                         f"--tokens {TOKENS} --seed {seed}")
    t2 = time.perf_counter()
    iid = iid_view(bank, policies, iid_trees, seed + 1, budgets)
    t3 = time.perf_counter()
    print(f"{corpus}: contextual {t1 - t0:.0f} s, capture {roots * TOKENS} tokens "
          f"{t2 - t1:.1f} s ({roots * TOKENS / (t2 - t1):.0f} tokens/s), i.i.d. {t3 - t2:.0f} s",
          file=sys.stderr)
    return {"ctx": ctx, "iid": iid, "bank_sha256": file_sha256(bank),
            "seconds": {"contextual": t1 - t0, "capture": t2 - t1, "iid": t3 - t2}}


def build(rows: dict[str, dict], policies: list[str], args: argparse.Namespace,
          command: str) -> xr.Dataset:
    """The Dataset of both views, their ratios and provenance."""
    names = ["optimal()"] + policies
    dims = ("corpus", "policy", "budget")

    def var(key: str, view: str, long_name: str) -> xr.Variable:
        return xr.Variable(dims, np.array([rows[c][view][key] for c in CORPORA]),
                           {"long_name": long_name, "units": "1"})

    def per_budget(key: str, long_name: str) -> xr.Variable:
        return xr.Variable(("corpus", "budget"), np.array([rows[c]["iid"][key] for c in CORPORA]),
                           {"long_name": long_name, "units": "1"})

    ds = xr.Dataset({
        "contextual_mean": var("mean", "ctx", "mean E[X | T] on transformer(path=target, "
                                              "prompts=corpus) (contextual view)"),
        "contextual_se": var("se", "ctx", "standard error of contextual_mean"),
        "contextual_fraction_of_optimal": var("fraction", "ctx",
                                              "policy's E[X] / optimal E[X], paired trees"),
        "contextual_fraction_se": var("fraction_se", "ctx", "standard error of the fraction"),
        "iid_mean": var("mean", "iid", "mean E[X | T] on empirical(path=bank) (i.i.d. view "
                                       "of the same target: a bank captured on the corpus)"),
        "iid_se": var("se", "iid", "standard error of iid_mean"),
        "iid_prediction": per_budget("prediction", "renewal prediction of E[X] for the bank's "
                                                   "i.i.d. model (brwsim.bankstats)"),
        "iid_upper_bound": per_budget("upper_bound", "proven upper bound on E[X] of the "
                                                     "bank's i.i.d. model (brwsim.bankstats)"),
    }, coords={"corpus": ("corpus", CORPORA, {"long_name": "prompt corpus", "units": "1"}),
               "policy": ("policy", names, {"long_name": "drafting policy", "units": "1"}),
               "budget": ("budget", np.array(args.budgets), {"long_name": "draft budget P",
                                                        "units": "1"})})
    reach_dims = dims + ("depth",)
    ds["contextual_reach"] = xr.Variable(
        reach_dims, np.array([rows[c]["ctx"]["reach"] for c in CORPORA]),
        {"long_name": "P(X >= depth): the sampled accepted path reaches this depth of the "
                      "policy's tree (contextual view)", "units": "1"})
    ds["contextual_reach_se"] = xr.Variable(
        reach_dims, np.array([rows[c]["ctx"]["reach_se"] for c in CORPORA]),
        {"long_name": "standard error of contextual_reach", "units": "1"})
    ds = ds.assign_coords(depth=("depth", np.array(DEPTHS), {"long_name": "accepted depth d",
                                                             "units": "1"}))
    r, rse = _ratio(ds.contextual_mean.values, ds.contextual_se.values, ds.iid_mean.values,
                    ds.iid_se.values)
    ds["ratio"] = xr.Variable(dims, r, {"long_name": "contextual_mean / iid_mean (the "
                                                     "environment's factor)", "units": "1"})
    ds["ratio_se"] = xr.Variable(dims, rse, {"long_name": "standard error of ratio (delta "
                                                          "method, independent runs)",
                                             "units": "1"})
    pred = ds.iid_prediction.values[:, None, :]
    ds["ratio_to_prediction"] = xr.Variable(
        dims, ds.contextual_mean.values / pred,
        {"long_name": "contextual_mean / iid_prediction", "units": "1"})
    ds["ratio_to_prediction_se"] = xr.Variable(
        dims, ds.contextual_se.values / pred,
        {"long_name": "standard error of ratio_to_prediction (the prediction is exact)",
         "units": "1"})
    for key, name in (("mu", "bank_mu"), ("mu2", "bank_mu2"), ("positions", "bank_positions")):
        ds[name] = xr.Variable(("corpus",), [rows[c]["iid"][key] for c in CORPORA],
                               {"long_name": f"{key} of the captured bank", "units": "1"})
    ds["contextual_mu"] = xr.Variable(("corpus",), [rows[c]["ctx"]["mu"] for c in CORPORA],
                                      {"long_name": "mean entropy of the contextual family "
                                                    "(Monte Carlo over roots)", "units": "nat"})
    reasons = {c: rows[c]["iid"]["reasons"] for c in CORPORA if rows[c]["iid"]["reasons"]}
    if reasons:
        ds["iid_mean"].attrs["reason"] = json.dumps(reasons, sort_keys=True)
    config = {"checkpoint": CHECKPOINT, "corpora": CORPORA, "policies": policies,
              "budgets": args.budgets, "trees": args.trees, "iid_trees": args.iid_trees,
              "roots": args.roots, "tokens": TOKENS, "seed": args.seed,
              "families": {c: rows[c]["ctx"]["family"] for c in CORPORA}}
    ds.attrs.update(provenance_attrs("brwsim transformer gap: contextual vs i.i.d. view of "
                                     "the shipped target", config, args.seed, command))
    inputs = {}
    for c in CORPORA:
        inputs.update(rows[c]["ctx"]["inputs"])
        inputs[f"bank {c} (captured, not kept)"] = rows[c]["bank_sha256"]
    ds.attrs["input_sha256"] = json.dumps(inputs, sort_keys=True)
    ds.attrs["seconds_json"] = json.dumps({c: rows[c]["seconds"] for c in CORPORA})
    return ds


def report(ds: xr.Dataset) -> str:
    """The table printed at the end: per corpus and policy, both views and the ratio."""
    lines = []
    for c in ds.corpus.values:
        lines.append(f"{c}: bank of {int(ds.bank_positions.sel(corpus=c))} positions, "
                     f"mu {float(ds.bank_mu.sel(corpus=c)):.3f} nat (contextual family's "
                     f"mu {float(ds.contextual_mu.sel(corpus=c)):.3f})")
        for pol in ds.policy.values:
            lines.append(f"  {pol}")
            lines.append("       P  contextual E[X]       i.i.d. MC E[X]   i.i.d. pred  "
                         "ratio ctx/iid      ctx/pred")
            d = ds.sel(corpus=c, policy=pol)
            for j, p in enumerate(ds.budget.values):
                lines.append(
                    f"    {p:4d}  {float(d.contextual_mean[j]):7.4f} ± {float(d.contextual_se[j]):.4f}"
                    f"  {float(d.iid_mean[j]):7.4f} ± {float(d.iid_se[j]):.4f}"
                    f"  {float(ds.iid_prediction.sel(corpus=c)[j]):10.4f}"
                    f"  {float(d.ratio[j]):6.3f} ± {float(d.ratio_se[j]):.3f}"
                    f"  {float(d.ratio_to_prediction[j]):6.3f} ± "
                    f"{float(d.ratio_to_prediction_se[j]):.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", action="append", default=None, metavar="POLICY",
                    help="a drafting policy string (repeatable; default: "
                         + ", ".join(POLICIES) + ")")
    ap.add_argument("--trees", type=int, default=400, help="trees of the contextual view")
    ap.add_argument("--iid-trees", type=int, default=4000, help="trees of the i.i.d. view")
    ap.add_argument("--roots", type=int, default=300, help="generations per captured bank")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--quick", action="store_true", help="a smoke run (few trees and roots)")
    ap.add_argument("--out", default=str(DATA / "transformer_gap.nc"))
    args = ap.parse_args(argv)
    if args.quick:
        args.trees, args.iid_trees, args.roots = 10, 200, 20
    args.budgets = [b for b in BUDGETS if b <= 64] if args.quick else list(BUDGETS)
    policies = args.policy if args.policy is not None else list(POLICIES)
    command = " ".join(["python experiments/transformer_gap.py"]
                       + (sys.argv[1:] if argv is None else list(argv)))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        rows = {c: measure(c, policies, args.trees, args.iid_trees, args.roots,
                           args.seed + 100 * i, Path(tmp), args.budgets) for i, c in enumerate(CORPORA)}
    ds = build(rows, policies, args, command)
    ds.attrs["runtime_seconds"] = round(time.perf_counter() - start, 1)
    write_netcdf_atomic(ds, args.out)
    print(report(ds))
    print(f"wrote {args.out} in {ds.attrs['runtime_seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
