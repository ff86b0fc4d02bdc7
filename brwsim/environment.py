"""The environment as a function: any node's distribution, from (seed, iteration, path).

Every random number brwsim uses is a hash of (seed, iteration, node path, purpose), so a
node's next-token distribution can be read off directly, without building a tree. This
is how tests check the tree kernels against brute force, and how users inspect what a
family puts at a given node.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from brwsim.engine import law
from brwsim.keys import check_path, node_key
from brwsim.errors import UserError
from brwsim.families.base import Family, Spec
from brwsim.kernels import njit_cached
from brwsim.kernels.dist import LEVEL_F, LEVEL_I, ROOT_DRAW, dist_init, dist_next
from brwsim.kernels.rng import PATH, child_key, purpose_key, unit
from brwsim.validate import check_int, echo

__all__ = ["node_key", "node_logprobs", "path_uniform"]


@njit_cached
def _node_head(law, head_cap, key, path, k, out):
    """Walk ``path`` from the root ``key`` (contexts follow it) and read k ranks at its end."""
    m = path.shape[0] + 1
    lf = np.empty((m, LEVEL_F))
    li = np.empty((m, LEVEL_I), np.int64)
    head = np.empty((m, max(head_cap, 1)))
    dist_init(law, key, 0, lf, li, head, -np.inf, ROOT_DRAW, 0)
    for d in range(1, m):
        key = child_key(key, path[d - 1])
        dist_init(law, key, d, lf, li, head, -np.inf, d - 1, path[d - 1])
    for r in range(k):
        out[r] = dist_next(law.fpar, law.ipar, law.data, key, m - 1, lf, li, head)


def node_logprobs(family: Family | Spec, seed: int, iteration: int, path: Sequence[int] = (),
                  k: int = 16) -> np.ndarray:
    """Log-probabilities of ranks 0..k-1 at a node (``-inf`` past the vocabulary).

    Parameters
    ----------
    family : Family or Spec
        The family (or its compiled spec, to avoid recompiling tables in loops).
    seed, iteration : int
        As in :func:`brwsim.simulate`.
    path : sequence of int
        Ranks from the root (empty: the root itself).
    k : int
        Number of leading ranks.
    """
    if not isinstance(family, (Family, Spec)):
        raise UserError(f"family must be a brwsim family or its Spec, got {echo(family)}")
    k = check_int("k", k, 1, 1 << 20)
    ranks = check_path(path)
    spec = family.spec() if isinstance(family, Family) else family
    out = np.empty(k)
    root = np.uint64(node_key(seed, iteration, ()))
    _node_head(law(spec), spec.head_cap, root, ranks, k, out)
    return out


def path_uniform(seed: int, iteration: int, path: Sequence[int] = ()) -> float:
    """The uniform in (0, 1] with which the target samples its token at a node.

    The sampled child has rank r iff cum_{r-1} < U <= cum_r (cumulative probabilities).
    """
    key = np.uint64(purpose_key(np.uint64(node_key(seed, iteration, path)), PATH))
    return float(unit(key, 0))
