"""Zipf: q_i proportional to i**-s, the exponent optionally spread over nodes."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from brwsim.errors import UserError
from brwsim.families.base import Component, Family, Moments, check_int, check_positive
from brwsim.families.tables import spline_starts_floors, zipf_norm_table
from brwsim.kernels import dist as K
from brwsim.kernels.closed import ZIPF_FLOOR, ZIPF_INV_H, ZIPF_N_INT, ZIPF_S_HI, ZIPF_S_LO, ZIPF_VOCAB
from brwsim.kernels.special import zipf_sum
from brwsim.theory.laws import SpineLaw, SpineSteps
from brwsim.theory.zipf_laws import ZipfLaw, zipf_spread_law
from brwsim.validate import MAX_VOCAB

__all__ = ["Zipf"]


_GL_NODES = 48


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
        n_int = table.shape[0]
        inv_h = n_int / (hi - lo) if hi > lo else 1.0
        # the kernel reads each interval's start and floor instead of dividing
        # (brwsim.kernels.closed.closed_level_init): [coefficients | starts | floors]
        starts, floors = spline_starts_floors(table, lo, inv_h)
        data = np.concatenate([table.ravel(), starts, floors])
        return [Component(K.ZIPF, fpar={ZIPF_S_LO: lo, ZIPF_S_HI: hi, ZIPF_INV_H: inv_h,
                                          ZIPF_FLOOR: float(floors.min())},
                          ipar={ZIPF_VOCAB: self.vocab, ZIPF_N_INT: n_int},
                          data=data)]

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

    def spine_law(self) -> SpineLaw:
        """Exact: atoms up to 65,536 tokens, else :class:`~brwsim.theory.zipf_laws.ZipfLaw`; with a
        spread, :func:`~brwsim.theory.zipf_laws.zipf_spread_law` (quadrature over the exponent)."""
        mom = self.moments()
        if self.spread > 0:
            return zipf_spread_law(self.s - self.spread, self.s + self.spread, self.vocab,
                                      mom.mu, mom.mu2)
        if self.vocab <= 65_536:
            q = self.sample_full(np.random.default_rng(0))
            return SpineSteps.atoms(-np.log(q), q)
        return ZipfLaw(self.s, self.vocab, mu=mom.mu, mu2=mom.mu2)

    def tempered_family(self, beta: float) -> Family:
        return Zipf(beta * self.s, self.vocab, beta * self.spread)

    def top1_mean(self) -> float:
        """E[1 / Z(s)] over the exponent (48-point Gauss-Legendre; exact without spread)."""
        if self.spread == 0.0:
            return 1.0 / zipf_sum(self.vocab, self.s, 0)
        x, w = np.polynomial.legendre.leggauss(_GL_NODES)
        return float(w @ [1.0 / zipf_sum(self.vocab, self.s + self.spread * xi, 0) for xi in x]
                     / 2.0)
