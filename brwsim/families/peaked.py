"""Peaked: a Beta top-1 mass and a Zipf rest, the shape of LLM next-token laws."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import special

from brwsim.families.base import Component, Family, Moments, check_int, check_positive
from brwsim.families.betaquantile import pair_block
from brwsim.families.zipf import Zipf, _zipf_moments_at
from brwsim.kernels import dist as K
from brwsim.kernels.closed import (PEAKED_A, PEAKED_B, PEAKED_BETA, PEAKED_LOG_H1, PEAKED_LOG_HB,
                                   PEAKED_S_BETA, PEAKED_VOCAB)
from brwsim.kernels.special import zipf_sum
from brwsim.theory.beta_laws import (
    beta_logit_expect,
    beta_step_law,
    log_sigmoids,
    tempered_beta_law,
)
from brwsim.theory.laws import ConvolvedLaw, SpineLaw, SpineSteps, SumLaw
from brwsim.validate import MAX_VOCAB

__all__ = ["Peaked"]


class Peaked(Family):
    """Top-1 mass m ~ Beta(a, b); the other 1 - m spread Zipf(s) over the other vocab - 1 tokens.

    The shape of real LLM next-token distributions: most positions nearly certain. A node
    draws m by inverting a tabulated Beta quantile at one uniform
    (:mod:`brwsim.families.betaquantile`; log m and log(1 - m) within 1e-11), or, for
    shapes whose table would need more than 2048 intervals or outside [1e-6, 100]
    (e.g. b / a >~ 10 with a < 1), exactly as G1 / (G1 + G2) of two gammas.
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
        table, _ = pair_block([(self.a, self.b)])
        return [Component(K.PEAKED, fpar={PEAKED_A: self.a, PEAKED_B: self.b, PEAKED_S_BETA: beta * self.s,
                                            PEAKED_BETA: beta, PEAKED_LOG_H1: log_h1,
                                            PEAKED_LOG_HB: log_hb},
                          ipar={PEAKED_VOCAB: self.vocab},
                          data=table)]

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

    def spine_law(self) -> SpineLaw:
        """Exact: ``-log m`` weighted by m (Beta(a + 1, b)) plus the convolution of
        ``-log(1 - m)`` weighted by 1 - m (Beta(b + 1, a)) with the fixed Zipf law."""
        a, b = self.a, self.b
        mom = self.moments()
        top = beta_step_law(a + 1.0, b, a, b, a / (a + b), 1.0, math.nan, math.nan)
        comp = beta_step_law(b + 1.0, a, b, a, b / (a + b), 1.0, math.nan, math.nan)
        if self.vocab == 2:
            zipf = SpineSteps.atoms([0.0], [1.0])
        else:
            zipf = Zipf(self.s, self.vocab - 1).spine_law()
        rest = ConvolvedLaw(comp, zipf, math.nan, math.nan)
        return SumLaw([top, rest], [1.0, 1.0], mom.mu, mom.mu2)

    def top1_mean(self) -> float:
        """E[max(m, (1 - m) z_1)] with z_1 the largest Zipf share: two incomplete betas."""
        a, b = self.a, self.b
        z1 = 1.0 if self.vocab == 2 else 1.0 / zipf_sum(self.vocab - 1, self.s, 0)
        c = z1 / (1.0 + z1)                      # m > c  <=>  m > (1 - m) z_1
        top = a / (a + b) * special.betaincc(a + 1.0, b, c)
        rest = z1 * b / (a + b) * special.betainc(a, b + 1.0, c)
        return float(top + rest)

    def tempered_family(self, beta: float) -> Family:
        """Peaked at ``beta = 1 / T``: its top-1 mass becomes ``r(m)`` (:class:`_TemperedPeaked`)."""
        return self if beta == 1.0 else _TemperedPeaked(self, beta)

    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        m = rng.beta(self.a, self.b)
        z = np.arange(1, self.vocab, dtype=np.float64) ** -self.s
        w = np.concatenate(([m], (1.0 - m) * z / z.sum())) ** beta
        return np.sort(w / w.sum())[::-1]


class _TemperedPeaked(Family):
    """``peaked(a, b, s, vocab)`` tempered at ``beta = 1 / T``, with its exact spine law.

    Given the top-1 mass m, tempering keeps the shape: the top token gets
    ``r(m) = m^beta / (m^beta + c (1 - m)^beta)`` with ``c = H(V - 1, beta s) / H(V - 1, s)^beta``
    (H the Zipf sums), and the rest ``1 - r`` is spread Zipf(beta s) over the other V - 1
    tokens. So the spine law is a tempered Beta law (:func:`brwsim.theory.beta_laws.tempered_beta_law`)
    for the top token plus, for the rest, the same law at ``(b, a, beta, -log c)`` convolved
    with the fixed Zipf(beta s) law, and the moments and E[max q] are one-dimensional
    integrals over the log-odds of m (:func:`brwsim.theory.beta_laws.beta_logit_expect`). What
    ``tempered(family=peaked(...), T=...)`` uses; not a family of its own name.
    """

    name = "tempered"

    def __init__(self, peaked: Peaked, beta: float) -> None:
        self.peaked, self.beta = peaked, float(beta)
        v = peaked.vocab
        self._log_h1 = 0.0 if v == 2 else math.log(zipf_sum(v - 1, peaked.s, 0))
        self._log_hb = 0.0 if v == 2 else math.log(zipf_sum(v - 1, self.beta * peaked.s, 0))
        self.log_c = self._log_hb - self.beta * self._log_h1
        if not math.isfinite(self.log_c):
            raise ValueError(f"log c = {self.log_c} at beta = {self.beta:g}")

    def params(self) -> dict[str, Any]:
        return {"family": self.peaked, "T": 1.0 / self.beta}

    def components(self, beta: float = 1.0) -> list[Component]:
        return self.peaked.components(beta * self.beta)

    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        return self.peaked.sample_full(rng, beta * self.beta)

    def tempered_family(self, beta: float) -> Family:
        return self.peaked.tempered_family(beta * self.beta)

    def _zipf(self) -> tuple[float, float]:
        """Entropy and ``sum z log^2 z`` of the rest's Zipf(beta s) shares."""
        if self.peaked.vocab == 2:
            return 0.0, 0.0
        return _zipf_moments_at(self.beta * self.peaked.s, self.peaked.vocab - 1)

    def _expect(self, f, upper: float = math.inf) -> float:
        """``E[f(log r, log(1 - r)); L < upper]`` over the top-1 mass's log-odds L
        (:func:`brwsim.theory.beta_laws.beta_logit_expect`), ``r = sigma(beta L - log c)``."""
        beta, log_c = self.beta, self.log_c

        def g(L):
            z = beta * L - log_c
            return f(*log_sigmoids(z))

        return beta_logit_expect(self.peaked.a, self.peaked.b, g, upper=upper)

    def moments(self, n: int | None = None, seed: int = 0) -> Moments:
        """Exact: mu, mu2 and E[H^2] by quadrature over the top-1 mass's log-odds."""
        hz, m2z = self._zipf()

        def ent(lr, l1r):
            r, q = math.exp(lr), math.exp(l1r)
            return -r * lr - q * l1r + q * hz

        def sq(lr, l1r):
            r, q = math.exp(lr), math.exp(l1r)
            return r * lr * lr + q * (l1r * l1r - 2.0 * l1r * hz + m2z)

        return Moments(self._expect(ent), self._expect(sq),
                       h2=self._expect(lambda lr, l1r: ent(lr, l1r) ** 2))

    def spine_law(self) -> SpineLaw:
        """Exact: the tempered top-1 law plus the rest's law convolved with Zipf(beta s)."""
        a, b, beta, log_c = self.peaked.a, self.peaked.b, self.beta, self.log_c
        mom = self.moments()
        top = tempered_beta_law(a, b, beta, log_c)
        comp = tempered_beta_law(b, a, beta, -log_c)
        if self.peaked.vocab == 2:
            zipf = SpineSteps.atoms([0.0], [1.0])
        else:
            zipf = Zipf(beta * self.peaked.s, self.peaked.vocab - 1).spine_law()
        rest = ConvolvedLaw(comp, zipf, math.nan, math.nan)
        return SumLaw([top, rest], [1.0, 1.0], mom.mu, mom.mu2)

    def top1_mean(self) -> float:
        """E[max(r, (1 - r) z_1)], z_1 the largest Zipf(beta s) share: r wins where
        ``r / (1 - r) = e^{beta L} / c`` exceeds z_1."""
        z1 = math.exp(-self._log_hb)
        l0 = (self.log_c - self._log_hb) / self.beta         # log-odds where r / (1 - r) = z_1
        below = self._expect(lambda lr, l1r: z1 * math.exp(l1r) - math.exp(lr), upper=l0)
        return float(self._expect(lambda lr, l1r: math.exp(lr)) + below)
