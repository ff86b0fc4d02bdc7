"""Keys of the environment (docs/design.md, idea 1): a seed's 64-bit key, a node's key, paths.

Every random number of a node is a hash of (seed, iteration, rank path, purpose). This
bottom-layer module turns user-level seeds, iterations and rank paths into the 64-bit
keys the kernels hash (:mod:`brwsim.kernels.rng`), so that families, theory and the
engine share one definition and none of them imports another for it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from brwsim.errors import UserError
from brwsim.kernels.rng import child_key, root_key
from brwsim.validate import check_int, echo

__all__ = ["seed_key", "node_key", "check_path"]


def seed_key(seed: int) -> np.uint64:
    """64-bit root key of a seed (any non-negative int) through ``numpy.random.SeedSequence``."""
    seed = check_int("seed", seed, 0)
    return np.random.SeedSequence(int(seed)).generate_state(1, np.uint64)[0]


def check_path(path: Sequence[int]) -> np.ndarray:
    """A node path as int64 ranks (each >= 0), or a :class:`UserError` naming the entry."""
    if isinstance(path, (str, bytes)) or not isinstance(path, (Sequence, np.ndarray)):
        raise UserError(f"path must be a list of ranks (integers >= 0), got {echo(path)}")
    return np.array([check_int(f"path[{i}]", r, 0, (1 << 63) - 1) for i, r in enumerate(path)],
                    dtype=np.int64)


def node_key(seed: int, iteration: int, path: Sequence[int] = ()) -> int:
    """64-bit key of the node reached from the root of ``iteration`` by ranks ``path``."""
    iteration = check_int("iteration", iteration, 0, (1 << 64) - 1)
    key = np.uint64(root_key(seed_key(seed), np.uint64(iteration)))
    for r in check_path(path):
        key = np.uint64(child_key(key, np.uint64(r)))
    return int(key)
