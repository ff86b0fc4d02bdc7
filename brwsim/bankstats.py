"""Moments, bounds and predicted E[X] of a bank (what ``brwsim bank-stats`` prints).

Two kinds of numbers describe a bank (natural logarithms throughout):

* ``mu``, ``mu2`` (and ``E[H^2]``): the exact moments of the :class:`~brwsim.Empirical`
  family over the stored rows, i.e. over the top-k entries only. The tail mass lies outside
  every draft tree of that family, so these are the moments of the walk it simulates, not
  those of the model's full distributions.
* The bounds: per-position lower and upper bounds of the full distribution's entropy and
  second log-moment (stored in the bank, or recomputed with ``vocab``), averaged over
  positions. The full-distribution ``mu`` and ``mu2`` lie between the means.

The predicted E[X] per budget is the numerical renewal prediction
(:func:`brwsim.simulate.predictions`) of ``Empirical(bank)``, beside its proven upper bound
(proven for the i.i.d. model a bank defines: every node draws a stored row), E[max q] (the
exact E[X] at P = 1 of that model), the key-renewal
asymptotic and the paper's bound ``(mu + mu2) log P / mu^2`` (O(1) term dropped) at the
Empirical moments; tau = X + 1 is the tokens per call.

This module sits above the families and the theory (which read banks through
:mod:`brwsim.bank.store`); :mod:`brwsim.bank` itself does not import it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from brwsim.bank.store import bounds_of, read_bank
from brwsim.io import atomic_path, write_error
from brwsim.errors import UserError
from brwsim.families.empirical import Empirical
from brwsim.lazy import xarray as xr
from brwsim.simulate import predictions, validate_budgets
from brwsim.theory import paper_bound

__all__ = ["BankStats", "bank_stats", "histogram_bins", "plot_entropy_histogram"]



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
    upper_bound : numpy.ndarray
        Per budget, the proven upper bound on E[X] (:func:`brwsim.theory.upper_bound`) of
        ``Empirical(bank)``: a bank's family draws every node's distribution i.i.d. from
        the stored rows, so the bound is proven for that i.i.d. model (not for the model
        that wrote the bank, whose contexts are correlated). NaN where it does not exist.
    top1_mean : float
        E[max q] over the rows: the exact E[X] at P = 1 of ``Empirical(bank)``.
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
    upper_bound: np.ndarray
    top1_mean: float


def bank_stats(bank: str | os.PathLike[str] | xr.Dataset, budgets: Any = None,
               vocab: int | None = None) -> BankStats:
    """Moments, bounds and predicted E[X] of a bank.

    Parameters
    ----------
    bank : path-like or xarray.Dataset
        A bank written by :func:`brwsim.bank.import_logprobs`.
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
    b = validate_budgets([2 ** i for i in range(13)] if budgets is None else budgets)
    ds, name, probs, tail = read_bank(bank)
    (h_lo, h_hi, m_lo, m_hi), used_vocab = bounds_of(ds, name, probs, tail, vocab)
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
        paper_bound=np.asarray(paper_bound(mom.mu, mom.mu2, b), dtype=np.float64),
        upper_bound=np.asarray(theory["upper_bound"], dtype=np.float64),
        top1_mean=float(family.top1_mean()))


def histogram_bins(stats: BankStats, bins: int) -> np.ndarray:
    """Common bin edges of the finite lower and upper entropy bounds."""
    finite = np.concatenate([stats.entropy_lower,
                             stats.entropy_upper[np.isfinite(stats.entropy_upper)]])
    lo, hi = float(finite.min()), float(finite.max())
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    return np.linspace(max(lo, 0.0), hi, bins + 1)


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
    edges = histogram_bins(stats, bins)
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
        with atomic_path(dest) as tmp:     # a full disk leaves no 0-byte file behind
            fig.savefig(tmp, dpi=120, format=dest.suffix.lstrip(".").lower() or "png")
    except (OSError, ValueError) as exc:
        err = write_error(dest, exc)       # "disk full", or a UserError passed through
        raise (err if isinstance(err, UserError)
               else UserError(f"{dest}: cannot write the figure ({exc})")) from None
