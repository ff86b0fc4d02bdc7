"""The speed-of-light as a function of mean entropy, and its inverse.

A measured tokens-per-call number tau at draft budget P is compatible, under the i.i.d.
model with an oracle drafter, only with next-token distributions whose mean entropy h makes
the optimal ceiling ``1 + E[X]`` at least tau. The ceiling falls as h grows, so the
compatible entropies are ``h <= h*`` with ``ceiling(h*) = tau``. This module gives both
directions for three one-parameter shapes of distributions:

``"zipf"``
    every position has entropy h; a Zipf law on ``vocab`` tokens;
``"zipf-spread"``
    entropies exponentially distributed with mean h (32 quantile midpoints, scaled so their
    mean is exactly h and clipped below log vocab): most positions near-certain, a long tail,
    as in LLM text; Zipf laws on ``vocab`` tokens;
``"geometric"``
    every position has entropy h; a geometric law (infinite vocabulary).

The ceilings are the numerical renewal prediction (:func:`brwsim.theory.prediction`), exact
for the constant-entropy shapes (deterministic trees) and checked by Monte Carlo for the
spread one (``experiments/published_systems.py``: within 2.6 SE at 2000 trees). The command
``brwsim ceiling`` prints them.
"""

from __future__ import annotations

import math

import numpy as np

from brwsim.errors import UserError
from brwsim.families import EntropyTarget
from brwsim.theory import prediction
from brwsim.validate import MAX_VOCAB, check_int

__all__ = ["SHAPES", "entropy_family", "ceiling", "implied_entropy"]

#: shape name -> description
SHAPES: dict[str, str] = {
    "zipf": "every position has entropy h; Zipf law on the vocabulary",
    "zipf-spread": "entropies ~ Exponential(mean h), LLM-like; Zipf laws on the vocabulary",
    "geometric": "every position has entropy h; geometric law (infinite vocabulary)",
}
_SPREAD_POINTS = 32
_MIN_ENTROPY = 0.01            # nats: the smallest h* solved for (the tree is nearly a chain)
_GEOMETRIC_MAX = 12.0          # nats: beyond the entropy of a uniform 160k-token vocabulary


def _max_entropy(shape: str, vocab: int) -> float:
    return _GEOMETRIC_MAX if shape == "geometric" else math.log(vocab) - 1e-9


def _check(shape: str, h: float, vocab: int) -> None:
    if shape not in SHAPES:
        raise UserError(f"unknown shape {shape!r}; choose from {', '.join(SHAPES)}")
    check_int("vocab", vocab, 2, MAX_VOCAB)
    top = _max_entropy(shape, vocab)
    if not (isinstance(h, (int, float, np.floating)) and 0 < h < top):
        raise UserError(f"mean entropy must be in (0, {top:.4g}) nats for shape {shape!r}, got {h!r}")


def _spread_entropies(h: float, vocab: int) -> np.ndarray:
    top = math.log(vocab) - 1e-9
    from scipy.optimize import brentq  # imported on use: 0.2 s at start-up

    base = -np.log1p(-(np.arange(_SPREAD_POINTS) + 0.5) / _SPREAD_POINTS)   # Exp(1) quantiles
    scale = brentq(lambda c: np.minimum(c * base, top).mean() - h, 0.0, top / base[0], xtol=1e-14)
    return np.minimum(scale * base, top)


def entropy_family(shape: str, h: float, vocab: int = 32000) -> EntropyTarget:
    """The family of ``shape`` (a key of :data:`SHAPES`) whose mean entropy is ``h`` nats.

    Parameters
    ----------
    shape : {"zipf", "zipf-spread", "geometric"}
    h : float
        Mean entropy in nats, in (0, log vocab) (Zipf shapes) or (0, 12) (geometric).
    vocab : int
        Vocabulary of the Zipf shapes (ignored by the geometric one).

    Returns
    -------
    brwsim.families.EntropyTarget

    Raises
    ------
    brwsim.errors.UserError
        On an unknown shape or an entropy out of range.
    """
    _check(shape, h, vocab)
    if shape == "zipf":
        return EntropyTarget([h], shape="zipf", vocab=vocab)
    if shape == "geometric":
        return EntropyTarget([h], shape="geometric")
    return EntropyTarget(_spread_entropies(h, vocab), shape="zipf", vocab=vocab)


def ceiling(h: float, budgets, shape: str = "zipf-spread", vocab: int = 32000) -> np.ndarray:
    """Predicted tokens per call ``1 + E[X]`` of the optimal tree at mean entropy ``h``.

    Parameters
    ----------
    h : float
        Mean entropy in nats (see :func:`entropy_family`).
    budgets : array_like of int
        Draft budgets P >= 1 (root excluded).
    shape, vocab
        As for :func:`entropy_family`.

    Returns
    -------
    numpy.ndarray
        One value per budget.
    """
    return 1.0 + prediction(entropy_family(shape, h, vocab), budgets)


def implied_entropy(tau: float, budget: int, shape: str = "zipf-spread", vocab: int = 32000,
                    tol: float = 1e-7) -> float:
    """The mean entropy h* at which the optimal ceiling at ``budget`` equals ``tau``.

    Parameters
    ----------
    tau : float
        Measured tokens per target call (bonus token included), 1 < tau < budget + 1.
    budget : int
        Draft budget P (root excluded).
    shape, vocab
        As for :func:`entropy_family`.
    tol : float
        Absolute tolerance on log h*.

    Returns
    -------
    float
        h* in nats: entropies above it cannot reach ``tau`` even with an oracle drafter.
        ``inf`` when even the largest entropy of the shape reaches ``tau`` (no constraint).

    Raises
    ------
    brwsim.errors.UserError
        When ``tau`` is not in (1, budget + 1), or the shape or vocabulary is invalid.
    """
    check_int("budget", budget, 1)
    if not (isinstance(tau, (int, float, np.floating)) and 1.0 < tau < budget + 1.0):
        raise UserError(f"tokens per call must be in (1, P + 1) = (1, {budget + 1}), got {tau!r}")
    _check(shape, 1e-3, vocab)
    lo, hi = math.log(_MIN_ENTROPY), math.log(_max_entropy(shape, vocab) * (1 - 1e-9))

    def gap(x: float) -> float:
        return float(ceiling(math.exp(x), [budget], shape, vocab)[0]) - tau

    if gap(hi) >= 0:
        return math.inf
    if gap(lo) <= 0:       # the tree is then nearly a chain, ceiling close to P + 1
        raise UserError(f"tau = {tau} at P = {budget} needs a mean entropy below {_MIN_ENTROPY} nats")
    from scipy.optimize import brentq  # imported on use: 0.2 s at start-up

    return math.exp(brentq(gap, lo, hi, xtol=tol))
