"""Budget curves of 2025-2026 systems against brwsim's i.i.d. model, fitted at the first point.

Reads ``data/budget_curves.csv`` (tokens per target call against the draft budget for the
InferenceX golden acceptance-length chains, Luce DFlash + DDTree tree-node sweeps and
JetSpec; each row with its source file, commit and temperature, see
``data/budget_curves.md``). For every curve and every shape of next-token distributions
(``brwsim.theory.ceiling.entropy_family`` on a 32000-token vocabulary), it fits the mean entropy
h* at the curve's first point with the policy class of the system, predicts the remaining
points at h*, and reports measured - predicted and the optimal tree's ceiling at h*:

* ``chain`` curves (InferenceX: vLLM drafts a chain of K = num_speculative_tokens): the
  chain of the target's top-1 tokens, ``brwsim.Chain``, by Monte Carlo
  (``brwsim.simulate(..., policies=[Chain()])`` on common random numbers, one tree for
  the deterministic ``zipf`` shape); h* solves E[q_0](h*) = tau_1 - 1 (Brent). Under
  i.i.d. node laws the prediction is ``1 + sum_{k <= K} a^k`` with ``a = tau_1 - 1``
  whatever the shape; the shapes differ only in h* and in the ceiling.
* ``best-first`` curves (DDTree, JetSpec): the optimal tree of P nodes, h* =
  ``brwsim.theory.ceiling.implied_entropy`` and predictions ``brwsim.theory.ceiling.ceiling`` (the
  renewal prediction, exact for ``zipf``).

The fit reproduces its own first point to the solver's tolerance (``FIT_TOL``). For chain
curves it also writes the measured per-position acceptance
``a_x = P(X >= x | X >= x - 1) = (tau_x - tau_{x-1}) / (tau_{x-1} - tau_{x-2})``
(tau_0 = 1, tau_{-1} = 0; valid when the K-chain's first x tokens do not depend on K),
which the i.i.d. model predicts constant. Finally it fits the depth-degrading drafter
``Noisy(sigma, gamma=g)`` on the default family to the power law ``0.652 x^-0.449`` (see
``data/budget_curves.md`` for what that law measures). Writes ``data/budget_curves.nc``
and ``.png``.

Usage::

    python experiments/budget_curves.py [--quick] [--csv PATH] [--out PATH] [--trees N]
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xarray as xr
from joblib import Parallel, delayed
from scipy.optimize import brentq, least_squares

from brwsim import Chain, parse_family, simulate
from brwsim.theory.ceiling import ceiling, entropy_family, implied_entropy
from brwsim.errors import UserError
from brwsim.families import DEFAULT_FAMILY
from brwsim.io import provenance_attrs, write_netcdf_atomic
from brwsim.policies import Noisy, run_policy
from brwsim.simulate import seed_key

DATA = Path(__file__).resolve().parents[1] / "data"
VOCAB = 32000
SEED = 2025
SHAPES = ("zipf", "zipf-spread")
#: Largest |predicted - measured| at a curve's first point (the fit's own point).
FIT_TOL = 1e-5
#: The power law of per-position acceptance the depth-degrading drafter is fitted to.
POWER_LAW = (0.652, 0.449)
REQUIRED = ("curve_id", "system", "model", "drafter", "benchmark", "temperature", "budget_kind",
            "budget", "P", "acceptance_length", "tokens_per_call", "policy_class", "source",
            "locator")
POLICY_CLASSES = ("chain", "best-first")


@dataclass(frozen=True)
class Curve:
    """One curve: its points in budget order and what is needed to fit it."""

    curve_id: str
    system: str
    model: str
    benchmark: str
    temperature: float
    budget_kind: str
    policy_class: str
    P: np.ndarray               # int64, brwsim's draft nodes (root excluded)
    tau: np.ndarray             # tokens per target call (bonus token included)
    source: str


def read_curves(path: Path) -> list[Curve]:
    """The curves of the budget-curves CSV, each sorted by P.

    Raises
    ------
    brwsim.errors.UserError
        On a missing file or column, a row without a source or a temperature, a value
        outside (1, P + 1], an unknown policy class, or a curve whose rows disagree.
    """
    if not path.is_file():
        raise UserError(f"no such file: {path}")
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise UserError(f"{path}: missing column(s) {', '.join(missing)}")
        groups: dict[str, list[dict[str, str]]] = {}
        for line, r in enumerate(reader, start=2):
            if not r["source"].strip() or not r["locator"].strip():
                raise UserError(f"{path}:{line}: every row needs a source and a locator")
            try:
                t = float(r["temperature"])
                p = int(r["P"])
                tau = float(r["tokens_per_call"])
            except ValueError:
                raise UserError(f"{path}:{line}: temperature, P and tokens_per_call must be "
                                f"numbers, got {r['temperature']!r}, {r['P']!r}, "
                                f"{r['tokens_per_call']!r}") from None
            if not (math.isfinite(t) and t >= 0):
                raise UserError(f"{path}:{line}: temperature must be >= 0, got {t}")
            if p < 1 or not 1.0 < tau <= p + 1.0:
                raise UserError(f"{path}:{line}: need P >= 1 and 1 < tokens per call <= P + 1, "
                                f"got P = {p}, {tau}")
            if r["policy_class"] not in POLICY_CLASSES:
                raise UserError(f"{path}:{line}: policy_class must be one of "
                                f"{', '.join(POLICY_CLASSES)}, got {r['policy_class']!r}")
            groups.setdefault(r["curve_id"], []).append(r)
    if not groups:
        raise UserError(f"{path}: no rows")
    curves = []
    for cid, rows in groups.items():
        keys = {(r["system"], r["model"], r["benchmark"], r["temperature"], r["budget_kind"],
                 r["policy_class"]) for r in rows}
        if len(keys) != 1:
            raise UserError(f"{path}: the rows of curve {cid!r} disagree on system, model, "
                            "benchmark, temperature, budget kind or policy class")
        rows = sorted(rows, key=lambda r: int(r["P"]))
        P = np.array([int(r["P"]) for r in rows], np.int64)
        if np.any(np.diff(P) <= 0):
            raise UserError(f"{path}: curve {cid!r} repeats a budget")
        r0 = rows[0]
        curves.append(Curve(cid, r0["system"], r0["model"], r0["benchmark"],
                            float(r0["temperature"]), r0["budget_kind"], r0["policy_class"], P,
                            np.array([float(r["tokens_per_call"]) for r in rows]),
                            r0["source"]))
    return curves


def _trees(shape: str, trees: int) -> int:
    return 1 if shape == "zipf" else trees      # constant-entropy Zipf: deterministic trees


def chain_values(shape: str, h: float, budgets: np.ndarray, trees: int, seed: int) -> np.ndarray:
    """Monte Carlo 1 + E[X | T] of the chain at every budget (common random numbers)."""
    ds = simulate(entropy_family(shape, h, VOCAB), budgets, _trees(shape, trees), seed=seed,
                  policies=[Chain()])
    return 1.0 + ds.expected_accepted.values.reshape(budgets.size, -1).mean(axis=1)


def fit_chain(shape: str, tau1: float, trees: int, seed: int) -> float:
    """The mean entropy at which the chain's first token is accepted with tau1 - 1.

    The Brent iterations call :func:`brwsim.policies.run_policy`, the Monte Carlo that
    ``simulate(..., policies=[Chain()])`` runs, on the same roots (so the same values)
    without building a Dataset and its theory predictions each time.
    """
    one = np.array([1], np.int64)
    key = seed_key(seed)
    n = _trees(shape, trees)

    def gap(log_h: float) -> float:
        spec = entropy_family(shape, math.exp(log_h), VOCAB).spec()
        return 1.0 + float(run_policy(Chain(), spec, one, key, 0, n)[1].mean()) - tau1

    lo, hi = math.log(0.01), math.log(0.999 * (math.log(VOCAB) if shape == "zipf" else 8.0))
    if gap(lo) <= 0 or gap(hi) >= 0:
        return math.nan
    return math.exp(brentq(gap, lo, hi, xtol=1e-10, rtol=1e-12))


def fit_curve(curve: Curve, shape: str, trees: int, seed: int):
    """(h*, predicted tokens per call, optimal ceiling) of one curve under one shape."""
    if curve.policy_class == "chain":
        h = fit_chain(shape, float(curve.tau[0]), trees, seed)
        if not math.isfinite(h):
            nan = np.full(curve.P.size, np.nan)
            return h, nan, nan
        pred = chain_values(shape, h, curve.P, trees, seed)
    else:
        h = implied_entropy(float(curve.tau[0]), int(curve.P[0]), shape, VOCAB, tol=1e-10)
        pred = ceiling(h, curve.P, shape, VOCAB)
    return h, pred, ceiling(h, curve.P, shape, VOCAB)


def per_position(tau: np.ndarray) -> np.ndarray:
    """Measured per-position acceptance of a chain curve with budgets 1..K (see module doc)."""
    cum = np.concatenate([[0.0, 1.0], tau])           # tau_{-1} = 0, tau_0 = 1
    d = np.diff(cum)                                   # P(X >= x), x = 0..K
    out = np.full(tau.size, np.nan)
    np.divide(d[1:], d[:-1], out=out, where=d[:-1] > 0)
    return out


def first_position_curve(sigmas: np.ndarray, trees: int, seed: int) -> np.ndarray:
    """A_1(s): acceptance of the noisy drafter's first token on the default family.

    Under i.i.d. node laws the noisy drafter's greedy chain accepts its x-th token (given
    x - 1 accepted) with A_1(sigma_x), sigma_x = sigma x**gamma: the depth-x step is a
    depth-1 step with that noise. A_1(s) is the P = 1 tree of ``Noisy(s)``.
    """
    fam = parse_family(DEFAULT_FAMILY)
    return np.array([simulate(fam, [1], trees, seed=seed, policies=[Noisy(float(s))])
                     .expected_accepted.values.mean() for s in sigmas])


def fit_power_law(sigmas: np.ndarray, a1: np.ndarray, xs: np.ndarray) -> tuple[float, float]:
    """(sigma, gamma) whose a_x = A_1(sigma x**gamma) is closest to the power law on xs."""
    c, k = POWER_LAW
    target = c * xs ** -k
    ls = np.log(sigmas)

    def resid(p):
        return np.interp(p[0] + p[1] * np.log(xs), ls, a1) - target

    r = least_squares(resid, [math.log(2.0), 0.3], bounds=([ls[0], 0.0], [ls[-1], 3.0]))
    return math.exp(r.x[0]), float(r.x[1])


def build(curves: list[Curve], trees: int, jobs: int, a1_trees: int) -> xr.Dataset:
    """Fit every curve under every shape; per-position acceptance; the power-law drafter."""
    tasks = [(i, k) for i in range(len(curves)) for k in range(len(SHAPES))]
    out = Parallel(n_jobs=jobs)(delayed(fit_curve)(curves[i], SHAPES[k], trees, SEED + i)
                                for i, k in tasks)
    point_curve = np.concatenate([np.full(c.P.size, i) for i, c in enumerate(curves)])
    n = point_curve.size
    start = np.concatenate([[0], np.cumsum([c.P.size for c in curves])])
    h_star = np.full((len(curves), len(SHAPES)), np.nan)
    pred = np.full((n, len(SHAPES)), np.nan)
    ceil = np.full((n, len(SHAPES)), np.nan)
    for (i, k), (h, p, c) in zip(tasks, out):
        h_star[i, k] = h
        pred[start[i]:start[i + 1], k] = p
        ceil[start[i]:start[i + 1], k] = c
    tau = np.concatenate([c.tau for c in curves])
    pp = np.full(n, np.nan)
    for i, c in enumerate(curves):
        if c.policy_class == "chain" and np.array_equal(c.P, np.arange(1, c.P.size + 1)):
            pp[start[i]:start[i + 1]] = per_position(c.tau)
    sig_grid = np.geomspace(0.05, 20.0, 25 if a1_trees > 1000 else 9)
    a1 = first_position_curve(sig_grid, a1_trees, SEED)
    xs8, xs32 = np.arange(1, 9, dtype=float), np.arange(1, 33, dtype=float)
    fits = [fit_power_law(sig_grid, a1, xs) for xs in (xs8, xs32)]
    law = POWER_LAW[0] * xs32 ** -POWER_LAW[1]
    model = np.array([np.interp(math.log(s) + g * np.log(xs32), np.log(sig_grid), a1)
                      for s, g in fits])

    def var(dims, data, long_name, units="1"):
        return xr.Variable(dims, data, {"long_name": long_name, "units": units})

    cdim, pdim = ("curve",), ("point",)
    ds = xr.Dataset(
        {"tokens_per_call": var(pdim, tau, "measured tokens per target call (bonus included)"),
         "predicted": var(("point", "shape"), pred, "i.i.d. prediction from the fit at the "
                          "curve's first point, with the system's policy class"),
         "misfit": var(("point", "shape"), tau[:, None] - pred, "measured - predicted"),
         "relative_misfit": var(("point", "shape"), tau[:, None] / pred - 1.0,
                                "measured / predicted - 1"),
         "ceiling": var(("point", "shape"), ceil, "optimal tree's tokens per call at the "
                        "curve's h* and the point's budget"),
         "fraction_of_ceiling": var(("point", "shape"), tau[:, None] / ceil,
                                    "measured / optimal ceiling"),
         "per_position_acceptance": var(pdim, pp, "chain curves: measured P(X >= x | X >= "
                                        "x - 1) from successive chain lengths"),
         "entropy_star": var(("curve", "shape"), h_star, "mean entropy fitted at the curve's "
                             "first point", "nats"),
         "P": var(pdim, np.concatenate([c.P for c in curves]), "draft budget in brwsim's "
                  "convention (root excluded)"),
         "point_curve": var(pdim, point_curve, "index of the point's curve"),
         "noisy_a1": var(("sigma",), a1, "default family: acceptance of the noisy drafter's "
                         "first token, A_1(sigma)"),
         "power_law": var(("position",), law, "the power law 0.652 x^-0.449"),
         "power_law_model": var(("fit_range", "position"), model, "per-position acceptance "
                                "A_1(sigma x^gamma) of the fitted depth-degrading drafter"),
         "power_law_sigma": var(("fit_range",), [f[0] for f in fits], "fitted sigma", "nats"),
         "power_law_gamma": var(("fit_range",), [f[1] for f in fits], "fitted gamma")},
        coords={"curve": ("curve", [c.curve_id for c in curves]),
                "shape": ("shape", list(SHAPES)),
                "point": ("point", np.arange(n)),
                "sigma": ("sigma", sig_grid, {"long_name": "noise scale", "units": "nats"}),
                "position": ("position", xs32.astype(np.int64)),
                "fit_range": ("fit_range", ["x = 1..8", "x = 1..32"]),
                "system": ("curve", [c.system for c in curves]),
                "model": ("curve", [c.model for c in curves]),
                "benchmark": ("curve", [c.benchmark for c in curves]),
                "temperature": ("curve", [c.temperature for c in curves],
                                {"long_name": "target sampling temperature T (0 = greedy)"}),
                "budget_kind": ("curve", [c.budget_kind for c in curves]),
                "policy_class": ("curve", [c.policy_class for c in curves]),
                "source": ("curve", [c.source for c in curves])},
        attrs=provenance_attrs("brwsim: 2025-2026 budget curves fitted at their first point",
                               {"vocab": VOCAB, "shapes": SHAPES, "trees": trees,
                                "a1_trees": a1_trees, "fit_tol": FIT_TOL,
                                "power_law": POWER_LAW},
                               SEED, "python experiments/budget_curves.py"))
    return ds


def summary(ds: xr.Dataset) -> str:
    """Per curve: T, h* per shape, first/last measured and predicted, worst misfit."""
    lines = [f"{'curve':44s} {'T':>4s} {'h*(zipf)':>9s} {'h*(spread)':>10s}  first -> last "
             "measured | predicted (spread) | ceiling (spread)"]
    for i, cid in enumerate(ds.curve.values):
        pts = np.flatnonzero(ds.point_curve.values == i)
        m = ds.tokens_per_call.values[pts]
        p = ds.predicted.sel(shape="zipf-spread").values[pts]
        c = ds.ceiling.sel(shape="zipf-spread").values[pts]
        h = ds.entropy_star.sel(curve=cid).values
        lines.append(f"{cid:44s} {float(ds.temperature[i]):4.1f} {h[0]:9.3f} {h[1]:10.3f}  "
                     f"{m[0]:.2f} -> {m[-1]:.2f} | {p[0]:.2f} -> {p[-1]:.2f} | "
                     f"{c[0]:.2f} -> {c[-1]:.2f}")
    return "\n".join(lines)


def plot(ds: xr.Dataset, path: Path | None = None):
    """Measured vs predicted per curve (T = 0 and T > 0 apart, at most five curves a panel,
    brwsim.plotting); per-position acceptance in the last panel; returns the figure."""
    from brwsim import plotting

    greedy = ds.temperature.values == 0
    curves = {True: [], False: []}
    for i in range(ds.sizes["curve"]):
        if np.count_nonzero(ds.point_curve.values == i) >= 2:
            curves[bool(greedy[i])].append(i)
    per_panel = plotting.MAX_SERIES - 3            # three entries say what the line styles mean
    panels = [("T = 0 (greedy target): best-first trees", part) for part in plotting.chunks(curves[True], per_panel)]
    chains = plotting.chunks(curves[False], per_panel)
    panels += [(f"T > 0 (sampled target): chains, {k + 1} of {len(chains)}", part)
               for k, part in enumerate(chains)]
    rows, cols = plotting.grid_shape(len(panels) + 1, 3)
    fig, axes = plotting.new_figure(rows, cols, width=4.6, height=3.9)
    flat = [ax for row in axes for ax in row]
    for ax, (title, part) in zip(flat, panels):
        for j, i in enumerate(part):
            pts = np.flatnonzero(ds.point_curve.values == i)
            col = plotting.COLORS[j]
            x = ds.P.values[pts]
            ax.plot(x, ds.tokens_per_call.values[pts], "o", color=col, ms=4,
                    label=str(ds.curve.values[i])[:40])
            ax.plot(x, ds.predicted.sel(shape="zipf-spread").values[pts], "-", color=col, lw=1)
            ax.plot(x, ds.ceiling.sel(shape="zipf-spread").values[pts], ":", color=col, lw=1)
        for style, what in (("o", "measured"), ("-", "i.i.d. fit at the first point"),
                            (":", "optimal ceiling")):
            ax.plot([], [], style, color="0.3", label=what)
        ax.set_xlabel("draft budget P (root excluded)")
        ax.set_ylabel("tokens per target call")
        ax.set_title(f"measured vs predicted, {title}", fontsize=plotting.TITLE_SIZE - 1)
        ax.grid(True, alpha=0.3)
        plotting.legend(ax, where="below")
    ax = flat[len(panels)]
    for i in np.flatnonzero(~greedy):
        pts = np.flatnonzero(ds.point_curve.values == i)
        ax.plot(ds.P.values[pts], ds.per_position_acceptance.values[pts], color="0.6", lw=0.7)
    ax.plot([], [], color="0.6", lw=0.7, label="InferenceX chains (T > 0)")
    x = ds.position.values
    ax.plot(x, ds.power_law, "--", color="k", lw=1.5, label="0.652 x^-0.449")
    for k, (r, ls) in enumerate(zip(ds.fit_range.values, ("-", "-."))):
        s_ = float(ds.power_law_sigma.sel(fit_range=r))
        g = float(ds.power_law_gamma.sel(fit_range=r))
        ax.plot(x, ds.power_law_model.sel(fit_range=r), ls, color=plotting.COLORS[k + 1], lw=1.5,
                label=f"noisy(sigma={s_:.2f}, gamma={g:.2f}), fit on {r}")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("position x in the chain")
    ax.set_ylabel("P(accept x | accepted x - 1)")
    ax.set_title("per-position acceptance: chains against\nthe depth-degrading drafter",
                 fontsize=plotting.TITLE_SIZE - 1)
    ax.grid(True, alpha=0.3)
    plotting.legend(ax, where="below")
    for extra in flat[len(panels) + 1:]:
        extra.set_visible(False)
    fig.suptitle("Published tokens-per-call curves against brwsim's i.i.d. fit and the optimal "
                 "ceiling", fontsize=plotting.TITLE_SIZE + 1)
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (2 on bad input)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one curve per system, 300 Monte "
                    "Carlo trees (seconds)")
    ap.add_argument("--csv", default=str(DATA / "budget_curves.csv"))
    ap.add_argument("--out", default=str(DATA / "budget_curves.nc"))
    ap.add_argument("--trees", type=int, default=None, help="Monte Carlo trees per chain "
                    "evaluation of the spread shape (default 4000, 300 with --quick)")
    ap.add_argument("--jobs", type=int, default=None,
                    help="worker processes (default 2; 1 with --quick, a smoke run)")
    args = ap.parse_args(argv)
    args.jobs = args.jobs or (1 if args.quick else 2)
    try:
        curves = read_curves(Path(args.csv))
        trees = args.trees or (300 if args.quick else 4000)
        if trees < 2:
            raise UserError(f"--trees must be >= 2, got {trees}")
        if args.quick:
            curves = list({c.system: c for c in reversed(curves)}.values())[::-1]
        ds = build(curves, trees, args.jobs, 300 if args.quick else 4000)
        out = Path(args.out)
        write_netcdf_atomic(ds, out)
        plot(ds, out.with_suffix(".png"))
    except UserError as exc:
        print(f"budget_curves.py: error: {exc}", file=sys.stderr)
        return 2
    print(summary(ds))
    first = np.array([int(np.flatnonzero(ds.point_curve.values == i)[0])
                      for i in range(ds.sizes["curve"])])
    err = np.nanmax(np.abs(ds.misfit.values[first]))
    print(f"fit check: max |predicted - measured| at the first points = {err:.1e} "
          f"(tolerance {FIT_TOL})")
    for r in ds.fit_range.values:
        print(f"power law 0.652 x^-0.449, fitted on {r}: noisy(sigma="
              f"{float(ds.power_law_sigma.sel(fit_range=r)):.3f}, gamma="
              f"{float(ds.power_law_gamma.sel(fit_range=r)):.3f}), max |model - law| on x = "
              "1..8: {:.3f}, on 1..32: {:.3f}".format(
                  float(np.abs(ds.power_law_model.sel(fit_range=r) - ds.power_law)[:8].max()),
                  float(np.abs(ds.power_law_model.sel(fit_range=r) - ds.power_law).max())))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
