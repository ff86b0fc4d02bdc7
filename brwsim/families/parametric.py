"""Parametric i.i.d. families: Uniform, Fixed, Geometric, Zipf, Dirichlet, SoftmaxNormal, Peaked."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import special

from brwsim.errors import UserError
from brwsim.validate import MAX_VOCAB
from brwsim.families.base import Component, Family, Moments, check_int, check_positive
from brwsim.validate import check_probabilities
from brwsim.families.tables import N_INTERVALS, X_MAX, X_MIN, orderstat_table, zipf_norm_table
from brwsim.kernels import dist as K
from brwsim.kernels.special import zipf_sum
from brwsim import spinelaw as SL

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
    example = "uniform(k=3)"

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

    def spine_law(self) -> SL.SpineLaw:
        """One atom at log k (a lattice law)."""
        return SL.SpineSteps.atoms([math.log(self.k)], [1.0])

    def tempered_family(self, beta: float) -> Family:
        return self

    def top1_mean(self) -> float:
        return 1.0 / self.k


class Fixed(Family):
    """One fixed vector at every node (e.g. a measured positional acceptance vector).

    ``probs`` is sorted internally; a sum below 1 leaves the remaining mass to a token
    outside any tree. Moments sum over the listed tokens only.
    """

    name = "fixed"
    param_kinds = {"probs": "list"}
    example = "fixed(probs=[0.5, 0.3, 0.15])"

    def __init__(self, probs: Any) -> None:
        q = check_probabilities("probs", probs)
        q = np.sort(q[q > 0])[::-1]
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

    def spine_law(self) -> SL.SpineLaw:
        """Atoms -log q_i of weight q_i (mass sum q, possibly below 1)."""
        return SL.SpineSteps.atoms(-np.log(self.probs), self.probs)

    def tempered_family(self, beta: float) -> Family:
        return self if beta == 1.0 else Fixed(tempered_listed(self.probs, beta))

    def top1_mean(self) -> float:
        return float(self.probs[0])


class Geometric(Family):
    """q_i = (1 - r) r**i, i = 0, 1, ...: an infinite vocabulary."""

    name = "geometric"
    example = "geometric(r=0.6)"

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

    def spine_law(self) -> SL.SpineLaw:
        """Atoms ``-log(1-r) - i log r`` of weight ``(1-r) r^i`` (a lattice when r = 1/2).

        Listed until the remaining mass ``r^n`` is below 1e-16, which is put on the last
        atom (a lower position: the floor bound stays a bound). Beyond
        :data:`~brwsim.spinelaw.MAX_EXACT_ATOMS` atoms (r near 1) the closed-form
        cumulative functions are used: ``n(x)`` ranks lie below x, of mass ``1 - r^n``.
        """
        r = self.r
        count = SL.geometric_atom_count(r)
        a, b = math.log1p(-r), math.log(r)
        if count <= 100_000:
            i = np.arange(count)
            w = (1 - r) * r ** i
            w[-1] += r ** count
            return SL.SpineSteps.atoms(-a - i * b, w)
        mom = self.moments()

        def ranks(x):
            return np.clip(np.ceil((x + a) / -b), 0, None)   # i with -a - i b < x

        return SL.CdfLaw(lambda x: -np.expm1(ranks(x) * b), ranks, 1.0, mom.mu, mom.mu2)

    def tempered_family(self, beta: float) -> Family:
        return Geometric(self.r ** beta)

    def top1_mean(self) -> float:
        return 1.0 - self.r


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
    example = "zipf(s=1.2, vocab=1000, spread=0.3)"

    def __init__(self, s: float, vocab: int, spread: float = 0.0) -> None:
        self.s = check_positive("s", s, allow_zero=True)
        self.vocab = check_int("vocab", vocab, 2, MAX_VOCAB)
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

    def spine_law(self) -> SL.SpineLaw:
        """Exact: atoms up to 65,536 tokens, else :class:`~brwsim.spinelaw.ZipfLaw`; with a
        spread, :func:`~brwsim.spinelaw.zipf_spread_law` (quadrature over the exponent)."""
        mom = self.moments()
        if self.spread > 0:
            return SL.zipf_spread_law(self.s - self.spread, self.s + self.spread, self.vocab,
                                      mom.mu, mom.mu2)
        if self.vocab <= 65_536:
            q = self.sample_full(np.random.default_rng(0))
            return SL.SpineSteps.atoms(-np.log(q), q)
        return SL.ZipfLaw(self.s, self.vocab, mu=mom.mu, mu2=mom.mu2)

    def tempered_family(self, beta: float) -> Family:
        return Zipf(beta * self.s, self.vocab, beta * self.spread)

    def top1_mean(self) -> float:
        """E[1 / Z(s)] over the exponent (48-point Gauss-Legendre; exact without spread)."""
        if self.spread == 0.0:
            return 1.0 / zipf_sum(self.vocab, self.s, 0)
        x, w = np.polynomial.legendre.leggauss(_GL_NODES)
        return float(w @ [1.0 / zipf_sum(self.vocab, self.s + self.spread * xi, 0) for xi in x]
                     / 2.0)


class _OrderStatFamily(Family):
    """Normalised i.i.d. weights over a vocabulary, generated as order statistics.

    Vocabularies up to ``LAZY_ABOVE`` are generated in full (exact). Larger ones generate
    the ``LAZY_HEAD`` largest weights exactly and draw the sum of the other n - 64, i.i.d.
    given that they lie below the 64th, from a gamma law with its exact mean and variance
    (a documented approximation, tested against exact sampling at vocab 4096-16384:
    KS tests on the top-1, top-2 and tail masses, and E[X] within standard errors).
    Ranks beyond 64 continue the exact order statistics under the same normaliser.
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
    example = "dirichlet(alpha=0.3, vocab=50)"
    _law = "gamma"

    def __init__(self, alpha: float, vocab: int) -> None:
        self.alpha = check_positive("alpha", alpha)
        self.vocab = check_int("vocab", vocab, 2, MAX_VOCAB)

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

    def spine_law(self) -> SL.SpineLaw:
        """Exact at every vocabulary: the size-biased component ``q_I`` (``I ~ q``) of a
        symmetric Dirichlet is Beta(alpha + 1, (K - 1) alpha), and the K components are each
        Beta(alpha, (K - 1) alpha) (the count measure)."""
        a, k = self.alpha, self.vocab
        mom = self.moments()
        return SL.beta_step_law(a + 1.0, (k - 1) * a, a, (k - 1) * a, 1.0, float(k),
                                mom.mu, mom.mu2)


class SoftmaxNormal(_OrderStatFamily):
    """Softmax of i.i.d. N(0, sigma**2) logits over ``vocab`` tokens (Monte Carlo moments)."""

    name = "softmaxnormal"
    example = "softmaxnormal(sigma=1.5, vocab=3000)"
    _law = "lognormal"

    def __init__(self, sigma: float, vocab: int) -> None:
        self.sigma = check_positive("sigma", sigma, allow_zero=True)
        self.vocab = check_int("vocab", vocab, 2, MAX_VOCAB)

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
    example = "peaked(a=2.0, b=1.0, s=1.1, vocab=100)"

    def __init__(self, a: float, b: float, s: float, vocab: int) -> None:
        self.a = check_positive("a", a)
        self.b = check_positive("b", b)
        self.s = check_positive("s", s, allow_zero=True)
        self.vocab = check_int("vocab", vocab, 2, MAX_VOCAB)

    def params(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "s": self.s, "vocab": self.vocab}

    def components(self, beta: float = 1.0) -> list[Component]:
        log_h1 = math.log(zipf_sum(self.vocab - 1, self.s, 0))
        log_hb = math.log(zipf_sum(self.vocab - 1, beta * self.s, 0))
        return [Component(K.PEAKED, [self.a, self.b, beta * self.s, beta, log_h1, log_hb], [self.vocab])]

    def _zipf_part(self) -> tuple[float, float, float]:
        """Entropy, sum z log^2 z and ``-sum z log z`` moments of the Zipf part (V - 1 tokens)."""
        if self.vocab == 2:
            return 0.0, 0.0, 0.0
        h, m2 = _zipf_moments_at(self.s, self.vocab - 1)
        return h, m2, h

    def moments(self, n: int | None = None, seed: int = 0) -> Moments:
        """Exact: Beta moments of ``m log m`` (digamma, trigamma) and the Zipf part's sums;
        E[H^2] by 64-point Gauss-Jacobi quadrature over the top-1 mass."""
        a, b = self.a, self.b
        hz, m2z, _ = self._zipf_part()
        psi, psi1 = special.digamma, lambda x: special.polygamma(1, x)

        def xlogx(p, o):          # E[m log m], E[m log^2 m] for m ~ Beta(p, o)
            d = psi(p + 1) - psi(p + o + 1)
            return p / (p + o) * d, p / (p + o) * (d * d + psi1(p + 1) - psi1(p + o + 1))

        e1m, e2m = xlogx(a, b)            # top-1 token
        e1c, e2c = xlogx(b, a)            # its complement 1 - m
        mean_c = b / (a + b)
        mu = float(-e1m - e1c + mean_c * hz)
        # sum over the Zipf part of (1-m) z (log(1-m) + log z)^2
        mu2 = float(e2m + e2c + 2 * e1c * (-hz) + mean_c * m2z)
        x, w = special.roots_jacobi(64, b - 1.0, a - 1.0)   # weight (1-x)^(b-1) (1+x)^(a-1)
        m = (x + 1.0) / 2.0
        w = w / w.sum()
        with np.errstate(divide="ignore", invalid="ignore"):
            ent = -np.nan_to_num(m * np.log(m)) - np.nan_to_num((1 - m) * np.log1p(-m)) \
                + (1 - m) * hz
        return Moments(mu, mu2, h2=float(w @ ent ** 2))

    def spine_law(self) -> SL.SpineLaw:
        """Exact: ``-log m`` weighted by m (Beta(a + 1, b)) plus the convolution of
        ``-log(1 - m)`` weighted by 1 - m (Beta(b + 1, a)) with the fixed Zipf law."""
        a, b = self.a, self.b
        mom = self.moments()
        top = SL.beta_step_law(a + 1.0, b, a, b, a / (a + b), 1.0, math.nan, math.nan)
        comp = SL.beta_step_law(b + 1.0, a, b, a, b / (a + b), 1.0, math.nan, math.nan)
        if self.vocab == 2:
            zipf = SL.SpineSteps.atoms([0.0], [1.0])
        else:
            zipf = Zipf(self.s, self.vocab - 1).spine_law()
        rest = SL.ConvolvedLaw(comp, zipf, math.nan, math.nan)
        return SL.SumLaw([top, rest], [1.0, 1.0], mom.mu, mom.mu2)

    def top1_mean(self) -> float:
        """E[max(m, (1 - m) z_1)] with z_1 the largest Zipf share: two incomplete betas."""
        a, b = self.a, self.b
        z1 = 1.0 if self.vocab == 2 else 1.0 / zipf_sum(self.vocab - 1, self.s, 0)
        c = z1 / (1.0 + z1)                      # m > c  <=>  m > (1 - m) z_1
        top = a / (a + b) * special.betaincc(a + 1.0, b, c)
        rest = z1 * b / (a + b) * special.betainc(a, b + 1.0, c)
        return float(top + rest)

    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        m = rng.beta(self.a, self.b)
        z = np.arange(1, self.vocab, dtype=np.float64) ** -self.s
        w = np.concatenate(([m], (1.0 - m) * z / z.sum())) ** beta
        return np.sort(w / w.sum())[::-1]
