"""An imperfect drafter: best-first by a noisy, tempered estimate of the truth."""

from __future__ import annotations

from typing import Any

from brwsim.engine import run_policy, start_threshold
from brwsim.errors import UserError
from brwsim.families.base import check_positive
from brwsim.kernels import policies as _k
from brwsim.policies.base import Policy, new_outputs

__all__ = ["Noisy"]


class Noisy(Policy):
    """Best-first by an imperfect drafter's estimate; acceptance uses the truth.

    The drafter's log-probability of the child of rank r of node v is
    ``log q_v[r] / T + sigma_d * Z`` (Z standard normal, a hash of the child's key, purpose
    ``NOISE``), renormalised over the node, where d >= 1 is the child's depth below the
    call's root and ``sigma_d = sigma * d**gamma``: with ``gamma > 0`` the drafter degrades
    the further it drafts from the last verified token (``gamma = 0``, the default, is the
    depth-independent drafter, bit for bit). The drafter scores the true top ``K = 64``
    ranks (all ranks if fewer) individually; the true mass m outside them enters the
    normaliser as its tempered mass times E[exp(sigma Z)] = exp(sigma**2 / 2). This is an
    approximation: the tempered mass of a tail of ranks >= K is taken as
    m * q_K**(1/T - 1), exact when the tail is flat at the first tail rank's probability
    q_K and never below any single tail token's share, so every estimate is <= 1 (when m
    is below the rounding level of the head's sum, it is taken as q_K); mass missing
    from a vocabulary of at most K tokens (e.g. ``Fixed`` summing to less than 1) is one
    token outside any tree, m**(1/T), as in the families' tempering. A tail token r >= K
    gets the noise-free estimate q_r**(1/T) exp(sigma**2 / 2) / normaliser. The tree of
    budget P is the top P nodes by estimated path probability (ties by depth, then rank
    path); it is prefix-closed because estimates are <= 1. ``Noisy(0)`` uses the true
    probabilities unnormalised and is exactly :class:`Optimal`.

    Parameters
    ----------
    sigma : float
        Noise scale in nats at depth 1 (>= 0).
    T : float, default 1.0
        Temperature mismatch (> 0): the drafter sees q**(1/T), renormalised.
    gamma : float, default 0.0
        Growth of the noise with depth (>= 0): sigma_d = sigma * d**gamma.
    """

    name = "noisy"

    def __init__(self, sigma: float, T: float = 1.0, gamma: float = 0.0) -> None:
        self.sigma = check_positive("sigma", sigma, allow_zero=True)
        self.T = check_positive("T", T)
        self.gamma = check_positive("gamma", gamma, allow_zero=True)

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sigma": self.sigma, "T": self.T}
        if self.gamma != 0.0:                  # the string form of gamma = 0 is unchanged
            out["gamma"] = self.gamma
        return out

    def run_roots(self, spec, budgets, roots):
        out = new_outputs(budgets.size, roots.keys.size)
        t_start = start_threshold(budgets[-1])
        visited, _ = run_policy(_k.noisy_chunk, spec, roots, self.sigma, self.gamma,
                                1.0 / self.T, _k.HEAD_K, budgets, t_start, out)
        if visited < 0:
            raise UserError("more than 2**28 nodes tie at one estimated path probability; use "
                            "a budget that ends on a full level of this lattice family")
        return out
