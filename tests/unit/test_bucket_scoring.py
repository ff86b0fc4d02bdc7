"""Bucket scoring (``select.score_nested``) against the nested selections it replaces.

Both score the same nodes for nested budgets; the outputs must be the same bits (the
path-probability sums are integer limbs, independent of the order of addition), on
positions with exact ties (lattices), near-ties within TIE_REL, huge ties, and a range
of sizes and budget lists.
"""

from __future__ import annotations

import numpy as np
import pytest

from brwsim.kernels import select as T


def _score(fn, pos, dep, onpath, budgets):
    n = pos.shape[0]
    m = budgets.shape[0]
    acc = np.zeros((m, 1), np.int32)
    ex = np.zeros((m, 1))
    dp = np.zeros((m, 1), np.int32)
    order = np.empty(n + 8, np.int32)
    if fn == "buckets":
        sel = T.score_buffers(n)
        used, _ = T.score_nested(n, pos, dep, onpath, order, sel, budgets, acc, ex, dp, 0, False)
    else:
        T.select_nested(n, pos, dep, onpath, order, budgets, acc, ex, dp, 0)
        used = None
    return acc[:, 0], ex[:, 0], dp[:, 0], used


def _nodes(rng, n, kind):
    dep = rng.integers(1, 30, n).astype(np.int32)
    if kind == "continuous":
        pos = rng.exponential(3.0, n)
    elif kind == "lattice":            # exact ties: multiples of log 3
        pos = rng.integers(1, 12, n) * np.log(3.0)
    elif kind == "near-ties":          # distinct floats within TIE_REL of each other
        base = rng.integers(1, 40, n) * 0.37
        pos = base * (1.0 + rng.integers(-3, 4, n) * 2.0 ** -44)
    else:                              # one huge tie plus a few others
        pos = np.where(rng.random(n) < 0.8, 5.0, rng.exponential(5.0, n))
    onpath = (rng.random(n) < 0.05).astype(np.int8)
    return pos.astype(float), dep, onpath


@pytest.mark.parametrize("kind", ["continuous", "lattice", "near-ties", "huge-tie"])
@pytest.mark.parametrize("n", [40, 700, 9000, 70000])
def test_bucket_scoring_is_the_nested_selection_bit_for_bit(kind, n):
    rng = np.random.default_rng(n + len(kind))
    pos, dep, onpath = _nodes(rng, n, kind)
    for budgets in ([1], [n], [1, 2, 3, n // 2, n - 1], sorted(set(rng.integers(1, n, 12).tolist())),
                    [n // 3, n // 3, n // 2]):
        b = np.array(budgets, np.int64)
        *new, used = _score("buckets", pos, dep, onpath, b)
        *old, _ = _score("nested", pos, dep, onpath, b)
        for x, y in zip(new, old):
            np.testing.assert_array_equal(x, y)
        if kind == "continuous" and n >= 700:
            assert used, "the buckets should score continuous positions themselves"



def test_bucket_scoring_negative_control():
    """A perturbed position changes the sums: the comparison above can fail."""
    rng = np.random.default_rng(1)
    pos, dep, onpath = _nodes(rng, 5000, "continuous")
    b = np.array([100, 2500], np.int64)
    old = _score("nested", pos, dep, onpath, b)
    pos2 = pos.copy()
    pos2[np.argmin(pos2)] += 1e-9
    new = _score("buckets", pos2, dep, onpath, b)
    assert new[3]
    assert not np.array_equal(new[1], old[1])
