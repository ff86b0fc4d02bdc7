"""A proven upper bound on E[X] that is sharp at small budgets: the Lagrangian bound
conditioned on the first nodes of sampled trees.

The unconditioned bound ``E[X] <= min_lam E[sum_v (p(v) - lam)^+] + lam P``
(:func:`~brwsim.theory.predict.upper_bound`) fills the *mean* tree, far above E[X] at small
budgets on heterogeneous families. Here lam is chosen after seeing the first ``expand``
nodes of each sampled tree (the root, then best-first), and the rest of the tree enters
through its conditional mean, ``p Phi(lam / p)`` per frontier node with
``Phi(x) = E[sum_{w != root} (p(w) - x)^+]`` read from the renewal sums on the floor grid.
Derivation and measured accuracy: ``docs/theory.md``, section 2c.
"""

from __future__ import annotations

import math

import numpy as np

from brwsim.errors import UserError
from brwsim.engine import law
from brwsim.interrupt import answering
from brwsim.kernels.conditioned import MAX_FRONTIER, conditioned_values
from brwsim.kernels.dist import LEVEL_F, LEVEL_I
from brwsim.keys import seed_key
from brwsim.theory.predict import Prediction, _budgets
from brwsim.theory.renewal import _renewal_density, lagrangian_min, renewal_grid, spine_steps

__all__ = ["small_budget_bound", "DEFAULT_EXPAND", "DEFAULT_SAMPLES", "WORK_BUDGET", "MIN_SAMPLES"]

#: Nodes expanded per sampled tree (the root included), best-first.
DEFAULT_EXPAND = 16
#: Sampled trees (at most; fewer where each costs much, see :data:`WORK_BUDGET`).
DEFAULT_SAMPLES = 1000
#: With ``samples=None`` the trees stop at about this many generated ranks in all (a
#: pilot measures the cost per tree), but never below :data:`MIN_SAMPLES`.
WORK_BUDGET = 1_500_000
MIN_SAMPLES = 200
#: lam is searched down to the unconditioned minimiser's e^{-t} at the largest budget times
#: e^{-_MARGIN} (children below that are never drawn; a smaller lam is never needed there).
_MARGIN = 2.0
_STREAM = np.uint64(0xC0DD17E5B0D5EED5)   # roots independent of simulate()'s and the laws'
#: The pilot's trees, and how far below their deepest minimiser children are still drawn.
_PILOT = 64
_PILOT_MARGIN = 0.5
_PILOT_STREAM = np.uint64(0x9E3779B97F4A7C15)


def small_budget_bound(family, budgets, *, expand: int = DEFAULT_EXPAND,
                       samples: int | None = None, seed: int = 0) -> Prediction:
    """A proven upper bound on E[X], sharp at small budgets (an i.i.d. family's conditioned
    Lagrangian bound).

    For every realisation, every tree T of P nodes and every lam >= 0,
    ``sum_{v in T} p(v) <= sum_{v != root} (p(v) - lam)^+ + lam P``, and lam may depend on
    what has been seen. Each of ``samples`` trees has its first ``expand`` nodes drawn (the
    root, then best-first by path probability, with the family's own kernels); every other
    child of those nodes is a frontier node f, whose subtree is a fresh copy of the family
    scaled by p_f. So, with ``Phi(x) = E[sum_{w != root} (p(w) - x)^+]``,

    ``E[X] <= E[ min_lam sum_{expanded v != root} (p(v) - lam)^+
    + sum_f ((p_f - lam)^+ + p_f Phi(lam / p_f)) + lam P ]``.

    ``Phi(e^{-t})`` is bounded above by ``U(t) - e^{-t} M(t)`` on the floor grid (as in
    :func:`~brwsim.theory.predict.upper_bound`), so the expectation is a bound, estimated
    by the mean over the sampled trees (with a control variate: the same sum at the
    unconditioned minimiser, whose mean is at most the unconditioned bound). At P = 1 it is
    E[max q] (exact in expectation), for P <= ``expand`` it is the mean of the optimal
    tree's E[X | T_P], and for P > ``expand`` it lies between that and the unconditioned
    bound. ``expand = 1`` is the bound conditioned on the root's distribution only.
    Derivation and measured accuracy: ``docs/theory.md``, section 2c.

    Parameters
    ----------
    family : Family
        An i.i.d. family (``family.iid``).
    budgets : array_like
        Budgets P >= 1. The cost grows with P (the frontier holds about P nodes per tree):
        meant for P up to a few hundred; beyond, the unconditioned bound is as sharp.
    expand : int
        Nodes expanded per tree, >= 1 (the root included).
    samples : int, optional
        Sampled trees, >= 2. Default: :data:`DEFAULT_SAMPLES` (1,000), fewer where a tree
        costs more than :data:`WORK_BUDGET` / 1,000 generated ranks (large exactly drawn
        vocabularies), never below :data:`MIN_SAMPLES` (200); a pilot of 64 other trees
        measures the cost, so the choice is a function of the family and seed only.
    seed : int
        Seed of the sampled trees (independent of :func:`brwsim.simulate`'s roots at the
        same seed).

    Returns
    -------
    Prediction
        The bound per budget and its standard error (the trees' sampling error, combined
        with the spine law's where the law itself is sampled).

    Raises
    ------
    brwsim.errors.UserError
        For a context-dependent family (its subtrees are not copies of one law), budgets
        < 1 or NaN, ``expand < 1`` or ``samples < 2``.
    """
    if not getattr(family, "iid", False) or len(family.spec().cprog) > 1:
        raise UserError(f"small_budget_bound: {family!r} is context-dependent: its subtrees "
                        "are not copies of one law, so the conditioned bound does not apply")
    if isinstance(expand, bool) or not isinstance(expand, (int, np.integer)) or expand < 1:
        raise UserError(f"small_budget_bound: expand must be an integer >= 1, got {expand!r}")
    if samples is not None and (isinstance(samples, bool) or samples < 2
                                or not isinstance(samples, (int, np.integer))):
        raise UserError(f"small_budget_bound: samples must be an integer >= 2, got {samples!r}")
    P = _budgets(budgets)
    flat = np.sort(np.unique(P.ravel()))
    steps = spine_steps(family)
    s, u, counts = renewal_grid(steps, 8.0 * float(flat[-1]), None, "floor")
    h = float(s[1] - s[0])
    cum_u = np.cumsum(u)
    # the unconditioned minimiser's cell: the control variate's tau (any tau is valid)
    jstar = np.minimum(np.searchsorted(counts, flat, side="left"), s.size - 1)
    tau_fix = np.maximum(s[jstar] - 0.5 * h, 0.0)
    t_max = float(min(s[-1], tau_fix.max() + _MARGIN))
    spec = family.spec()
    lf, li = np.empty((1, LEVEL_F)), np.empty((1, LEVEL_I), np.int64)
    head = np.empty((1, max(spec.head_cap, 1)))
    reps = steps.replicates()
    key = seed_key(seed) ^ _STREAM

    def run(n, key, t_max, want_w):
        tau = np.minimum(tau_fix, t_max)
        out = np.empty((3, n, flat.size))
        w = np.zeros((flat.size, 4, s.size) if want_w else (1, 4, 1))
        work = np.zeros(1, np.int64)
        if answering(conditioned_values, law(spec), (lf, li, head), key, n, int(expand), t_max,
                     (cum_u, counts, h), flat, tau, out, (w, want_w), work) < 0:
            raise UserError(f"small_budget_bound: {family!r} has more than {MAX_FRONTIER} "
                            "children within reach of a node; the conditioned bound is not "
                            "computed for so wide a law")
        return out[0], out[1], out[2], w, tau, int(work[0]) / n

    # a pilot on other roots sets how deep children are drawn: lam below every pilot
    # tree's minimiser (less a margin) is never needed; any t_max keeps the bound valid
    pilot = run(_PILOT, key ^ _PILOT_STREAM, t_max, False)
    t_max = float(min(t_max, pilot[2][:, -1].max() + _PILOT_MARGIN))
    if samples is None:    # the pilot drew deeper than the run will: an overestimate
        samples = int(np.clip(WORK_BUDGET / max(pilot[5], 1.0), MIN_SAMPLES, DEFAULT_SAMPLES))
    out_b, out_g, _, w, tau_fix, _ = run(int(samples), key, t_max, bool(reps))
    value, se = np.empty(flat.size), np.empty(flat.size)
    coef = np.zeros(flat.size)
    jf = (tau_fix / h).astype(np.int64)
    ub_fix = cum_u[jf] + np.exp(-tau_fix) * (flat - counts[jf])
    for b in range(flat.size):
        xb, xg = out_b[:, b], out_g[:, b]
        var_g = float(xg.var())
        if var_g > 1e-30 * max(float(xg.mean()) ** 2, 1e-300):
            # clipped to [0, 1]: c > 1 would multiply the floor grid's slack
            # ub(tau_0) - E[G_0] >= 0 (where G_0 hardly varies, the regression explodes)
            coef[b] = min(max(float(np.mean((xb - xb.mean()) * (xg - xg.mean()))) / var_g,
                              0.0), 1.0)
        d = xb - coef[b] * xg
        value[b] = float(d.mean()) + coef[b] * ub_fix[b]
        se[b] = float(d.std(ddof=1)) / math.sqrt(samples)
    if reps:
        se = np.hypot(se, _law_se(reps, s.size, h, cum_u, counts, w, coef, jf, tau_fix, flat,
                                  samples))
    # each of these bounds E[X_P]: the unconditioned bound on the same grid, and the
    # conditioned bound of any larger budget (E[X_P] is nondecreasing in P)
    ub = lagrangian_min(s, u, counts, flat)[0]
    lower = ub < value
    value[lower] = ub[lower]
    if not reps:
        se[lower] = 0.0
    for b in range(flat.size - 2, -1, -1):
        if value[b + 1] < value[b]:
            value[b], se[b] = value[b + 1], se[b + 1]
    idx = np.searchsorted(flat, P)
    return Prediction(value[idx], se[idx])


def _law_se(reps, size, h, cum_u, counts, w, coef, jf, tau_fix, flat, samples):
    """The sampled spine law's share of the standard error, by the delta method.

    At fixed minimisers the estimate is linear in the renewal sums (cum_u, cum_m): the
    kernel's weights ``w`` give its change for each batch's law, and the law's standard
    error is the batches' spread over sqrt(batches).
    """
    dev = np.empty((len(reps), flat.size))
    for r, rep in enumerate(reps):
        du = _renewal_density(rep.cells(h, size, "floor"))
        dcu = np.cumsum(du) - cum_u
        dcm = np.cumsum(np.exp(np.arange(size) * h) * du) - counts
        d_b = (w[:, 0] @ dcu - w[:, 1] @ dcm) / samples
        d_g = (w[:, 2] @ dcu - w[:, 3] @ dcm) / samples
        d_ub = dcu[jf] - np.exp(-tau_fix) * dcm[jf]
        dev[r] = d_b - coef * (d_g - d_ub)
    return dev.std(axis=0, ddof=1) / math.sqrt(len(reps))
