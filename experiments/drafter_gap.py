"""How far below the speed-of-light do practical drafters sit?

On common random numbers (same environments, same sampled target paths), the fraction of
the optimal E[X] reached by static trees (chain, k-ary, Medusa-style expansion, Sequoia
fitted to the family), EAGLE-2/3-style dynamic trees, and best-first drafters whose
estimates carry log-probability noise of scale sigma, for P = 1..4096 and the budgets real
systems use (48-64 for EAGLE-2/3, 768 for Sequoia/SpecExec-scale trees). The EAGLE rows
are the released defaults under the mapping ``Dynamic(depth=D + 1, topk=k, total=N - 1)``
for EAGLE's depth D and total_token N (see :class:`brwsim.policies.Dynamic`): EAGLE-2
(D = 5, k = 10, N = 60) and EAGLE-3 (D = 7, k = 10, N = 60), plus the EAGLE-3 shape without
its 59-node cap. One drafter degrades with depth, ``noisy(sigma, gamma)`` with sigma_d =
sigma d**gamma, fitted (on the default family, by ``experiments/budget_curves.py``'s
functions and seed) to the per-position acceptance 0.652 x^-0.449 over x = 1..8. Families: the
LLM-like default mixture, character n-gram models of English prose and Python code, and a
trained neural network (textgenrnn's character LSTM, ``charlstm()``, on prose roots). The
network's nodes cost one LSTM step each, so it runs P <= 1024 with fewer trees
(:data:`LIMITS`); its larger budgets hold NaN. Writes ``data/drafter_gap.nc`` and
``data/drafter_gap.png``.

Usage::

    python experiments/drafter_gap.py [--quick]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import xarray as xr
from joblib import Parallel, delayed

from brwsim import parse_family, simulate
from brwsim.families import DEFAULT_FAMILY
from brwsim.io import provenance_attrs, write_netcdf_atomic
from brwsim.policies import Sequoia, parse_policy
from brwsim.simulate import policy_gap, validate_budgets

DATA = Path(__file__).resolve().parents[1] / "data"
POLICIES = ["optimal()", "chain()", "kary(k=2)", "kary(k=4)", "expansion(widths=[4, 2, 2, 1, 1, 1, 1])",
            "dynamic(depth=6, topk=10, total=59)", "dynamic(depth=8, topk=10, total=59)",
            "dynamic(depth=8, topk=10)", "noisy(sigma=0.25)",
            "noisy(sigma=0.5)", "noisy(sigma=1.0)", "noisy(sigma=2.0)"]
#: What each policy stands for (the figure's and the README's labels).
LABELS = {
    "dynamic(depth=6, topk=10, total=59)": "EAGLE-2 default (depth=5, top_k=10, total_token=60)",
    "dynamic(depth=8, topk=10, total=59)": "EAGLE-3 default (depth=7, top_k=10, total_token=60)",
    "dynamic(depth=8, topk=10)": "EAGLE-3 shape, no total_token cap",
}


def depth_degrading_policy(quick: bool = False) -> str:
    """``noisy(sigma, T=1, gamma)`` fitted to 0.652 x^-0.449 on x = 1..8 (default family).

    The same grid, trees and seed as ``experiments/budget_curves.py`` (coarser with
    ``quick``), so both scripts report the same drafter.
    """
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import budget_curves as bc                    # noqa: E402 - a sibling script
    sig = np.geomspace(0.05, 20.0, 9 if quick else 25)
    sigma, gamma = bc.fit_power_law(sig, bc.first_position_curve(sig, 300 if quick else 4000,
                                                                 bc.SEED),
                                    np.arange(1, 9, dtype=float))
    return str(parse_policy(f"noisy(sigma={sigma:.3f}, T=1.0, gamma={gamma:.3f})"))


NEURAL = "charlstm()"
#: Families whose nodes are costly: (largest budget, fraction of the trees); and with --quick.
LIMITS = {NEURAL: (1024, 0.5)}
QUICK_LIMITS = {NEURAL: (64, 0.05)}


def families() -> dict[str, str]:
    """Family label -> string form."""
    return {"LLM-like mixture (default)": DEFAULT_FAMILY,
            "n-gram prose (order 5)": "ngram(corpus=prose, order=5)",
            "n-gram code (order 5)": "ngram(corpus=code, order=5)",
            "neural LSTM prose (textgenrnn, charlstm)": NEURAL}


def measure(label: str, text: str, budgets: np.ndarray, trees: int, seed: int,
            policies: list[str], quick: bool = False):
    """Per-policy mean E[X | T] and the paired fraction of optimal with its standard error.

    On ``budgets`` whole: the budgets above the family's :data:`LIMITS` hold NaN.
    """
    fam = parse_family(text)
    top, share = (QUICK_LIMITS if quick else LIMITS).get(text, (int(budgets.max()), 1.0))
    run = budgets[budgets <= top]
    seq = Sequoia.from_family(fam, size=32, samples=300 if quick else 2000)
    pols = [parse_policy(p) for p in policies] + [seq]
    ds = simulate(fam, run, max(int(trees * share), 2), seed=seed, policies=pols)
    g = policy_gap(ds)                                   # paired on the optimal trees
    full = lambda v: np.concatenate(  # noqa: E731
        [v, np.full(v.shape[:-1] + (budgets.size - run.size,), np.nan)], axis=-1)
    return (label, [str(p) for p in ds.policy.values], full(g.expected_mean.values),
            full(g.fraction_of_optimal.values), full(g.fraction_se.values), ds.sizes["iteration"])


def main() -> None:
    ap = argparse.ArgumentParser(description="drafter gap")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--jobs", type=int, default=None,
                    help="worker processes (default 2; 1 with --quick, a smoke run)")
    ap.add_argument("--out", default=str(DATA / "drafter_gap.nc"))
    args = ap.parse_args()
    args.jobs = args.jobs or (1 if args.quick else 2)
    budgets = validate_budgets([2 ** i for i in range(9 if args.quick else 13)] + [48, 768])
    if args.quick:
        budgets = budgets[budgets <= 256]
    trees = 150 if args.quick else 600
    fams = families()
    degrading = depth_degrading_policy(args.quick)
    policies = POLICIES + [degrading]
    labels_of = LABELS | {degrading: "depth-degrading drafter fitted to 0.652 x^-0.449 (x = 1..8)"}
    rows = Parallel(n_jobs=args.jobs)(delayed(measure)(k, v, budgets, trees, 7 + i, policies,
                                                       args.quick)
                                      for i, (k, v) in enumerate(fams.items()))
    labels = rows[0][1][:-1] + ["sequoia (fitted to the family)"]
    dims = ("family", "policy", "budget")
    stack = lambda j: np.array([r[j] for r in rows])  # noqa: E731
    ds = xr.Dataset(
        {"expected_mean": xr.Variable(dims, stack(2), {"long_name": "mean E[X | T] of the policy's tree",
                                                      "units": "1"}),
         "fraction_of_optimal": xr.Variable(dims, stack(3), {"long_name": "E[X] / optimal E[X]",
                                                            "units": "1"}),
         "fraction_se": xr.Variable(dims, stack(4), {"long_name": "standard error of the fraction "
                                                    "(paired, delta method)", "units": "1"})},
        coords={"family": ("family", [r[0] for r in rows], {"long_name": "family", "units": "1"}),
                "policy": ("policy", labels, {"long_name": "drafting policy", "units": "1"}),
                "label": ("policy", [labels_of.get(p, p) for p in labels],
                          {"long_name": "what the policy stands for", "units": "1"}),
                "budget": ("budget", budgets, {"long_name": "draft budget P", "units": "1"})},
        attrs=provenance_attrs("brwsim drafter gap", {"families": fams, "policies": policies,
                                                      "trees": trees,
                                                      "limits": QUICK_LIMITS if args.quick else LIMITS}, 7, "python experiments/drafter_gap.py"))
    ds["sequoia_policies"] = xr.Variable(("family",), [r[1][-1] for r in rows],
                                         {"long_name": "fitted Sequoia policy", "units": "1"})
    ds["trees"] = xr.Variable(("family",), [r[5] for r in rows],
                              {"long_name": "trees per point", "units": "1"})
    out = Path(args.out)
    write_netcdf_atomic(ds, out)
    plot(ds, out.with_suffix(".png"))
    show = [p for p in (16, 48, 64, 768, 4096) if p in budgets]
    for fam in ds.family.values:
        print(f"{fam} ({int(ds.trees.sel(family=fam))} trees): fraction of optimal E[X] at P = {show} (optimal E[X]: "
              + ", ".join(f"{float(ds.expected_mean.sel(family=fam, policy='optimal()', budget=p)):.3f}"
                          for p in show) + ")")
        for pol in ds.policy.values[1:]:
            cells = " ".join(f"{float(ds.fraction_of_optimal.sel(family=fam, policy=pol, budget=p)):6.3f}"
                             for p in show)
            print(f"   {pol:50s} {cells}")
    print(f"wrote {out}")


#: The policies of each column of the figure: shaped trees and EAGLE's dynamic trees, then
#: best-first drafters with noisy estimates (brwsim.plotting: at most 8 series a panel).
PANEL_GROUPS = (("shaped and dynamic trees", ("chain", "kary", "expansion", "sequoia", "dynamic")),
                ("best-first on noisy estimates", ("noisy",)))


def plot(ds: xr.Dataset, path: Path | None = None):
    """Fraction of optimal E[X] against P with its paired ±2 SE band: one row per family,
    one column per group of policies (:data:`PANEL_GROUPS`); returns the figure."""
    from brwsim import plotting

    fams = list(ds.family.values)
    fig, axes = plotting.new_figure(len(fams), len(PANEL_GROUPS), width=4.4, height=2.9)
    pols = [str(p) for p in ds.policy.values[1:]]
    for c, (title, prefixes) in enumerate(PANEL_GROUPS):
        members = [p for p in pols if p.split("(")[0].split(" ")[0] in prefixes]
        for r, fam in enumerate(fams):
            ax = axes[r][c]
            for k, pol in enumerate(members[:plotting.MAX_SERIES]):
                d = ds.sel(family=fam, policy=pol)
                plotting.paired_band(ax, ds.budget.values, d.fraction_of_optimal.values,
                                     d.fraction_se.values, plotting.COLORS[k],
                                     str(d.label.values)[:60])
            ax.set_xscale("log", base=2)
            ax.set_ylim(0, 1.03)
            ax.axhline(1.0, color="0.5", lw=0.8)
            ax.grid(True, alpha=0.3)
            ax.set_title(f"{title}\non {fam}", fontsize=plotting.TITLE_SIZE - 1)
            ax.set_ylabel("fraction of optimal E[X]")
            if r == len(fams) - 1:
                ax.set_xlabel("draft budget P")
        plotting.legend(axes[len(fams) - 1][c], where="below", ncol=1)
    fig.suptitle("Practical drafters against the optimal tree, paired on the same trees "
                 "(band: ±2 paired SE)", fontsize=plotting.TITLE_SIZE + 1)
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


if __name__ == "__main__":
    main()
