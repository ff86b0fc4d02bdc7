"""The paper's bound and renewal-theory predictions of E[X].

Natural logarithms (nats) everywhere. The derivation is in ``docs/theory.md``; in short:

* A step of the *spine* is ``-log q_I`` with ``I ~ q``; its law F (the :class:`SpineSteps`)
  has total mass ``m = E[sum q]`` (``m < 1`` when a family leaves mass outside every tree),
  mean ``mu = E[H(q)]`` and second moment ``mu2 = E[sum q_i (log q_i)^2]``.
* Let ``U(t) = sum_{n>=1} F^{*n}[0, t]`` (the root, n = 0, is not counted) and
  ``M(t) = int_0^t e^s U(ds)``. By the many-to-one lemma, ``M(t)`` is the mean number of
  non-root nodes with ``S(v) <= t`` and ``U(t)`` is the mean of ``sum p(v)`` over them, i.e.
  E[X] for the threshold tree ``{S(v) <= t}``.
* The prediction for budget P fills the expected-count measure ``M(ds)`` from ``s = 0``
  upwards until P nodes' worth of mass is taken and collects ``e^{-s}`` per node: when M has
  no atoms this is ``U(t_P)`` with ``M(t_P) = P``. It is exact for deterministic families
  (``Fixed``, ``Uniform``, ``Geometric``, whose tree is not random) and first order otherwise:
  for ``m = 1`` the node count concentrates (``#{S <= t} e^{-t} -> 1/mu``) and the error of the
  deterministic threshold vanishes as P grows.
* Key renewal theorem, non-lattice steps, ``m = 1``:
  ``E[X] = log(mu P)/mu + mu2/(2 mu^2) - 1 + o(1)``.
  Sub-stochastic steps (``m < 1``): with ``theta`` solving ``E[sum q^theta] = 1`` and
  ``nu = E[sum q^theta (-log q)]``,
  ``E[X] = m/(1-m) - (theta nu P)^{-(1-theta)/theta} / ((1-theta) nu) + o(P^{-(1-theta)/theta})``.
  On a lattice the asymptotic does not apply (U and M are step functions), but the numerical
  prediction is exact there for deterministic families.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import numpy as np

from brwsim.errors import UserError
from brwsim.theory.contextual import NoTheory, context_values
from brwsim.theory.convolution import fft_convolve
from brwsim.theory.laws import (
    SpineLaw,
)
from brwsim.theory.sampled import law_seed
from brwsim.theory.renewal import (
    fill_mean_measure,
    lagrangian_min,
    renewal_asymptotic,
    renewal_grid,
    spine_steps,
)
from brwsim.validate import echo

__all__ = ["Prediction", "Bound", "BOUND_ALPHA", "paper_bound", "prediction", "prediction_with_se", "upper_bound",
           "exact_small_budget", "check_family", "spine_steps", "context_spine", "is_iid",
           "NoTheory", "TheoryCurves", "theory_curves", "paper_bound_reason", "CURVES"]


def is_iid(family) -> bool:
    """True when nodes draw their distributions independently (a law counts as i.i.d.).

    False for the context-dependent families (``Family.iid`` False) and for anything whose
    kernels carry a context program (e.g. a tempered context-dependent family).
    """
    if isinstance(family, SpineLaw):
        return True
    if not getattr(family, "iid", True):
        return False
    program = getattr(family, "context_program", None)
    return not (callable(program) and len(program()) > 1)


def context_spine(family):
    """The spine of a context-dependent family, None for an i.i.d. family or a law.

    Raises
    ------
    NoTheory
        For a context-dependent family without a proven bound (``ngram``, ``charlstm``,
        a tempered context family, ...): its i.i.d. marginal law proves nothing there.
    """
    if is_iid(family):
        return None
    hook = getattr(family, "context_spine", None)
    spine = hook() if callable(hook) else None
    if spine is None:
        name = getattr(family, "name", type(family).__name__)
        raise NoTheory(f"{name} is context-dependent (a node's distribution depends on its "
                       "path) and the theory has no proven bound for it; its i.i.d. marginal "
                       "law proves nothing here")
    return spine

def paper_bound(mu, mu2, P):
    """The paper's upper bound on E[X] with its O(1) term dropped.

    ``(mu + mu2) * log(P) / mu**2`` in nats, from Pankratov & Alistarh, "Speculative Decoding
    Speed-of-Light: Optimal Lower Bounds via Branching Random Walks", EACL 2026
    (arXiv:2512.11718), which proves ``E[X] <= (mu + mu2) log P / mu^2 + O(1)``. The constant
    is unknown, so this value is not itself a proven bound.

    Parameters
    ----------
    mu : float or array_like
        Mean spine step ``E[H(q)]`` in nats, > 0.
    mu2 : float or array_like
        Second moment of the spine step ``E[sum q_i (log q_i)^2]``, >= 0.
    P : float or array_like
        Budget (draft tokens per call), >= 1.

    Returns
    -------
    float or numpy.ndarray
        The bound, broadcast over the inputs; a float when all inputs are scalars.

    Raises
    ------
    brwsim.errors.UserError
        If ``mu <= 0``, ``mu2 < 0``, ``P < 1`` or any input is NaN.
    """
    mu_, mu2_, P_ = (np.asarray(a, dtype=float) for a in (mu, mu2, P))
    for name, a in (("mu", mu_), ("mu2", mu2_), ("P", P_)):
        if np.isnan(a).any():
            raise UserError(f"paper_bound: {name} is NaN")
    if (mu_ <= 0).any() or not np.isfinite(mu_).all():
        raise UserError(f"paper_bound: mu must be finite and > 0, got {mu}")
    if (mu2_ < 0).any():
        raise UserError(f"paper_bound: mu2 must be >= 0, got {mu2}")
    if (P_ < 1).any():
        raise UserError(f"paper_bound: budget P must be >= 1, got {P}")
    out = (mu_ + mu2_) * np.log(P_) / mu_**2
    return float(out) if out.ndim == 0 else out


# --------------------------------------------------------------------------------------
# numerical renewal functions on a grid


def _budgets(budgets) -> np.ndarray:
    P = np.asarray(budgets, dtype=float)
    if P.size == 0 or np.isnan(P).any() or (P < 1).any() or not np.isfinite(P).all():
        raise UserError(f"budgets must be finite and >= 1, got {budgets}")
    return P


@dataclass(frozen=True)
class Prediction:
    """A prediction (or bound) per budget with its standard error.

    Attributes
    ----------
    value : numpy.ndarray
        The estimate per budget.
    se : numpy.ndarray
        Its standard error from sampling the spine-step law (0 for an exact law).
    """

    value: np.ndarray
    se: np.ndarray


#: Default risk of the proven bound where the spine law is sampled: the reported bound
#: is below the bound of the true law with probability at most about this.
BOUND_ALPHA = 1e-3


@dataclass(frozen=True)
class Bound(Prediction):
    """A proven upper bound per budget at a stated confidence.

    Where the spine law is exact the bound is proven outright (``se`` 0, ``value`` equal
    to ``point``). Where it is sampled, the Lagrangian minimum of the sampled law is only
    an estimate of the true law's (``point``, with standard error ``se`` from the law's
    independent batches); ``value`` adds Student's t quantile at ``1 - alpha`` (with the
    batches' degrees of freedom) times ``se``, so it lies at or above the true law's bound
    with probability about ``1 - alpha`` or more.

    Attributes
    ----------
    value : numpy.ndarray
        The bound at confidence ``1 - alpha`` (the "proven" value).
    se : numpy.ndarray
        Standard error of ``point`` from sampling the spine-step law (0 when exact).
    point : numpy.ndarray
        The Lagrangian minimum of the (sampled) law itself.
    alpha : float
        The stated risk.
    quantile : float
        The multiplier of ``se`` (0 where no law is sampled).
    """

    point: np.ndarray = None
    alpha: float = BOUND_ALPHA
    quantile: float = 0.0


def _check_alpha(alpha) -> float:
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) \
            or not 0.0 < float(alpha) < 0.5:
        raise UserError(f"alpha (the proven bound's risk) must be in (0, 0.5), got {alpha!r}")
    return float(alpha)


def _proven(point: np.ndarray, se: np.ndarray, replicates: int, alpha: float) -> Bound:
    """``point + t_{1 - alpha, replicates - 1} se`` (the point itself when se is 0)."""
    point = np.asarray(point, dtype=float)
    se = np.asarray(se, dtype=float)
    if replicates < 2 or not (se > 0).any():
        return Bound(point, se, point, alpha, 0.0)
    from scipy.special import stdtrit   # imported on use: scipy.special costs start-up time

    q = float(stdtrit(replicates - 1, 1.0 - alpha))
    return Bound(point + q * se, se, point, alpha, q)


def _evaluate(steps: SpineLaw, P: np.ndarray, h: float | None, mode: str) -> Prediction:
    """The prediction (split grid) or the bound (floor grid), with a delta-method SE.

    For a sampled law the grid masses f are the mean of independent batches f_b. The value
    depends on f through u = (1 + u) * f * (1 + u) - f ... i.e. ``delta(1 + U) =
    (1 + U)^{*2} * delta F``, and is linear in u at fixed minimiser:
    ``delta value = sum_{i <= j*} delta u_i (1 - e^{s_i - t*})``. So each batch's deviation
    costs one FFT convolution instead of a new renewal solve, and
    ``se = sd_b(delta value_b) / sqrt(B)``.
    """
    flat = P.ravel()
    s, u, counts = renewal_grid(steps, float(flat.max()), h, mode)
    value, j, t = (fill_mean_measure if mode == "split" else lagrangian_min)(s, u, counts, flat)
    reps = steps.replicates()
    if not reps:
        return Prediction(value.reshape(P.shape), np.zeros(P.shape))
    hh = s[1] - s[0]
    one_u = u.copy()
    one_u[0] += 1.0
    g = fft_convolve(one_u, one_u)[: s.size]
    f = steps.cells(hh, s.size, mode)
    dev = np.empty((len(reps), flat.size))
    es = np.exp(s)
    for b, rep in enumerate(reps):
        du = fft_convolve(g, rep.cells(hh, s.size, mode) - f)[: s.size]
        cu, cm = np.cumsum(du), np.cumsum(es * du)
        jj = np.maximum(j, 0)
        dev[b] = np.where(j >= 0, cu[jj] - np.exp(-t) * cm[jj], 0.0)
    se = dev.std(axis=0, ddof=1) / math.sqrt(len(reps))
    return Prediction(value.reshape(P.shape), se.reshape(P.shape))


def prediction_with_se(family, budgets, *, h: float | None = None,
                       seed: int | None = None) -> Prediction:
    """The numerical renewal prediction of E[X] with its standard error.

    See :func:`prediction`; the standard error is 0 for families with an exact spine law.
    ``seed`` draws the sampled spine laws anew (as in :func:`upper_bound`).
    """
    P = _budgets(budgets)
    with _seeded(seed):
        spine = context_spine(family)
        if spine is not None:
            return Prediction(*context_values(spine, P, h, "split"))
        return _evaluate(spine_steps(family), P, h, "split")


def prediction(
    family,
    budgets,
    method: str = "numerical",
    *,
    h: float | None = None,
) -> np.ndarray:
    """Renewal-theory prediction of E[X], the accepted draft tokens of the optimal tree.

    Parameters
    ----------
    family : object
        A family or a :class:`~brwsim.theory.laws.SpineLaw` (see :func:`spine_steps`).
    budgets : array_like
        Budgets P >= 1 (draft tokens, root excluded).
    method : {"numerical", "asymptotic"}
        ``"numerical"``: fill the expected-count measure ``M(ds) = e^s U(ds)`` with P nodes
        from s = 0 upwards, collecting ``e^{-s}`` per node (``U(t_P)`` with ``M(t_P) = P``
        when M has no atoms). This is also ``min_t U(t) + e^{-t} (P - M(t))``, an upper
        bound on E[X] (``docs/theory.md``), and exact for deterministic families (Fixed,
        Uniform, Geometric) up to the O(h) grid error (none on a lattice). For random
        families the gap to E[X] is that of a random threshold against its mean measure;
        it vanishes as P grows for homogeneous families.
        ``"asymptotic"``: the key renewal theorem, non-lattice laws only.
        With ``m = E[sum q] = 1``: ``log(mu P)/mu + mu2/(2 mu^2) - 1``.
        With ``m < 1``: ``m/(1-m) - (theta nu P)^(-(1-theta)/theta) / ((1-theta) nu)``
        (see :meth:`~brwsim.theory.laws.SpineLaw.malthusian`). The error is o(1) as P grows.
    h : float, optional
        Grid step of the numerical method (default ``min(1e-3, mu/100)``; the lattice span on
        a lattice; a sampled law's own step).

    Returns
    -------
    numpy.ndarray
        Predicted E[X] per budget (float64, the shape of ``budgets``). Its standard error
        is :func:`prediction_with_se`'s.

    Raises
    ------
    brwsim.errors.UserError
        For budgets < 1 or NaN, an unknown method, or ``method="asymptotic"`` on a lattice law.
    """
    if method not in ("numerical", "asymptotic"):
        raise UserError(f"method must be 'numerical' or 'asymptotic', got {method!r}")
    P = _budgets(budgets)
    spine = context_spine(family)
    if spine is not None:
        if method == "asymptotic":
            raise NoTheory("the key renewal asymptotic is for i.i.d. nodes; this family is "
                           "context-dependent")
        return context_values(spine, P, h, "split")[0]
    steps = spine_steps(family)
    if method == "numerical":
        return _evaluate(steps, P, h, "split").value
    moments = None
    if not steps.exact and hasattr(family, "moments"):
        moments = family.moments()  # closed-form mu, mu2 beat the sampled ones
        if not getattr(moments, "exact", True):
            moments = None
    return renewal_asymptotic(steps, P.ravel(), moments).reshape(P.shape)


def check_family(family):
    """Refuse, in one line, a family whose parameters are valid but degenerate in float64.

    Builds the family's kernel tables, moments and spine law with floating-point warnings
    silenced, and raises instead of letting NaN, inf or a traceback reach the user:
    tables that cannot be built (``softmaxnormal(sigma=1e308, ...)``), infinite moments
    (``dirichlet(alpha=1e308, ...)``), a most likely token of probability 1 in float64
    (``zipf(s=800, vocab=10)``, ``geometric(r=1e-300)``: every tree is a chain), listed
    tokens of no mass (``fixed(probs=[1e-300, 1e-300])``) or a mean entropy whose square
    underflows.

    Returns
    -------
    Spec or None
        The family's compiled kernel form (built here anyway: callers reuse it); None for
        a family whose trees a batched backend builds (``family.batched``).

    Raises
    ------
    brwsim.errors.UserError
        Naming the family and what degenerates.
    """
    import warnings


    what = echo(repr(family))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            # a batched backend builds its trees itself: no kernel form (packed weights)
            spec = None if getattr(family, "batched", False) else family.spec()
            mom = family.moments()
            law = spine_steps(family)
            mass = law.mass
        except UserError:
            raise
        except (ValueError, ArithmeticError) as exc:
            raise UserError(f"{what}: valid parameters, but its numbers degenerate in float64 "
                            f"({exc})") from None
    if not (math.isfinite(mom.mu) and math.isfinite(mom.mu2)):
        raise UserError(f"{what}: valid parameters, but its numbers degenerate in float64 "
                        f"(mu = {mom.mu:g}, mu2 = {mom.mu2:g})")
    if mass < 1e-12:
        raise UserError(f"{what}: the listed tokens hold mass {mass:.3g}: every tree's E[X] is "
                        "0 in float64")
    if mom.mu < 1e-9 and mass >= 1 - 1e-9:
        raise UserError(f"{what}: the most likely token has probability 1 in float64 (mean "
                        f"entropy {mom.mu:.3g} nats): every tree is a chain of P nodes (X = P)")
    if mom.mu < 1e-100:
        raise UserError(f"{what}: mean entropy {mom.mu:.3g} nats: its square underflows in "
                        "float64")
    return spec


def exact_small_budget(family) -> float:
    """The exact E[X] at budget P = 1: E[max_i q_i] (the tree is the root's top child).

    The renewal prediction is an upper bound that fills the *mean* measure; at small P on
    heterogeneous families it is far above E[X] (``docs/theory.md``, Section 2). This
    value is exact for Uniform, Fixed, Geometric, Zipf (quadrature over the exponent),
    Peaked (incomplete beta functions), Empirical, EntropyTarget and their mixtures and
    tempered equivalents.

    Raises
    ------
    brwsim.errors.UserError
        For a family without a closed form (e.g. Dirichlet, SoftmaxNormal): estimate it with
        ``simulate(family, [1], n)``.
    """
    value = family.top1_mean() if hasattr(family, "top1_mean") else None
    if value is None:
        raise UserError(f"no closed form of E[max q] for {family!r}: estimate it with "
                        "brwsim.simulate(family, [1], iterations)")
    return float(value)


def upper_bound(family, budgets, *, h: float | None = None, alpha: float = BOUND_ALPHA,
                seed: int | None = None) -> Bound:
    """A proven upper bound on E[X] for every drafter that knows the distributions.

    For any tree T of P nodes and any lambda = e^{-t} >= 0,
    ``sum_{v in T} p(v) <= sum_v (p(v) - lambda)^+ + lambda P`` (each node of T adds at
    most ``(p - lambda)^+ + lambda``), so by the many-to-one lemma
    ``E[X] <= U(t) - e^{-t} M(t) + P e^{-t}`` for every t; this returns the minimum over t.
    It refines ``U(t) + P e^{-t}`` by ``e^{-t} M(t)`` and its slope in log P is ``1 / mu``
    (the paper's is ``(mu + mu2) / mu^2``). The renewal functions are computed on the grid
    ``j h`` after moving every step *down* to a grid point, which can only raise
    ``E[sum (p - lambda)^+]``, and are then exact lattice sums: the result is a bound,
    not an approximation, up to float round-off. Where the spine law is sampled, the
    minimum on the sampled law is an estimate of the true law's (``point``, standard
    error ``se``): the returned ``value`` is then ``point`` plus Student's t quantile at
    ``1 - alpha`` times ``se``, a bound at confidence ``1 - alpha``. Derivation:
    ``docs/theory.md``.

    Parameters
    ----------
    family : object
        A family or a spine-step law.
    budgets : array_like
        Budgets P >= 1.
    h : float, optional
        Grid step (default as :func:`prediction`); a smaller step tightens the bound by
        about ``h / (2 mu)`` relative.
    alpha : float
        Risk of the bound where the spine law is sampled, in (0, 0.5) (default
        :data:`BOUND_ALPHA`).
    seed : int, optional
        Draw the sampled spine laws with this seed (another independent draw of the law,
        so the standard error can be checked); default: the family's memoised law
        (seed 0). No effect on exact laws.

    Returns
    -------
    Bound
        The bound at confidence ``1 - alpha`` (``value``), the sampled law's own minimum
        (``point``) and its standard error (0 for exact laws).

    Raises
    ------
    NoTheory
        For a context-dependent family without a proven bound (see :func:`context_spine`).

    Notes
    -----
    Context-dependent families with a ``context_spine()`` (``markovregime``,
    ``depthdrift``, ``correlatedentropy``) get the same Lagrangian minimum over their own
    mean measure (:mod:`brwsim.theory.contextual`); others raise :class:`NoTheory`.
    """
    P = _budgets(budgets)
    alpha = _check_alpha(alpha)
    with _seeded(seed):
        spine = context_spine(family)
        if spine is not None:
            point, se = context_values(spine, P, h, "floor")
            reps = min((len(r) for r in (law.replicates() for law in spine.laws) if r),
                       default=0)
        else:
            steps = spine_steps(family)
            res = _evaluate(steps, P, h, "floor")
            point, se = res.value, res.se
            reps = len(steps.replicates())
    return _proven(point, se, reps, alpha)


def _seeded(seed: int | None):
    """Inside: sampled spine laws drawn with ``seed`` (no change when it is None)."""
    return contextlib.nullcontext() if seed is None else law_seed(seed)


#: The per-budget theory variables :func:`theory_curves` returns.
CURVES = ("prediction", "prediction_se", "prediction_asymptotic", "upper_bound",
          "upper_bound_se", "upper_bound_point")


@dataclass(frozen=True)
class TheoryCurves:
    """The theory values per budget, NaN where they do not exist, and why.

    Attributes
    ----------
    values : dict of str to numpy.ndarray
        :data:`CURVES`: ``prediction`` (and ``prediction_se``), ``prediction_asymptotic``,
        ``upper_bound`` (the proven bound, at confidence ``1 - BOUND_ALPHA`` where the
        spine law is sampled), ``upper_bound_se`` and ``upper_bound_point`` (the sampled
        law's own minimum; equal to ``upper_bound`` where the law is exact).
    reasons : dict of str to str
        For every NaN variable, the one-line reason (stored as its ``reason`` attribute).
    """

    values: dict
    reasons: dict


def theory_curves(family, budgets, method: str = "numerical") -> TheoryCurves:
    """The renewal prediction, its asymptotic and the proven bound of ``family`` per budget.

    Never raises for a family whose theory does not exist: the values are NaN and the
    reason is recorded (context-dependent families without a proven bound, lattice laws
    for the asymptotic, degenerate laws). A context-dependent family never gets a value
    computed from its i.i.d. marginal law.

    Parameters
    ----------
    family : Family or SpineLaw
    budgets : array_like
        Budgets P >= 1.
    method : {"numerical", "asymptotic"}
        What ``prediction`` holds (the asymptotic has ``prediction_se`` 0).

    Returns
    -------
    TheoryCurves
    """
    P = _budgets(budgets)
    nan = np.full(P.shape, np.nan)
    values, reasons = {}, {}

    def put(name, fn):
        try:
            res = fn()
        except (UserError, NotImplementedError) as exc:
            values[name] = nan
            reasons[name] = str(exc)
            for extra in ("_se", "_point"):
                if name + extra in CURVES:
                    values[name + extra], reasons[name + extra] = nan, str(exc)
            return
        if isinstance(res, Prediction):
            values[name], values[name + "_se"] = (np.asarray(res.value, float),
                                                  np.asarray(res.se, float))
            if isinstance(res, Bound):
                values[name + "_point"] = np.asarray(res.point, float)
        else:
            values[name] = np.asarray(res, float)

    if method == "numerical":
        put("prediction", lambda: prediction_with_se(family, P))
    else:
        put("prediction", lambda: Prediction(prediction(family, P, method), np.zeros(P.shape)))
    put("prediction_asymptotic", lambda: prediction(family, P, method="asymptotic"))
    put("upper_bound", lambda: upper_bound(family, P))
    return TheoryCurves(values, reasons)


def paper_bound_reason(family) -> str | None:
    """Why :func:`paper_bound` does not apply to ``family`` (None when it does)."""
    if is_iid(family):
        return None
    return ("the paper's bound is for i.i.d. nodes; this family is context-dependent and its "
            "marginal moments prove nothing here")
