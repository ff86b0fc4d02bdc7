"""brwsim.theory.ceiling: entropy-indexed ceilings and the entropy a tokens-per-call number implies."""

from __future__ import annotations

import heapq
import math
import re

import numpy as np
import pytest

from brwsim.theory.ceiling import SHAPES, ceiling, entropy_family, implied_entropy
from brwsim.errors import UserError


def brute_force_tau(q: np.ndarray, P: int) -> float:
    """1 + the sum of the P largest path probabilities of the tree where every node has q."""
    q = np.sort(q[q > 0])[::-1]
    heap, total = [(-q[0], (0,))], 0.0
    for _ in range(P):
        neg, path = heapq.heappop(heap)
        total -= neg
        heapq.heappush(heap, (neg * q[0], path + (0,)))                  # first child
        if path[-1] + 1 < q.size:                                       # next sibling
            heapq.heappush(heap, (neg / q[path[-1]] * q[path[-1] + 1], path[:-1] + (path[-1] + 1,)))
    return 1.0 + total


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("h", [0.2, 1.0, 4.0])
def test_entropy_family_has_exactly_the_requested_mean_entropy(shape, h):
    assert entropy_family(shape, h, vocab=5000).moments().mu == pytest.approx(h, rel=1e-9)
    if shape == "zipf-spread":                      # the exponential tail is clipped below log V
        assert entropy_family(shape, 6.0, vocab=5000).entropies.max() < math.log(5000)


@pytest.mark.parametrize("shape,h,P", [("zipf", 0.9, 30), ("geometric", 1.7, 64)])
def test_constant_entropy_ceiling_is_the_exact_top_p_value_and_inverts(shape, h, P):
    fam = entropy_family(shape, h, vocab=2000)
    tau = brute_force_tau(np.asarray(fam.sample_full(np.random.default_rng(0))), P)
    assert ceiling(h, [P], shape, vocab=2000)[0] == pytest.approx(tau, abs=2e-3)
    assert implied_entropy(tau, P, shape, vocab=2000) == pytest.approx(h, abs=2e-3)


def test_implied_entropy_is_monotone_and_orders_the_shapes():
    hs = [implied_entropy(t, 60, "zipf-spread") for t in (3.0, 4.5, 6.0)]
    assert hs[0] > hs[1] > hs[2]                   # more tokens per call, less entropy allowed
    h = {s: implied_entropy(4.5, 60, s) for s in SHAPES}
    assert h["geometric"] < h["zipf"] < h["zipf-spread"]


def test_implied_entropy_edges_and_errors():
    assert math.isinf(implied_entropy(1.01, 4096, "geometric"))   # any entropy reaches it
    for tau, P, needle in [(1.0, 10, "(1, P + 1)"), (11.5, 10, "(1, P + 1)"), (3.0, 0, "budget"),
                           (10.99, 10, "below 0.01 nats")]:
        with pytest.raises(UserError, match=re.escape(needle)):
            implied_entropy(tau, P)
    with pytest.raises(UserError, match="unknown shape"):
        entropy_family("lognormal", 1.0)
    with pytest.raises(UserError, match="mean entropy must be in"):
        entropy_family("zipf", math.log(100), vocab=100)
    with pytest.raises(UserError, match="vocab"):
        ceiling(1.0, [8], "zipf", vocab=1)



