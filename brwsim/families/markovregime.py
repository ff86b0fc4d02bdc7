"""MarkovRegime: a hidden regime that switches along every path."""

from __future__ import annotations

from typing import Any

import numpy as np

from brwsim.errors import UserError
from brwsim.families.base import Component, Family, Moments
from brwsim.families.context import _families, _ranges
from brwsim.families.mixture import Mixture
from brwsim.kernels import dist as K
from brwsim.theory.contextual import RegimeSpine

__all__ = ["MarkovRegime"]


class MarkovRegime(Family):
    """A hidden regime carried along every path, switching by a Markov chain at each token.

    Parameters
    ----------
    families : list of Family
        One i.i.d. family per regime (e.g. an easy and a hard one).
    transition : (K, K) array-like, optional
        Row-stochastic transition matrix between the regimes of a parent and its child.
    weights, persistence : optional
        Alternative to ``transition``: T = persistence * I + (1 - persistence) * 1 w^T, so
        the stationary law is ``weights`` and persistence 0 is the i.i.d. mixture.

    The root's regime is drawn from the stationary law of T.
    """

    name = "markovregime"
    param_kinds = {"families": "families", "transition": "matrix", "weights": "list"}
    example = ("markovregime(families=[geometric(r=0.1), dirichlet(alpha=0.3, vocab=50)], "
               "weights=[0.6, 0.4], persistence=0.9)")
    iid = False

    def __init__(self, families: Any, transition: Any = None, weights: Any = None,
                 persistence: float | None = None) -> None:
        self.families = _families(families, "markovregime")
        k = len(self.families)
        if (transition is None) == (persistence is None):
            raise UserError("markovregime needs either transition=[[...]] or weights=[...] and persistence=")
        if transition is None:
            rho = float(persistence)
            if not 0.0 <= rho < 1.0:
                raise UserError(f"persistence must be in [0, 1), got {persistence!r}")
            w = np.ones(k) / k if weights is None else np.asarray(weights, dtype=np.float64).ravel()
            if w.size != k or not np.all(np.isfinite(w)) or (w < 0).any() or w.sum() <= 0:
                raise UserError(f"weights must be {k} non-negative numbers, not all zero")
            w = w / w.sum()
            transition = rho * np.eye(k) + (1.0 - rho) * np.outer(np.ones(k), w)
            self._form = {"weights": [float(x) for x in w], "persistence": rho}
        else:
            self._form = {"transition": np.asarray(transition, dtype=np.float64).tolist()}
        t = np.asarray(transition, dtype=np.float64)
        if t.shape != (k, k) or not np.all(np.isfinite(t)) or (t < 0).any():
            raise UserError(f"transition must be a {k}x{k} matrix of non-negative numbers")
        if not np.allclose(t.sum(axis=1), 1.0, atol=1e-9):
            raise UserError("transition rows must sum to 1")
        self.transition = t
        vals, vecs = np.linalg.eig(t.T)
        pi = np.abs(np.real(vecs[:, np.argmin(np.abs(vals - 1.0))]))
        self.stationary = pi / pi.sum()

    def params(self) -> dict[str, Any]:
        return {"families": list(self.families), **self._form}

    def components(self, beta: float = 1.0) -> list[Component]:
        return _ranges(self.families, beta)[0]

    def context_program(self, beta: float = 1.0) -> np.ndarray:
        k = len(self.families)
        bounds = _ranges(self.families, beta)[1]
        return np.concatenate([[K.CTX_REGIME, k], np.cumsum(self.transition, axis=1).ravel(),
                               np.cumsum(self.stationary), bounds])

    def _marginal(self) -> Mixture:
        return Mixture(self.families, self.stationary)

    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        return self._marginal().sample_full(rng, beta)

    def moments(self, n: int | None = None, seed: int = 0) -> Moments:
        return self._marginal().moments(n=n, seed=seed)

    def spine_law(self):
        """The stationary marginal's law (the i.i.d. mixture of the regimes)."""
        return self._marginal().spine_law()

    def top1_mean(self) -> float | None:
        return self._marginal().top1_mean()

    def context_spine(self) -> RegimeSpine:
        """The regimes' spine laws chained by the transition matrix (a multi-type spine)."""
        return RegimeSpine([f.cached_spine_law() for f in self.families], self.transition,
                           self.stationary)
