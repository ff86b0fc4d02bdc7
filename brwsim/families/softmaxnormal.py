"""SoftmaxNormal: the softmax of i.i.d. normal logits."""

from __future__ import annotations

from typing import Any

import numpy as np

from brwsim.families.base import check_int, check_positive
from brwsim.families.orderstat import _OrderStatFamily
from brwsim.validate import MAX_VOCAB

__all__ = ["SoftmaxNormal"]


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
