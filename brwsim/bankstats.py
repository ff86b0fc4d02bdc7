"""``brwsim bank-stats``: moments, bounds, entropy histogram and predicted E[X] of a bank.

A bank (written by ``brwsim import-logprobs``, see :mod:`brwsim.logprobs`) stores, per
generated position, the top-k next-token probabilities and the tail mass outside them.
Two kinds of numbers describe it (natural logarithms throughout):

* ``mu``, ``mu2`` (and ``E[H^2]``): the exact moments of the :class:`~brwsim.Empirical`
  family over the stored rows, i.e. over the top-k entries only. The tail mass lies outside
  every draft tree of that family, so these are the moments of the walk it simulates, not
  those of the model's full distributions.
* The bounds: per-position lower and upper bounds of the full distribution's entropy and
  second log-moment (stored in the bank, or recomputed with ``--vocab``), averaged over
  positions. The full-distribution ``mu`` and ``mu2`` lie between the means.

The predicted E[X] per budget is the numerical renewal prediction
(:func:`brwsim.simulate.predictions`) of ``Empirical(bank)``, beside the key-renewal
asymptotic and the paper's bound ``(mu + mu2) log P / mu^2`` (O(1) term dropped) at the
Empirical moments; tau = X + 1 is the tokens per call.
"""

from __future__ import annotations

import argparse
import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from brwsim.errors import UserError

__all__ = [
    "BankStats",
    "bank_stats",
    "entropy_histogram_text",
    "format_bank_stats",
    "plot_entropy_histogram",
    "register",
    "run",
]

#: Default budgets of ``bank-stats``: 1, 2, 4, ..., 4096.
DEFAULT_BUDGETS = "1..4096"
_BAR_WIDTH = 24


@dataclass(frozen=True)
class BankStats:
    """Summary of a bank (see :func:`bank_stats`); every array is float64 unless noted.

    Attributes
    ----------
    positions, k : int
        Rows of the bank and its width (the largest number of stored entries).
    k_min : int
        The smallest number of stored entries of a position.
    tail_mass : float
        Mean tail mass over positions.
    vocab : int or None
        Vocabulary size the bounds were computed with (None: unknown, uppers may be inf).
    mu, mu2, h2 : float
        Empirical-family moments over the stored rows (nats, nats^2, nats^2).
    entropy_lower, entropy_upper, mu2_lower, mu2_upper : numpy.ndarray
        Per-position bounds, shape (positions,).
    budgets, prediction, asymptotic, paper_bound : numpy.ndarray
        Budgets (int64) and, per budget, the numerical renewal prediction of E[X], its
        asymptotic (NaN where it does not apply) and the paper's bound.
    """

    positions: int
    k: int
    k_min: int
    tail_mass: float
    vocab: int | None
    mu: float
    mu2: float
    h2: float
    entropy_lower: np.ndarray
    entropy_upper: np.ndarray
    mu2_lower: np.ndarray
    mu2_upper: np.ndarray
    budgets: np.ndarray
    prediction: np.ndarray
    asymptotic: np.ndarray
    paper_bound: np.ndarray


def bank_stats(bank: str | os.PathLike[str] | xr.Dataset, budgets: Any = None,
               vocab: int | None = None) -> BankStats:
    """Moments, bounds and predicted E[X] of a bank.

    Parameters
    ----------
    bank : path-like or xarray.Dataset
        A bank written by :func:`brwsim.logprobs.import_logprobs`.
    budgets : sequence of int, optional
        Budgets P (default 1, 2, 4, ..., 4096).
    vocab : int, optional
        Vocabulary size: recompute the bounds with it (finite upper bounds) instead of
        using the stored ones.

    Returns
    -------
    BankStats

    Raises
    ------
    brwsim.errors.UserError
        For a missing or unreadable file, a file that is not a bank, bad budgets or a
        vocabulary too small for a position.
    """
    from brwsim.families.empirical import Empirical
    from brwsim.logprobs import _bounds_of, _read_bank
    from brwsim.simulate import predictions, validate_budgets
    from brwsim.theory import paper_bound

    b = validate_budgets([2 ** i for i in range(13)] if budgets is None else budgets)
    ds, name, probs, tail = _read_bank(bank)
    (h_lo, h_hi, m_lo, m_hi), used_vocab = _bounds_of(ds, name, probs, tail, vocab)
    family = Empirical(probs)
    mom = family.moments()
    theory = predictions(family, b)
    pred, asy = theory["prediction"], theory["prediction_asymptotic"]
    count = (probs > 0).sum(axis=1)
    return BankStats(
        positions=int(probs.shape[0]), k=int(probs.shape[1]), k_min=int(count.min()),
        tail_mass=float(tail.mean()), vocab=used_vocab,
        mu=mom.mu, mu2=mom.mu2, h2=mom.h2,
        entropy_lower=h_lo, entropy_upper=h_hi, mu2_lower=m_lo, mu2_upper=m_hi,
        budgets=b, prediction=pred, asymptotic=asy,
        paper_bound=np.asarray(paper_bound(mom.mu, mom.mu2, b), dtype=np.float64))


def _mean(values: np.ndarray) -> str:
    return f"{values.mean():.6g}" if np.isfinite(values).all() else "inf"


def _histogram_bins(stats: BankStats, bins: int) -> np.ndarray:
    """Common bin edges of the finite lower and upper entropy bounds."""
    finite = np.concatenate([stats.entropy_lower,
                             stats.entropy_upper[np.isfinite(stats.entropy_upper)]])
    lo, hi = float(finite.min()), float(finite.max())
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    return np.linspace(max(lo, 0.0), hi, bins + 1)


def _bar(count: int, top: int) -> str:
    return "#" * (round(_BAR_WIDTH * count / top) if top else 0)


def entropy_histogram_text(stats: BankStats, bins: int = 10) -> str:
    """Text histogram of the per-position entropy bounds (upper column only when finite)."""
    edges = _histogram_bins(stats, bins)
    lower, _ = np.histogram(stats.entropy_lower, edges)
    upper_finite = np.isfinite(stats.entropy_upper)
    columns = [("lower bound", lower)]
    if upper_finite.all():
        columns.append(("upper bound", np.histogram(stats.entropy_upper, edges)[0]))
    top = max(int(c.max()) for _, c in columns)
    digits = len(str(top))
    labels = [f"[{a:.3g}, {b:.3g}{']' if i == bins - 1 else ')'}"
              for i, (a, b) in enumerate(itertools.pairwise(edges))]
    width = max(len(x) for x in labels)
    head = "  ".join([" " * width] + [f"{name:<{digits + 1 + _BAR_WIDTH}}" for name, _ in columns])
    lines = [f"Entropy histogram (nats; {stats.positions} positions):", head.rstrip()]
    for i, label in enumerate(labels):
        cells = [f"{int(c[i]):>{digits}} {_bar(int(c[i]), top):<{_BAR_WIDTH}}" for _, c in columns]
        lines.append("  ".join([label.ljust(width)] + cells).rstrip())
    if not upper_finite.all():
        lines.append(f"(upper bounds are infinite at {int((~upper_finite).sum())} positions "
                     "with tail mass: pass --vocab V to bound them)")
    return "\n".join(lines)


def format_bank_stats(stats: BankStats, name: str = "bank") -> str:
    """The report printed by ``brwsim bank-stats``."""
    from brwsim.cli import format_table

    k_text = f"{stats.k}" + (f" (varies {stats.k_min}..{stats.k})" if stats.k_min != stats.k else "")
    vocab = str(stats.vocab) if stats.vocab is not None else "unknown"
    lines = [
        (f"{name}: {stats.positions} positions, k = {k_text}, mean tail mass "
         f"{stats.tail_mass:.6g}, vocab {vocab}. Natural logarithms throughout."),
        ("Empirical family (stored top-k rows; the tail mass is outside every tree): "
         f"mu = {stats.mu:.6g} nats, mu2 = {stats.mu2:.6g} nats^2, "
         f"E[H^2] = {stats.h2:.6g} nats^2"),
        ("Full distributions (mean of per-position bounds): entropy in "
         f"[{_mean(stats.entropy_lower)}, {_mean(stats.entropy_upper)}] nats, "
         f"mu2 in [{_mean(stats.mu2_lower)}, {_mean(stats.mu2_upper)}] nats^2"),
        "",
        entropy_histogram_text(stats),
        "",
        ("Predicted accepted draft tokens X of Empirical(bank) per budget P "
         "(tau = X + 1 tokens per call):"),
    ]
    def fmt(v: float) -> str:
        return "n/a" if np.isnan(v) else f"{v:.4f}"

    rows = [[str(p), fmt(x), fmt(x + 1), fmt(a), fmt(b)] for p, x, a, b in
            zip(stats.budgets, stats.prediction, stats.asymptotic, stats.paper_bound)]
    lines.append(format_table(rows, ["P", "prediction E[X]", "tau = X+1", "asymptotic",
                               "paper bound"]))
    return "\n".join(lines)


def plot_entropy_histogram(stats: BankStats, out: str | os.PathLike[str],
                           bins: int = 40, title: str = "") -> Path:
    """PNG (or any matplotlib format, from the suffix) histogram of per-position entropy.

    The lower bounds are always drawn; the upper bounds of the positions where they are
    finite are drawn over them (the legend says how many).

    Returns
    -------
    pathlib.Path
        The figure file.

    Raises
    ------
    brwsim.errors.UserError
        When the figure cannot be written.
    """
    from matplotlib.figure import Figure

    dest = Path(out)
    edges = _histogram_bins(stats, bins)
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.subplots()
    ax.hist(stats.entropy_lower, edges, alpha=0.6, color="C0", label="entropy lower bound")
    finite = np.isfinite(stats.entropy_upper)
    if finite.any():
        label = "entropy upper bound" + ("" if finite.all() else
                                         f" ({int(finite.sum())} of {finite.size} positions finite)")
        ax.hist(stats.entropy_upper[finite], edges, histtype="step", lw=1.5, color="C1",
                label=label)
    ax.set_xlabel("next-token entropy (nats)")
    ax.set_ylabel("positions")
    ax.set_title(title or f"{stats.positions} positions, k = {stats.k}", fontsize=10)
    ax.legend(fontsize=8)
    try:
        fig.savefig(dest, dpi=120)
    except (OSError, ValueError) as exc:
        raise UserError(f"{dest}: cannot write the figure ({exc})") from None
    return dest


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``bank-stats`` subcommand to an argparse subparsers object."""
    parser = subparsers.add_parser(
        "bank-stats", help="moments, entropy bounds and histogram, predicted E[X] of a bank",
        description="Summarise a bank written by 'brwsim import-logprobs': mu and mu2 of the "
                    "Empirical family over the stored top-k rows, the bounds of the full "
                    "distributions' entropy and second log-moment, an entropy histogram and "
                    "the renewal prediction of E[X] and the paper's bound per budget (nats).")
    parser.add_argument("bank", metavar="BANK.nc", help="bank netCDF file")
    parser.add_argument("--budgets", default=DEFAULT_BUDGETS,
                        help="comma list and ranges: '1,4,16', '1..4096' (powers of 2), "
                             "'1-8' (default 1..4096)")
    parser.add_argument("--vocab", type=int, default=None, metavar="V",
                        help="vocabulary size: recompute the bounds with it (finite uppers)")
    parser.add_argument("--plot", default=None, metavar="FIG.png",
                        help="also write a histogram of per-position entropy")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run ``brwsim bank-stats`` with parsed arguments; print the report."""
    from brwsim.cli import parse_budgets

    stats = bank_stats(args.bank, parse_budgets(args.budgets), vocab=args.vocab)
    print(format_bank_stats(stats, args.bank))
    if args.plot:
        plot_entropy_histogram(stats, args.plot, title=Path(args.bank).name)
        print(f"wrote {args.plot}")
    return 0
