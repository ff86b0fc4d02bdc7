"""EAGLE-2/3 dynamic trees: expand the best nodes layer by layer, then rerank."""

from __future__ import annotations

from typing import Any

import numpy as np

from brwsim.engine import run_policy
from brwsim.errors import UserError
from brwsim.families.base import check_int
from brwsim.kernels import policies as _k
from brwsim.policies.base import Policy, new_outputs, optional_int

__all__ = ["Dynamic"]


class Dynamic(Policy):
    """EAGLE-2/3 dynamic trees: expand the best nodes layer by layer, then rerank.

    Layer 1 is the root's top-``topk`` children. Each later layer takes the ``topk`` nodes
    of the newest layer with the highest path value and expands each into its top-``topk``
    children. After ``depth`` layers, the tree of budget P is the top min(P, ``total``) of
    all generated candidates by path value (ties by depth, then generation order); it is
    prefix-closed because a child's value never exceeds its parent's. The drafter here
    knows the true probabilities (combine with noise only through :class:`Noisy`).

    EAGLE's convention (``SafeAILab/EAGLE``, ``eagle/model/cnets.py``, ``topK_genrate``,
    commit cb7e084): its user-facing ``depth`` D counts the layers after the first (the
    loop ``for i in range(depth)`` follows the root's top-k), and its ``total_token`` N
    counts the root, which is prepended to the drafted tokens (``self.total_tokens =
    total_tokens - 1``). So EAGLE's tree for (D, k, N) is ``Dynamic(depth=D + 1, topk=k,
    total=N - 1)``, at any P >= N - 1. The released defaults are ``depth=5, top_k=10,
    total_token=60`` for EAGLE-2 (``eagle/evaluation/gen_ea_answer_*.py``; the EAGLE-2
    paper's "depth 6" counts layers) and ``depth=7, top_k=10, total_token=60`` for EAGLE-3
    (``EaModel.from_pretrained``; the EAGLE-3 paper's depth 8): ``Dynamic(6, 10, 59)`` and
    ``Dynamic(8, 10, 59)``.

    Parameters
    ----------
    depth : int
        Number of layers (>= 1), i.e. the tree's maximal depth (EAGLE's depth + 1).
    topk : int
        Nodes expanded per layer and children per expanded node (>= 1).
    total : int, optional
        Cap on the number of draft nodes (EAGLE's ``total_token`` - 1); default: no cap
        beyond P.
    """

    name = "dynamic"

    def __init__(self, depth: int, topk: int, total: int | None = None) -> None:
        self.depth = check_int("depth", depth, 1)
        self.topk = check_int("topk", topk, 1)
        self.total = optional_int("total", total, 1)
        if self.topk + (self.depth - 1) * self.topk ** 2 > 1 << 26:
            raise UserError(f"dynamic: depth * topk**2 = {self.depth * self.topk ** 2} "
                            "candidates exceeds the supported maximum 2**26")

    def params(self) -> dict[str, Any]:
        return {"depth": self.depth, "topk": self.topk, "total": self.total}

    def run_roots(self, spec, budgets, roots):
        b = budgets if self.total is None else np.minimum(budgets, self.total)
        out = new_outputs(budgets.size, roots.keys.size)
        run_policy(_k.dynamic_chunk, spec, roots, self.depth, self.topk,
                   np.ascontiguousarray(b, dtype=np.int64), out)
        return out
