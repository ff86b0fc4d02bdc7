"""Where does the i.i.d. prediction fail when real text is not i.i.d.?

Two context-dependent environments, each reducing to an i.i.d. family at strength 0:

* ``markov``: a hidden easy/hard regime (easy = near-certain geometric(r=0.05), hard =
  dirichlet(alpha=0.3, vocab=1000), stationary weights 0.6/0.4) with persistence 0..0.99;
* ``ar1``: gamma(2, 0.5)-distributed entropies (mean 1 nat) following an AR(1) copula with
  rho 0..0.99;

plus character n-gram models (order 5) of English prose and Python code, whose i.i.d.
prediction is built from the distributions measured along sampled paths (what a user
measures on a real model). For every strength and budget P = 1..4096 it measures the Monte Carlo E[X]
(independent roots from the stationary law) and divides it by the i.i.d. renewal
prediction of the same marginal law (what a user fitting an i.i.d. model to measured
entropies would predict). It also runs generation (``brwsim.generate``) at P = 64, where
roots are wherever the text has arrived. Writes ``data/iid_breakdown.nc`` and
``data/iid_breakdown.png``.

``--charlstm`` measures the same on a trained neural network instead (textgenrnn's
pretrained character LSTM, ``brwsim.CharLSTM``; roots are 40-character windows of the
prose corpus) and writes ``data/charlstm_iid.nc``: P = 1..1024, 400 trees, a generation run
of 6000 tokens (its nodes cost one LSTM step each, far more than an n-gram node; with
``--quick``: P <= 64, 40 trees, 300 tokens).

Usage::

    python experiments/iid_breakdown.py            # full run (about 2 core-minutes)
    python experiments/iid_breakdown.py --quick    # smoke run: 4 strengths, P <= 256, 200 trees
    python experiments/iid_breakdown.py --plot-only  # re-render data/iid_breakdown.png from the .nc
    python experiments/iid_breakdown.py --charlstm [--quick]   # the neural model only
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import xarray as xr
from joblib import Parallel, delayed
from scipy import stats

from brwsim import (CharLSTM, CorrelatedEntropy, Dirichlet, EntropyTarget, Geometric, MarkovRegime,
                    Mixture, NGram, simulate)
from brwsim.generate import generate
from brwsim.io import provenance_attrs, write_netcdf_atomic
from brwsim.simulate import predictions, validate_budgets

DATA = Path(__file__).resolve().parents[1] / "data"
STRENGTHS = [0.0, 0.5, 0.8, 0.9, 0.95, 0.99]
QUICK_STRENGTHS = [0.0, 0.5, 0.9, 0.99]
ENTROPIES = stats.gamma(a=2.0, scale=0.5)       # mean 1 nat, 4096-quantile max ~6 nats


def make(process: str, strength: float):
    """The environment of one grid point."""
    if process == "markov":
        return MarkovRegime([Geometric(0.05), Dirichlet(0.3, 1000)], weights=[0.6, 0.4],
                            persistence=strength)
    return CorrelatedEntropy(ENTROPIES, strength)


def marginal(process: str):
    """The i.i.d. family of a process's stationary marginal law (the i.i.d. model of it):
    the regimes' mixture (persistence 0), or the entropies drawn independently (rho = 0)."""
    if process == "markov":
        return Mixture([Geometric(0.05), Dirichlet(0.3, 1000)], weights=[0.6, 0.4])
    fam = make(process, 0.0)
    return EntropyTarget(list(fam.entropies), fam.shape, fam.vocab)


def measure(process: str, strength: float, budgets: np.ndarray, trees: int, tokens: int, seed: int):
    """Monte Carlo mean and SE of E[X | T], the i.i.d. prediction, and generation tokens/call."""
    fam = make(process, strength)
    ds = simulate(fam, budgets, trees, seed=seed)
    e = ds.expected_accepted.values
    pred = predictions(marginal(process), budgets)["prediction"]
    gen = generate(fam, None, 64, tokens, seed=seed + 1)
    return (e.mean(1), e.std(1, ddof=1) / np.sqrt(trees), pred,
            gen.attrs["tokens_per_call"], float(gen.accepted.std() / np.sqrt(gen.attrs["calls"])))


def measure_ngram(corpus: str, budgets: np.ndarray, trees: int, tokens: int, seed: int):
    """Real text: Monte Carlo E[X] against the i.i.d. prediction built from path moments."""
    return measure_text(NGram(corpus, order=5), budgets, trees, tokens, seed)


def measure_text(fam, budgets: np.ndarray, trees: int, tokens: int, seed: int, paths: int = 2000):
    """(MC mean, MC SE, i.i.d. prediction from path moments, generation tau at P = 64, mu, mu2).

    The i.i.d. law is measured along ``paths`` sampled paths of 8 steps.
    """
    from brwsim.generate import path_moments
    from brwsim.theory import prediction

    e = simulate(fam, budgets, trees, seed=seed).expected_accepted.values
    pm = path_moments(fam, paths, 8, seed=seed)
    pred = prediction(pm.iid_family(), budgets)
    gen = generate(fam, None, 64, tokens, seed=seed + 1)
    return (e.mean(1), e.std(1, ddof=1) / np.sqrt(trees), pred, gen.attrs["tokens_per_call"],
            pm.mu, pm.mu2)


def main() -> None:
    ap = argparse.ArgumentParser(description="i.i.d. breakdown")
    ap.add_argument("--quick", action="store_true",
                    help=f"strengths {QUICK_STRENGTHS}, P <= 256, 200 trees, 3000 generated tokens")
    ap.add_argument("--jobs", type=int, default=None,
                    help="worker processes (default 2; 1 with --quick, a smoke run)")
    ap.add_argument("--charlstm", action="store_true",
                    help="only the neural model (writes data/charlstm_iid.nc)")
    ap.add_argument("--out", default=None, help="output netCDF (default by mode)")
    ap.add_argument("--plot-only", action="store_true",
                    help="re-render the figure from the stored --out file, no simulation")
    args = ap.parse_args()
    args.jobs = args.jobs or (1 if args.quick else 2)
    if args.charlstm:
        return main_charlstm(args)
    args.out = args.out or str(DATA / "iid_breakdown.nc")
    if args.plot_only:
        out = Path(args.out)
        with xr.open_dataset(out) as ds:
            plot(ds.load(), out.with_suffix(".png"))
        print(f"wrote {out.with_suffix('.png')}")
        return
    budgets = validate_budgets([2 ** i for i in range(9 if args.quick else 13)])
    trees, tokens = (200, 3000) if args.quick else (1000, 20000)
    strengths = QUICK_STRENGTHS if args.quick else STRENGTHS
    processes = ["markov", "ar1"]
    grid = [(p, s) for p in processes for s in strengths]
    corpora = ["prose", "code"]
    jobs = [delayed(measure)(p, s, budgets, trees, tokens, 1000 + i) for i, (p, s) in enumerate(grid)]
    jobs += [delayed(measure_ngram)(c, budgets, trees, tokens, 2000 + i) for i, c in enumerate(corpora)]
    rows = Parallel(n_jobs=args.jobs)(jobs)
    rows, ngram = rows[:len(grid)], rows[len(grid):]
    shape = (len(processes), len(strengths), budgets.size)
    mc = np.array([r[0] for r in rows]).reshape(shape)
    se = np.array([r[1] for r in rows]).reshape(shape)
    pred = np.array([r[2] for r in rows]).reshape(shape)
    gen = np.array([r[3] for r in rows]).reshape(shape[:2])
    gen_se = np.array([r[4] for r in rows]).reshape(shape[:2])
    i64 = int(np.searchsorted(budgets, 64))
    dims = ("process", "strength", "budget")
    var = lambda v, name: xr.Variable(dims, v, {"long_name": name, "units": "1"})  # noqa: E731
    ds = xr.Dataset(
        {"mc_mean": var(mc, "Monte Carlo E[X] (stationary roots)"),
         "mc_se": var(se, "standard error of mc_mean"),
         "iid_prediction": var(pred, "i.i.d. renewal prediction of the marginal law"),
         "ratio": var(mc / pred, "Monte Carlo / i.i.d. prediction"),
         "generation_tokens_per_call": xr.Variable(dims[:2], gen, {
             "long_name": "tokens per call of a generation run at P = 64", "units": "1"}),
         "generation_se": xr.Variable(dims[:2], gen_se, {"long_name": "standard error of the mean X "
                                                         "of the generation run", "units": "1"})},
        coords={"corpus": ("corpus", corpora, {"long_name": "n-gram corpus (order 5)", "units": "1"}),
                "process": ("process", processes, {"long_name": "context process", "units": "1"}),
                "strength": ("strength", strengths, {"long_name": "persistence (markov) or rho (ar1)",
                                                     "units": "1"}),
                "budget": ("budget", budgets, {"long_name": "draft budget P", "units": "1"})},
        attrs=provenance_attrs("brwsim: where the i.i.d. prediction breaks",
                               {"strengths": strengths, "trees": trees, "tokens": tokens,
                                "markov": repr(make("markov", 0.9)), "ar1": repr(make("ar1", 0.9))},
                               1000, "python experiments/iid_breakdown.py"))
    cb = ("corpus", "budget")
    ng = lambda j: np.array([r[j] for r in ngram])  # noqa: E731
    ds["ngram_mc_mean"] = xr.Variable(cb, ng(0), {"long_name": "n-gram Monte Carlo E[X]", "units": "1"})
    ds["ngram_mc_se"] = xr.Variable(cb, ng(1), {"long_name": "standard error of ngram_mc_mean",
                                               "units": "1"})
    ds["ngram_iid_prediction"] = xr.Variable(cb, ng(2), {
        "long_name": "i.i.d. prediction from distributions measured along sampled paths", "units": "1"})
    ds["ngram_ratio"] = ds["ngram_mc_mean"] / ds["ngram_iid_prediction"]
    ds["ngram_ratio"].attrs = {"long_name": "n-gram Monte Carlo / i.i.d. prediction", "units": "1"}
    ds["ngram_generation_tokens_per_call"] = xr.Variable(("corpus",), ng(3), {
        "long_name": "tokens per call of a generation run at P = 64", "units": "1"})
    ds["ngram_path_mu"] = xr.Variable(("corpus",), ng(4), {"long_name": "mu along sampled paths",
                                                          "units": "nat"})
    ds["ngram_path_mu2"] = xr.Variable(("corpus",), ng(5), {"long_name": "mu2 along sampled paths",
                                                           "units": "nat2"})
    out = Path(args.out)
    write_netcdf_atomic(ds, out)
    plot(ds, out.with_suffix(".png"))
    print("Monte Carlo / i.i.d. prediction (stationary roots); last column: generation tau at P=64 "
          "vs i.i.d. predicted tau")
    show = [p for p in (1, 16, 64, 256, 4096) if p <= budgets[-1]]
    for p in processes:
        for j, s in enumerate(strengths):
            cells = " ".join(f"{ds.ratio.values[processes.index(p), j, np.searchsorted(budgets, b)]:6.3f}"
                             for b in show)
            print(f"{p:7s} {s:5.2f}  {cells}   tau gen {gen[processes.index(p), j]:.3f} "
                  f"vs iid {pred[processes.index(p), j, i64] + 1:.3f}")
    for i, c in enumerate(corpora):
        cells = " ".join(f"{ds.ngram_ratio.values[i, np.searchsorted(budgets, b)]:6.3f}" for b in show)
        print(f"ngram   {c:5s}  {cells}   tau gen {ng(3)[i]:.3f} vs iid "
              f"{ng(2)[i][i64] + 1:.3f}  (path mu {ng(4)[i]:.3f})")
    print(f"columns: P = {show}; wrote {out}")


def main_charlstm(args) -> None:
    """Monte Carlo vs the i.i.d. prediction on textgenrnn's LSTM; generation at P = 64."""
    budgets = validate_budgets([2 ** i for i in range(7 if args.quick else 11)])
    trees, tokens, paths = (40, 300, 300) if args.quick else (400, 6000, 2000)
    fam = CharLSTM()
    mc, se, pred, tau, mu, mu2 = measure_text(fam, budgets, trees, tokens, 3000, paths)
    var = lambda v, name, units="1": xr.Variable(("budget",), v, {"long_name": name,  # noqa: E731
                                                                   "units": units})
    ds = xr.Dataset(
        {"mc_mean": var(mc, "Monte Carlo E[X] (roots: 40-character prose windows)"),
         "mc_se": var(se, "standard error of mc_mean"),
         "iid_prediction": var(pred, "i.i.d. prediction from distributions measured along "
                                     "sampled paths"),
         "ratio": var(mc / pred, "Monte Carlo / i.i.d. prediction"),
         "generation_tokens_per_call": xr.Variable((), tau, {
             "long_name": "tokens per call of a generation run at P = 64", "units": "1"}),
         "path_mu": xr.Variable((), mu, {"long_name": "mu along sampled paths", "units": "nat"}),
         "path_mu2": xr.Variable((), mu2, {"long_name": "mu2 along sampled paths", "units": "nat2"})},
        coords={"budget": ("budget", budgets, {"long_name": "draft budget P", "units": "1"})},
        attrs=provenance_attrs("brwsim: the i.i.d. prediction on a trained neural network",
                               {"family": repr(fam), "trees": trees, "tokens": tokens, "paths": paths}, 3000,
                               "python experiments/iid_breakdown.py --charlstm"
                               + (" --quick" if args.quick else "")))
    out = Path(args.out or DATA / "charlstm_iid.nc")
    write_netcdf_atomic(ds, out)
    i64 = int(np.searchsorted(budgets, 64))
    for j, b in enumerate(budgets):
        print(f"P = {b:5d}: Monte Carlo {mc[j]:.3f} +- {se[j]:.3f}, i.i.d. {pred[j]:.3f}, "
              f"ratio {mc[j] / pred[j]:.3f}")
    print(f"generation tau at P = 64: {tau:.3f} vs i.i.d. {pred[i64] + 1:.3f}; path mu {mu:.3f}, "
          f"mu2 {mu2:.3f}; wrote {out}")


def plot(ds: xr.Dataset, path: Path) -> None:
    """Heatmaps of Monte Carlo / i.i.d. prediction over (strength, log2 P), and the n-grams.

    The colour scale is logarithmic and centred on 1 (white), spanning the whole range of
    both heatmaps, so a ratio of 5 is told from a ratio of 1.5 (a linear scale cut at 1.5
    painted both the same); cell labels switch to white on dark cells. The n-gram curves
    have their own markers and a small horizontal offset, so their error bars do not overlap.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    procs = list(ds.process.values)
    ratios = np.concatenate([ds.ratio.sel(process=p).values.ravel() for p in procs])
    ratios = ratios[np.isfinite(ratios) & (ratios > 0)]
    span = float(max(np.max(ratios), 1.0 / np.min(ratios), 1.1))
    norm = LogNorm(vmin=1.0 / span, vmax=span)
    ticks = [t for t in (0.25, 0.5, 0.75, 1.0, 1.5, 2, 3, 4, 6, 8) if 1 / span <= t <= span]
    fig, axes = plt.subplots(1, len(procs) + 1, figsize=(6.2 * (len(procs) + 1), 4.2),
                             layout="constrained")
    for ax, proc in zip(np.atleast_1d(axes), procs):
        r = ds.ratio.sel(process=proc).values
        im = ax.imshow(r, aspect="auto", origin="lower", cmap="RdBu_r", norm=norm,
                       extent=[-0.5, ds.sizes["budget"] - 0.5, -0.5, ds.sizes["strength"] - 0.5])
        ax.set_xticks(range(ds.sizes["budget"]), [f"{int(np.log2(b))}" for b in ds.budget.values])
        ax.set_yticks(range(ds.sizes["strength"]), [f"{s:g}" for s in ds.strength.values])
        ax.set_xlabel("log2 P")
        ax.set_ylabel("persistence" if proc == "markov" else "rho")
        ax.set_title(f"{proc}: Monte Carlo / i.i.d. prediction")
        for (i, j), v in np.ndenumerate(r):
            dark = abs(np.log(v)) > 0.55 * np.log(span) if np.isfinite(v) and v > 0 else False
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6.5,
                    color="white" if dark else "black")
        bar = fig.colorbar(im, ax=ax, ticks=ticks)
        bar.ax.set_yticklabels([f"{t:g}" for t in ticks])
        bar.ax.minorticks_off()
    if "ngram_ratio" in ds:
        ax = axes[-1]
        x = np.log2(ds.budget.values)
        for k, (c, marker) in enumerate(zip(ds.corpus.values, ("o", "s", "^", "D"))):
            d = ds.sel(corpus=c)
            ax.errorbar(x + 0.12 * (k - 0.5), d.ngram_ratio, yerr=2 * d.ngram_mc_se / d.ngram_iid_prediction,
                        marker=marker, ms=4, capsize=2, lw=1.2, color=f"C{k}",
                        label=f"{c} (order 5), ±2 SE")
        ax.axhline(1.0, color="grey", lw=0.6)
        ax.set_xlabel("log2 P")
        ax.set_ylabel("Monte Carlo / i.i.d. prediction")
        ax.set_title("real text: character n-grams")
        ax.grid(True, alpha=0.25)
        ax.legend()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
