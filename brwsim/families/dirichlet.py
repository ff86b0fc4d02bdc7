"""Dirichlet: a symmetric Dirichlet distribution at every node."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import special

from brwsim.families.base import Component, Moments, check_int, check_positive
from brwsim.families.betaquantile import tree_block
from brwsim.families.orderstat import LAZY_ABOVE, _OrderStatFamily
from brwsim.kernels import dist as K
from brwsim.kernels.dirichlet import DIR_ALPHA, DIR_PICKED, DIR_VOCAB, PICK_MASS, dirichlet_head_cap
from brwsim.theory.beta_laws import beta_step_law
from brwsim.theory.laws import SpineLaw
from brwsim.validate import MAX_VOCAB

__all__ = ["Dirichlet", "AGGREGATE_ALPHA", "AGGREGATE_VOCAB", "aggregation_component"]


#: Nodes are drawn by binary aggregation when alpha and the vocabulary lie in these ranges
#: (alpha's upper end excluded), where that was measured faster than order statistics; an
#: alpha below 1e-6 keeps the order statistics' handling of degenerate float64 numbers.
AGGREGATE_ALPHA = (1e-6, 0.08)
AGGREGATE_VOCAB = (100, LAZY_ABOVE)


def aggregation_component(alpha: float, vocab: int) -> Component:
    """The lazy DIRICHLET component (``brwsim.kernels.dirichlet.dirichlet_init``), with the Beta
    quantile tables of its splits (:func:`brwsim.families.betaquantile.tree_block`)."""
    picked = picked_size(alpha, vocab)
    return Component(K.DIRICHLET, fpar={DIR_ALPHA: alpha}, ipar={DIR_VOCAB: vocab, DIR_PICKED: picked},
                     data=tree_block(float(alpha), int(vocab), picked),
                     head_cap=dirichlet_head_cap(vocab))


def picked_size(alpha: float, vocab: int) -> int:
    """Largest group drawn by size-biased picks: m alpha <= ``PICK_MASS``, at most ``vocab``."""
    return int(min(vocab, math.floor(PICK_MASS / alpha * (1.0 + 1e-12))))


class Dirichlet(_OrderStatFamily):
    """Symmetric Dirichlet(alpha) over ``vocab`` tokens (normalised Gamma(alpha) weights).

    Two samplers draw a node, both a function of the node's key. For alpha in
    ``AGGREGATE_ALPHA`` at vocabularies in ``AGGREGATE_VOCAB``: binary aggregation (halves
    of the vocabulary split by Beta(m1 alpha, m2 alpha) fractions, groups below the
    caller's cut-off never split, ``brwsim.kernels.dirichlet.dirichlet_init``), down to groups
    of at most :func:`picked_size` tokens (total concentration m alpha at most
    ``brwsim.kernels.dirichlet.PICK_MASS`` = 2.5: 50 tokens at alpha = 0.05), which are drawn by
    size-biased picks: each takes a Beta(1 + alpha, .) share of the group's rest, the
    heavy tokens first, until the rest is below the cut-off. Each split's beta draw
    inverts a tabulated quantile (:mod:`brwsim.families.betaquantile`, built when the
    family is compiled, all new sides in one batched call; cached per shape pair), exact
    up to the tables' measured error of at most 1e-11 in log B, and each split has an
    emptiness table (:func:`~brwsim.families.betaquantile.cdf_table`: its CDF on the
    cut-offs that leave at most one part above them) that tells from the uniform alone
    when neither part reaches the cut-off; a pick is an exact rejection draw with no
    table. Only the split groups need tables: a first ``Dirichlet(0.05, 200).spec()``
    builds 2 sides and 2 emptiness tables and takes 7-12 ms in a fresh process (20-25 ms
    with the 15 sides of splits alone, 0.2 ms with no tables).
    Otherwise, and for tempered nodes (``beta != 1``, whose normaliser needs every
    weight), the order statistics of :class:`~brwsim.families.orderstat._OrderStatFamily`
    (lazy, with a drawn tail sum, above ``LAZY_ABOVE`` tokens). Per node of a threshold
    pass, aggregation was measured 1.2-3.2x faster than the order statistics at alpha
    0.02-0.05 and vocabularies 200-1024, and slower at alpha >= 0.1 or vocab 10, where the
    order statistics stop after a few ranks at most nodes (``benchmarks/README.md``).

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

    def components(self, beta: float = 1.0) -> list[Component]:
        (a_lo, a_hi), (v_lo, v_hi) = AGGREGATE_ALPHA, AGGREGATE_VOCAB
        if beta == 1.0 and a_lo <= self.alpha < a_hi and v_lo <= self.vocab <= v_hi:
            return [aggregation_component(self.alpha, self.vocab)]
        return super().components(beta)

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

    def spine_law(self) -> SpineLaw:
        """Exact at every vocabulary: the size-biased component ``q_I`` (``I ~ q``) of a
        symmetric Dirichlet is Beta(alpha + 1, (K - 1) alpha), and the K components are each
        Beta(alpha, (K - 1) alpha) (the count measure)."""
        a, k = self.alpha, self.vocab
        mom = self.moments()
        return beta_step_law(a + 1.0, (k - 1) * a, a, (k - 1) * a, 1.0, float(k),
                                mom.mu, mom.mu2)
