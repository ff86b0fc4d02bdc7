"""How tight is the paper's bound, and how sharp is the renewal prediction?

For seven families spanning mean entropy 0.3 to 8 nats (LLM-like Peaked and a mixture of
near-certain and diffuse positions among them), budgets P = 1, 2, 4, ..., 2**20, trees are
added in batches of 100 until the standard error of the Monte Carlo E[X] is below 0.01 tokens
at every budget (or a cap on the number of trees is hit, which the output then records).
The stopping rule depends only on the data, so the output is the same on any machine. Writes
``data/tightness.nc`` and ``data/tightness.png`` and prints the ratios bound/MC and
prediction/MC.

Usage::

    python experiments/tightness.py            # full run (about 60 core-minutes)
    python experiments/tightness.py --quick    # small smoke run (P <= 2**12, SE target 0.05)
    python experiments/tightness.py --plot-only  # re-render data/tightness.png from the .nc
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import xarray as xr
from joblib import Parallel, delayed
from scipy import stats

from brwsim import Dirichlet, EntropyTarget, Geometric, Mixture, Peaked, SoftmaxNormal, Zipf
from brwsim.io import provenance_attrs, write_netcdf_atomic
from brwsim.simulate import predictions, run_iterations, seed_key, validate_budgets
from brwsim.theory import paper_bound

FAMILIES = {
    "low-entropy (geometric, H~U[0.2,0.45])": EntropyTarget(stats.uniform(0.2, 0.25)),
    "geometric(r=0.3)": Geometric(0.3),
    "LLM-like peaked(a=1, b=1, s=1.2)": Peaked(1.0, 1.0, 1.2, 32000),
    "LLM-like mixture: 70% peaked + 30% zipf(1.3)": Mixture(
        [Peaked(1.0, 1.0, 1.2, 32000), Zipf(1.3, 32000, spread=0.3)], [0.7, 0.3]),
    "zipf(s=1.6, spread=0.3)": Zipf(1.6, 32000, spread=0.3),
    "dirichlet(alpha=0.05, vocab=2000)": Dirichlet(0.05, 2000),
    "softmaxnormal(sigma=1, vocab=4096)": SoftmaxNormal(1.0, 4096),
}
DATA = Path(__file__).resolve().parents[1] / "data"


def measure(label: str, fam, budgets: np.ndarray, seed: int, se_target: float,
            min_trees: int, batch: int, max_trees: int) -> dict:
    """Sufficient statistics of E[X | T] and X, adding batches until the SE target is met.

    Stops after ``max_trees`` trees at most; a rule on the data only (never the clock), so
    the result is reproducible on any machine.
    """
    spec, key = fam.spec(), seed_key(seed)
    m = budgets.size
    n, t_thr = 0, math.nan
    s1, s2, a1, a2, d1 = (np.zeros(m) for _ in range(5))
    while True:
        acc, exp, dep, _, t_thr = run_iterations(spec, budgets, key, n, batch, t_thr)
        n += batch
        s1 += exp.sum(1)
        s2 += (exp ** 2).sum(1)
        a1 += acc.sum(1)
        a2 += (acc.astype(np.float64) ** 2).sum(1)
        d1 += dep.sum(1)
        se = np.sqrt(np.maximum(s2 / n - (s1 / n) ** 2, 0) / (n - 1))
        if n >= min_trees and (se.max() < se_target or n >= max_trees):
            break
    return dict(label=label, family=repr(fam), n=n, e_mean=s1 / n, e_se=se, x_mean=a1 / n,
                x_se=np.sqrt(np.maximum(a2 / n - (a1 / n) ** 2, 0) / (n - 1)), depth=d1 / n,
                **theory_row(fam, budgets))


def theory_row(fam, budgets: np.ndarray) -> dict:
    """Moments, the paper's bound, the prediction (with SE) and the proven bound of a family."""
    mom = fam.moments()
    th = predictions(fam, budgets)
    return dict(mu=mom.mu, mu2=mom.mu2, bound=paper_bound(mom.mu, mom.mu2, budgets),
                pred=th["prediction"], pred_se=th["prediction_se"],
                pred_asy=th["prediction_asymptotic"], upper=th["upper_bound"],
                upper_se=th["upper_bound_se"])


def reuse(d: xr.Dataset, fam, budgets: np.ndarray) -> dict:
    """A stored family's Monte Carlo with freshly computed theory (see ``--resimulate``)."""
    if repr(fam) != str(d.family_string.values) or not np.array_equal(d.budget.values, budgets):
        raise SystemExit(f"{d.family.values}: the stored file is of another family or budgets; "
                         "resimulate it")
    return dict(label=str(d.family.values), family=repr(fam), n=int(d.trees),
                e_mean=d.expected_mean.values, e_se=d.expected_se.values,
                x_mean=d.accepted_mean.values, x_se=d.accepted_se.values,
                depth=d.depth_mean.values, **theory_row(fam, budgets))


def to_dataset(rows: list[dict], budgets: np.ndarray, config: dict, seed: int) -> xr.Dataset:
    """One dataset: dims (family, budget), CF attributes, provenance."""
    fam = [r["label"] for r in rows]
    stack = lambda k: np.array([r[k] for r in rows])  # noqa: E731
    fb = ("family", "budget")
    var = lambda k, name, units="1": xr.Variable(fb, stack(k), {"long_name": name, "units": units})  # noqa: E731
    ds = xr.Dataset(
        {
            "expected_mean": var("e_mean", "Monte Carlo E[X]: mean of E[X | T_P] over trees"),
            "expected_se": var("e_se", "standard error of expected_mean"),
            "accepted_mean": var("x_mean", "mean sampled accepted tokens X"),
            "accepted_se": var("x_se", "standard error of accepted_mean"),
            "depth_mean": var("depth", "mean depth of the optimal tree"),
            "paper_bound": var("bound", "paper's bound (mu + mu2) log P / mu^2, O(1) dropped"),
            "prediction": var("pred", "renewal-theory prediction of E[X] (numerical)"),
            "prediction_se": var("pred_se", "standard error of the prediction (sampled spine law; 0 if exact)"),
            "prediction_asymptotic": var("pred_asy", "key-renewal asymptotic of E[X]"),
            "upper_bound": var("upper", "proven upper bound on E[X] (brwsim.theory.upper_bound)"),
            "upper_bound_se": var("upper_se", "standard error of upper_bound (sampled spine law; 0 if exact)"),
            "mu": xr.Variable(("family",), stack("mu"), {"long_name": "E[H(q)]", "units": "nat"}),
            "mu2": xr.Variable(("family",), stack("mu2"), {"long_name": "E[sum q (log q)^2]",
                                                          "units": "nat2"}),
            "trees": xr.Variable(("family",), stack("n"), {"long_name": "trees simulated", "units": "1"}),
            "family_string": xr.Variable(("family",), stack("family"), {"long_name": "family string form",
                                                                      "units": "1"}),
        },
        coords={"family": ("family", fam, {"long_name": "family", "units": "1"}),
                "budget": ("budget", budgets, {"long_name": "draft budget P", "units": "1"})},
        attrs=provenance_attrs("brwsim tightness of the paper's bound", config, seed,
                               "python experiments/tightness.py"),
    )
    return ds


def plot(ds: xr.Dataset, path: Path) -> None:
    """Per family, three stacked panels sharing the log2 P axis.

    Top: E[X] (Monte Carlo, open circles with ±2 SE bars, drawn over the renewal
    prediction, an orange line with crosses, so both stay visible where they agree).
    Middle: prediction / Monte Carlo with the ±2 SE band of the Monte Carlo, on its own
    scale. Bottom: the paper's bound and brwsim's proven upper bound over Monte Carlo
    (1 = tight), so the bounds do not set the y-range of the data.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = ds.sizes["family"]
    cols = 4
    rows = math.ceil(n / cols)
    fig = plt.figure(figsize=(4.4 * cols, 5.6 * rows))
    outer = fig.add_gridspec(rows, cols, hspace=0.22, wspace=0.3)
    x = np.log2(ds.budget.values)
    mc_style = dict(fmt="o", ms=4.5, mfc="white", mec="C0", ecolor="C0", elinewidth=1, capsize=1.5,
                    zorder=3)
    first = None
    for k, fam in enumerate(ds.family.values):
        d = ds.sel(family=fam)
        inner = outer[k // cols, k % cols].subgridspec(3, 1, height_ratios=[2.2, 1, 1], hspace=0.08)
        ax = fig.add_subplot(inner[0])
        ax_pred = fig.add_subplot(inner[1], sharex=ax)
        ax_bound = fig.add_subplot(inner[2], sharex=ax)
        e, se = d.expected_mean.values, d.expected_se.values
        ax.plot(x, d.prediction.values, "-", color="C1", lw=1.6, marker="x", ms=4, zorder=2,
                label="renewal prediction")
        ax.errorbar(x, e, yerr=2 * se, label="Monte Carlo E[X] (±2 SE)", **mc_style)
        ax.set_title(f"{fam}\nmu = {float(d.mu):.2f} nats, {int(d.trees)} trees", fontsize=8)
        ax.set_ylabel("E[X] (tokens)", fontsize=8)
        ax.set_ylim(0, max(float(np.nanmax(e + 2 * se)) * 1.08, 0.1))
        ratio = d.prediction.values / e
        band = 2 * se / e
        ax_pred.fill_between(x, 1 - band, 1 + band, color="C0", alpha=0.2, lw=0,
                             label="Monte Carlo ±2 SE")
        ax_pred.axhline(1.0, color="0.5", lw=0.6)
        ax_pred.plot(x, ratio, "-", color="C1", marker="x", ms=4, lw=1.2, label="prediction / MC")
        dev = np.nanmax(np.abs(np.concatenate([ratio - 1, band])[np.isfinite(np.concatenate([ratio, band]))]))
        lim = min(max(1.15 * dev, 0.01), 0.6)
        ax_pred.set_ylim(1 - lim, 1 + lim)
        ax_pred.set_ylabel("pred. / MC", fontsize=8)
        bound = d.paper_bound.values / e
        ok = np.isfinite(bound) & (bound > 0)
        ax_bound.plot(x[ok], bound[ok], "s--", color="C3", ms=3, lw=1.2, label="paper's bound / MC")
        if "upper_bound" in d:
            ub = d.upper_bound.values / e
            ax_bound.plot(x, ub, "^-", color="C2", ms=3, lw=1.2,
                          label="proven upper bound / MC (brwsim)")
        ax_bound.axhline(1.0, color="0.5", lw=0.6)
        ax_bound.set_ylim(0, max(float(np.nanmax(bound[ok], initial=1.0)) * 1.12, 1.5))
        ax_bound.set_ylabel("bound / MC", fontsize=8)
        ax_bound.set_xlabel("log2 P", fontsize=8)
        for a in (ax, ax_pred):
            a.tick_params(labelbottom=False)
        for a in (ax, ax_pred, ax_bound):
            a.tick_params(labelsize=7)
            a.grid(True, alpha=0.25)
        if first is None:
            first = (ax, ax_pred, ax_bound)
    handles = [h for a in first for h in a.get_legend_handles_labels()[0]]
    labels = [lab for a in first for lab in a.get_legend_handles_labels()[1]]
    seen = {}
    for h, lab in zip(handles, labels):
        seen.setdefault(lab, h)
    fig.legend(list(seen.values()), list(seen), loc="lower right", fontsize=9, frameon=False,
               bbox_to_anchor=(0.97, 0.12))
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description="tightness of the paper's bound")
    ap.add_argument("--quick", action="store_true", help="P <= 2**12, SE target 0.05")
    ap.add_argument("--jobs", type=int, default=None,
                    help="worker processes (default 2; 1 with --quick, a smoke run)")
    ap.add_argument("--out", default=str(DATA / "tightness.nc"))
    ap.add_argument("--plot-only", action="store_true",
                    help="re-render the figure from the stored --out file, no simulation")
    ap.add_argument("--resimulate", metavar="LABELS",
                    help="reuse the stored Monte Carlo of every family but these ('|'-separated "
                         "labels; default 'all': re-simulate every family; 'none': theory only): the stopping rule is deterministic, so a "
                         "family whose kernel did not change gives the same numbers; the "
                         "theory (moments, prediction, bound) is always recomputed")
    args = ap.parse_args()
    args.jobs = args.jobs or (1 if args.quick else 2)
    if args.plot_only:
        out = Path(args.out)
        with xr.open_dataset(out) as ds:
            plot(ds.load(), out.with_suffix(".png"))
        print(f"wrote {out.with_suffix('.png')}")
        return
    p_max, se_target, min_trees, cap = (12, 0.05, 200, 2000) if args.quick else (20, 0.01, 400, 20000)
    budgets = validate_budgets([2 ** i for i in range(p_max + 1)])
    seed = 20251211
    config = {"budgets": budgets.tolist(), "se_target": se_target, "min_trees": min_trees,
              "max_trees": cap, "batch": 100, "families": {k: repr(v) for k, v in FAMILIES.items()}}
    redo = (set(FAMILIES) if args.resimulate in (None, "all") else set()
            if args.resimulate == "none" else set(args.resimulate.split("|")))
    unknown = redo - set(FAMILIES)
    if unknown:
        raise SystemExit(f"--resimulate: unknown family labels {sorted(unknown)}")
    stored = {}
    if redo != set(FAMILIES):
        with xr.open_dataset(args.out) as old:
            stored = {label: reuse(old.sel(family=label).load(), FAMILIES[label], budgets)
                      for label in FAMILIES if label not in redo}
    todo = [(i, label, fam) for i, (label, fam) in enumerate(FAMILIES.items()) if label in redo]
    fresh = Parallel(n_jobs=args.jobs)(
        delayed(measure)(label, fam, budgets, seed + i, se_target, min_trees, 100, cap)
        for i, label, fam in todo)
    fresh = {r["label"]: r for r in fresh}
    rows = [fresh[label] if label in fresh else stored[label] for label in FAMILIES]
    ds = to_dataset(rows, budgets, config, seed)
    out = Path(args.out)
    write_netcdf_atomic(ds, out)
    plot(ds, out.with_suffix(".png"))
    show = [p for p in (16, 256, 4096, 65536, 2 ** 20) if p <= budgets[-1]]
    print(f"{'family':46s} {'mu':>5s} {'trees':>6s} {'maxSE':>6s}  " +
          "  ".join(f"{'P=' + str(p):>24s}" for p in show))
    print(" " * 68 + "  ".join(f"{'paper/MC ub/MC pred/MC':>24s}" for _ in show))
    for fam in ds.family.values:
        d = ds.sel(family=fam)
        cells = []
        for p in show:
            e = float(d.expected_mean.sel(budget=p))
            cells.append(f"{float(d.paper_bound.sel(budget=p)) / e:8.2f} "
                         f"{float(d.upper_bound.sel(budget=p)) / e:7.4f} "
                         f"{float(d.prediction.sel(budget=p)) / e:7.4f}")
        print(f"{fam[:46]:46s} {float(d.mu):5.2f} {int(d.trees):6d} {float(d.expected_se.max()):6.4f}  " +
              "  ".join(f"{c:>24s}" for c in cells))
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
