"""Context-dependent environments: MarkovRegime, DepthDrift, CorrelatedEntropy.

A node's distribution depends on a context carried along its path (a hidden regime, the
depth below the current root, an AR(1) latent). Randomness still comes from each node's
key, so the environment stays a pure function of (seed, path) and every policy sees the
same tree. ``moments()`` and ``sample_full`` describe the stationary marginal law of one
node (what an i.i.d. model fitted to the same text would see); measure moments along
real paths with :func:`brwsim.generate.path_moments`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from brwsim.errors import UserError
from brwsim.families.base import Component, Family, Moments, check_positive
from brwsim.families.combinators import Mixture
from brwsim.families.empirical import EntropyTarget
from brwsim.kernels import dist as K

__all__ = ["MarkovRegime", "DepthDrift", "CorrelatedEntropy"]


def _families(families: Any, what: str) -> list[Family]:
    if not isinstance(families, (list, tuple)) or not families:
        raise UserError(f"{what} needs a non-empty list of families")
    for i, f in enumerate(families):
        if not isinstance(f, Family):
            raise UserError(f"families[{i}] must be a family, got {f!r}")
        if (isinstance(f, (MarkovRegime, DepthDrift, CorrelatedEntropy))
                or len(f.context_program()) > 1):
            raise UserError(f"families[{i}]: context-dependent families do not nest")
    return list(families)


def _ranges(families: list[Family], beta: float) -> tuple[list[Component], list[float]]:
    """Concatenated components and the flat [lo_0, hi_0, lo_1, hi_1, ...] of each family."""
    comps: list[Component] = []
    bounds: list[float] = []
    for fam in families:
        own = fam.components(beta)
        bounds += [len(comps), len(comps) + len(own)]
        comps += own
    return comps, bounds


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


class DepthDrift(Family):
    """The distribution changes with depth below the current root (drafts get harder further out).

    Parameters
    ----------
    families : list of Family
        ``families[d]`` generates the children of nodes at depth d below the root (the
        root, d = 0, uses ``families[0]``); depths beyond the list use the last one.

    ``DepthDrift.tempered(family, temperatures)`` builds the common case of one family at
    rising temperatures. Moments and ``sample_full`` are those of the root's family.
    """

    name = "depthdrift"
    param_kinds = {"families": "families"}
    example = "depthdrift(families=[geometric(r=0.3), dirichlet(alpha=0.3, vocab=50)])"
    iid = False

    def __init__(self, families: Any) -> None:
        self.families = _families(families, "depthdrift")

    @classmethod
    def tempered(cls, family: Family, temperatures: Any) -> "DepthDrift":
        """One family at temperature ``temperatures[d]`` at depth d."""
        from brwsim.families.combinators import Tempered

        return cls([Tempered(family, check_positive("temperature", t)) for t in temperatures])

    def params(self) -> dict[str, Any]:
        return {"families": list(self.families)}

    def components(self, beta: float = 1.0) -> list[Component]:
        return _ranges(self.families, beta)[0]

    def context_program(self, beta: float = 1.0) -> np.ndarray:
        return np.concatenate([[K.CTX_DEPTH, len(self.families)], _ranges(self.families, beta)[1]])

    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        return self.families[0].sample_full(rng, beta)

    def moments(self, n: int | None = None, seed: int = 0) -> Moments:
        return self.families[0].moments(n=n, seed=seed)

    def spine_law(self):
        """The root family's law (``families[0]``)."""
        return self.families[0].spine_law()


class CorrelatedEntropy(EntropyTarget):
    """Entropy following an AR(1) process along each path (Gaussian copula).

    A latent z is N(0, 1) at the root and rho * z_parent + sqrt(1 - rho^2) N(0, 1) below;
    the node's entropy is the stationary law's quantile at Phi(z), and its distribution
    has the given shape with exactly that entropy (as :class:`EntropyTarget`). rho = 0 is
    the i.i.d. EntropyTarget; rho -> 1 makes long easy and hard stretches.
    """

    name = "correlatedentropy"
    param_kinds = {"entropies": "list"}
    example = "correlatedentropy(entropies=[0.5, 1.0, 2.0], rho=0.9)"
    iid = False

    def __init__(self, entropies: Any, rho: float, shape: str = "geometric",
                 vocab: int | None = None) -> None:
        try:
            r = float(rho)
        except (TypeError, ValueError):
            raise UserError(f"rho must be a number in (-1, 1), got {rho!r}") from None
        if not -1.0 < r < 1.0:
            raise UserError(f"rho must be in (-1, 1), got {rho!r}")
        super().__init__(entropies, shape, vocab)
        order = np.argsort(self.entropies, kind="stable")   # quantile map needs sorted values
        self.entropies = self.entropies[order]
        self.params_per_value = self.params_per_value[order]
        self.rho = r

    def params(self) -> dict[str, Any]:
        return {**super().params(), "rho": self.rho}

    def context_program(self, beta: float = 1.0) -> np.ndarray:
        return np.array([K.CTX_AR1, self.rho])
