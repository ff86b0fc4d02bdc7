"""Parametric i.i.d. families: Uniform, Fixed, Geometric, Zipf, Dirichlet, SoftmaxNormal, Peaked."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import special

from brwsim.errors import UserError
from brwsim.families.base import Component, Family, Moments, check_int, check_positive
from brwsim.families.tables import N_INTERVALS, X_MAX, X_MIN, orderstat_table, zipf_norm_table
from brwsim.kernels import dist as K
from brwsim.kernels.special import zipf_sum

__all__ = ["Uniform", "Fixed", "Geometric", "Zipf", "Dirichlet", "SoftmaxNormal", "Peaked",
           "LAZY_ABOVE", "LAZY_HEAD", "tempered_listed"]

#: Vocabularies above this are generated lazily (head plus a drawn tail sum).
LAZY_ABOVE = 1024
#: Number of exact leading order statistics generated per node in lazy mode.
LAZY_HEAD = 64
_GL_NODES = 48


def tempered_listed(q: np.ndarray, beta: float) -> np.ndarray:
    """Temper listed probabilities ``q`` (sum <= 1) with the missing mass as one token.

    Returns q**beta / Z sorted descending, Z = sum q**beta + (1 - sum q)**beta, so the
    missing mass stays a token outside any tree.
    """
    q = np.sort(np.asarray(q, dtype=np.float64))[::-1]
    if beta == 1.0:
        return q
    tail = max(0.0, 1.0 - q.sum())
    w = q ** beta
    z = w.sum() + (tail ** beta if tail > 1e-15 else 0.0)
    return w / z


def _log_or_minf(q: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(q)


class Uniform(Family):
    """q uniform over ``k`` tokens: the lattice case, where exact answers exist.

    With k**1 + ... + k**d nodes the optimal tree holds the first d full levels and
    E[X | T] = d exactly.
    """

    name = "uniform"

    def __init__(self, k: int) -> None:
        self.k = check_int("k", k, 2)

    def params(self) -> dict[str, Any]:
        return {"k": self.k}

    def components(self, beta: float = 1.0) -> list[Component]:
        return [Component(K.UNIFORM, [-math.log(self.k)], [self.k])]

    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        return np.full(self.k, 1.0 / self.k)

    def moments(self, n: int | None = None, seed: int = 0) -> Moments:
        lk = math.log(self.k)
        return Moments(lk, lk * lk, h2=lk * lk)


class Fixed(Family):
    """One fixed vector at every node (e.g. a measured positional acceptance vector).

    ``probs`` is sorted internally; a sum below 1 leaves the remaining mass to a token
    outside any tree. Moments sum over the listed tokens only.
    """

    name = "fixed"

    def __init__(self, probs: Any) -> None:
        q = np.asarray(probs, dtype=np.float64).ravel() if not isinstance(probs, str) else None
        if q is None or q.size == 0:
            raise UserError(f"probs must be a non-empty list of probabilities, got {probs!r}")
        if not np.all(np.isfinite(q)) or np.any(q < 0):
            raise UserError("probs must be finite and non-negative")
        if q.sum() > 1.0 + 1e-9:
            raise UserError(f"probs must sum to at most 1, got {q.sum():.12g}")
        q = np.sort(q[q > 0])[::-1]
        if q.size == 0:
            raise UserError("probs must contain a positive probability")
        if q[0] >= 1.0:
            raise UserError("probs has a token of probability 1: every tree would be a chain "
                            "of P nodes (X = P); brwsim needs max(probs) < 1")
        self.probs = q

    def params(self) -> dict[str, Any]:
        return {"probs": [float(x) for x in self.probs]}

    def components(self, beta: float = 1.0) -> list[Component]:
        return [Component(K.TABLE, data=_log_or_minf(tempered_listed(self.probs, beta)))]

    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        return tempered_listed(self.probs, beta)

    def moments(self, n: int | None = None, seed: int = 0) -> Moments:
        lq = np.log(self.probs)
        mu = float(-(self.probs * lq).sum())
        return Moments(mu, float((self.probs * lq * lq).sum()), h2=mu * mu)


class Geometric(Family):
    """q_i = (1 - r) r**i, i = 0, 1, ...: an infinite vocabulary."""

    name = "geometric"

    def __init__(self, r: float) -> None:
        self.r = check_positive("r", r)
        if self.r >= 1.0:
            raise UserError(f"r must be in (0, 1), got {r!r}")

    def params(self) -> dict[str, Any]:
        return {"r": self.r}

    def components(self, beta: float = 1.0) -> list[Component]:
        r = self.r ** beta
        return [Component(K.GEOMETRIC, [r, math.log(r), math.log1p(-r)])]

    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        r = self.r ** beta
        n = min(int(math.ceil(math.log(1e-17) / math.log(r))) + 1, 10_000_000)
        return (1.0 - r) * r ** np.arange(n)

    def moments(self, n: int | None = None, seed: int = 0) -> Moments:
        r = self.r
        a, b = math.log1p(-r), math.log(r)
        m1 = r / (1.0 - r)
        m2 = r * (1.0 + r) / (1.0 - r) ** 2
        mu = -(a + b * m1)
        mu2 = a * a + 2.0 * a * b * m1 + b * b * m2
        return Moments(mu, mu2, h2=mu * mu)


def _zipf_moments_at(s: float, vocab: int) -> tuple[float, float]:
    s0 = zipf_sum(vocab, s, 0)
    s1 = zipf_sum(vocab, s, 1) / s0
    s2 = zipf_sum(vocab, s, 2) / s0
    lz = math.log(s0)
    return s * s1 + lz, s * s * s2 + 2.0 * s * lz * s1 + lz * lz


class Zipf(Family):
    """q_i proportional to i**-s over i = 1..vocab; each node draws s ~ U[s - spread, s + spread].

    O(1) per generated rank: the normaliser is an Euler-Maclaurin sum. Moments are exact
    (Gauss-Legendre quadrature over the exponent).
    """

    name = "zipf"

    def __init__(self, s: float, vocab: int, spread: float = 0.0) -> None:
        self.s = check_positive("s", s, allow_zero=True)
        self.vocab = check_int("vocab", vocab, 2)
        self.spread = check_positive("spread", spread, allow_zero=True)
        if self.spread > self.s:
            raise UserError(f"spread must be at most s (exponents stay >= 0), got spread={spread!r} > s={s!r}")

    def params(self) -> dict[str, Any]:
        return {"s": self.s, "vocab": self.vocab, "spread": self.spread}

    def components(self, beta: float = 1.0) -> list[Component]:
        lo, hi = beta * (self.s - self.spread), beta * (self.s + self.spread)
        table = zipf_norm_table(lo, hi, self.vocab)
        inv_h = table.shape[0] / (hi - lo) if hi > lo else 1.0
        return [Component(K.ZIPF, [lo, hi, inv_h], [self.vocab], data=table)]

    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        s = beta * rng.uniform(self.s - self.spread, self.s + self.spread)
        w = np.arange(1, self.vocab + 1, dtype=np.float64) ** -s
        return w / w.sum()

    def moments(self, n: int | None = None, seed: int = 0) -> Moments:
        if self.spread == 0.0:
            h, m2 = _zipf_moments_at(self.s, self.vocab)
            return Moments(h, m2, h2=h * h)
        x, w = np.polynomial.legendre.leggauss(_GL_NODES)
        vals = np.array([_zipf_moments_at(self.s + self.spread * xi, self.vocab) for xi in x])
        w = w / 2.0
        return Moments(float(w @ vals[:, 0]), float(w @ vals[:, 1]), h2=float(w @ vals[:, 0] ** 2))


class _OrderStatFamily(Family):
    """Normalised i.i.d. weights over a vocabulary, generated as order statistics.

    Vocabularies up to ``LAZY_ABOVE`` are generated in full (exact). Larger ones generate
    the ``LAZY_HEAD`` largest weights exactly and draw the sum R of the other n - 64, i.i.d.
    given that they lie below the 64th, from a gamma law with its exact mean and variance,
    capped at (n - 64) times the 64th weight; the normaliser is Z = head + R. This is a
    documented approximation, tested against exact sampling at vocab 1536-32000: KS tests
    on the top-1, top-2 and tail masses, on the per-tree law of E[X | T_P], and E[X]
    within standard errors (``tests/statistical/test_lazy_*.py``).

    The tail ranks r = 64 .. n - 1 share R exactly, so every node's distribution sums to
    1 (to rounding, about 1e-14). With M the probability not yet emitted (R / Z at rank
    64), mu the conditional mean of the probability of ranks >= r given the previous order
    statistic ((n - r) E[W | W < w_{r-1}] / Z, from the tabulated partial moments) and w
    the exact r-th order statistic (Renyi's sum continues), rank r gets
    ``w * (1 + g * (M - mu) / mu)`` clipped to [M / (n - r), min(M, q_{r-1})], and the
    last rank gets all of M. The clip keeps ranks non-increasing and M <= (n - r) q_{r-1}
    at every step, so it is never empty and the last rank fits. The gain
    g = 2 - 1.4 (mu / mu_64)**0.1 rises from 0.6 at rank 64 to 2 deep in the tail: 0.6
    spreads the drawn R's departure from its mean over the upper tail about as exact
    sampling does (SD of the mass of ranks 0-127 of Dirichlet(0.05, 2048): 0.0146 against
    0.0165 exactly; a constant gain of 0, i.e. the old scheme's R independent of the tail
    ranks, gives 0.027 and sums of 0.93-1.04; constant 1 or 2 give 0.012 and 0.009), and
    a gain > 1 makes the departure die out deep in the tail (relative to mu it scales as
    mu**(g - 1)), so small probabilities keep their exact means. The power 0.1 was chosen
    on the per-tree SD of E[X | T_P] against exact sampling (Dirichlet(0.05, .) at vocab
    2048 / 4096 / 32000 and P = 256 / 1024 / 4096: SD ratios 0.94 / 1.02 / 1.35, the last
    with 15 exact trees; constant 0.6 gives 2.8 at 32000, power 0.2 gives 0.53). Tail
    ranks cost O(1) each (two spline evaluations and a power).
    """

    _law = ""
    vocab: int

    def _param(self) -> float:
        raise NotImplementedError

    def components(self, beta: float = 1.0) -> list[Component]:
        lazy = self.vocab > LAZY_ABOVE
        n_head = LAZY_HEAD if lazy else self.vocab
        table = orderstat_table(self._law, self._param(), float(beta))
        inv_h = N_INTERVALS / (X_MAX - X_MIN)
        return [Component(K.ORDERSTAT, [X_MIN, inv_h], [self.vocab, N_INTERVALS, n_head, int(lazy)],
                          data=table, head_cap=n_head)]


class Dirichlet(_OrderStatFamily):
    """Symmetric Dirichlet(alpha) over ``vocab`` tokens (normalised Gamma(alpha) weights).

    Moments are exact: with A = vocab * alpha,
    mu = psi(A + 1) - psi(alpha + 1) and
    mu2 = (psi(alpha + 1) - psi(A + 1))**2 + psi1(alpha + 1) - psi1(A + 1).
    """

    name = "dirichlet"
    _law = "gamma"

    def __init__(self, alpha: float, vocab: int) -> None:
        self.alpha = check_positive("alpha", alpha)
        self.vocab = check_int("vocab", vocab, 2)

    def _param(self) -> float:
        return self.alpha

    def params(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "vocab": self.vocab}

    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        # log G = log G(alpha + 1) + log(U) / alpha: no underflow for tiny alpha
        lg = np.log(rng.gamma(self.alpha + 1.0, size=self.vocab)) + np.log(rng.random(self.vocab)) / self.alpha
        w = np.exp(beta * (lg - lg.max()))
        return np.sort(w / w.sum())[::-1]

    def moments(self, n: int | None = None, seed: int = 0) -> Moments:
        a, v = self.alpha, self.vocab
        big = v * a
        psi, psi1 = special.digamma, lambda x: special.polygamma(1, x)
        mu = float(psi(big + 1.0) - psi(a + 1.0))
        mu2 = float(mu * mu + psi1(a + 1.0) - psi1(big + 1.0))
        # E[H^2] = sum_i E[q_i^2 log^2 q_i] + sum_{i != j} E[q_i q_j log q_i log q_j]; each
        # term is a moment of a tilted Dirichlet (Wolpert & Wolf 1995).
        norm = big * (big + 1.0)
        diag = a * (a + 1.0) / norm * ((psi(a + 2.0) - psi(big + 2.0)) ** 2
                                       + psi1(a + 2.0) - psi1(big + 2.0))
        cross = a * a / norm * ((psi(a + 1.0) - psi(big + 2.0)) ** 2 - psi1(big + 2.0))
        return Moments(mu, mu2, h2=float(v * diag + v * (v - 1.0) * cross))


class SoftmaxNormal(_OrderStatFamily):
    """Softmax of i.i.d. N(0, sigma**2) logits over ``vocab`` tokens (Monte Carlo moments)."""

    name = "softmaxnormal"
    _law = "lognormal"

    def __init__(self, sigma: float, vocab: int) -> None:
        self.sigma = check_positive("sigma", sigma, allow_zero=True)
        self.vocab = check_int("vocab", vocab, 2)

    def _param(self) -> float:
        return self.sigma

    def params(self) -> dict[str, Any]:
        return {"sigma": self.sigma, "vocab": self.vocab}

    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        z = beta * self.sigma * rng.standard_normal(self.vocab)
        w = np.exp(z - z.max())
        return np.sort(w / w.sum())[::-1]


class Peaked(Family):
    """Top-1 mass m ~ Beta(a, b); the other 1 - m spread Zipf(s) over the other vocab - 1 tokens.

    The shape of real LLM next-token distributions: most positions nearly certain.
    """

    name = "peaked"

    def __init__(self, a: float, b: float, s: float, vocab: int) -> None:
        self.a = check_positive("a", a)
        self.b = check_positive("b", b)
        self.s = check_positive("s", s, allow_zero=True)
        self.vocab = check_int("vocab", vocab, 2)

    def params(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "s": self.s, "vocab": self.vocab}

    def components(self, beta: float = 1.0) -> list[Component]:
        log_h1 = math.log(zipf_sum(self.vocab - 1, self.s, 0))
        log_hb = math.log(zipf_sum(self.vocab - 1, beta * self.s, 0))
        return [Component(K.PEAKED, [self.a, self.b, beta * self.s, beta, log_h1, log_hb], [self.vocab])]

    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        m = rng.beta(self.a, self.b)
        z = np.arange(1, self.vocab, dtype=np.float64) ** -self.s
        w = np.concatenate(([m], (1.0 - m) * z / z.sum())) ** beta
        return np.sort(w / w.sum())[::-1]
