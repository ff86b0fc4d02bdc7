"""A real drafter: a second transformer checkpoint drafts, the target family verifies."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from brwsim.engine import start_threshold
from brwsim.errors import UserError
from brwsim.families.base import check_positive
from brwsim.families.checkpoint import check_slots, checkpoint_path, load_checkpoint
from brwsim.families.transformer import checkpoint_sha256, shipped_checkpoint
from brwsim.kernels import drafter as _k
from brwsim.kernels.dist import DATA_OFF, TRANSFORMER
from brwsim.kernels.transformer import TF_SLOTS, head_width
from brwsim.policies.base import Policy, new_outputs, optional_int

__all__ = ["DraftModel", "SHAPES"]

#: The drafter's tree shapes.
SHAPES = ("best", "chain", "dynamic")


class DraftModel(Policy):
    """Trees drafted by a second checkpoint's probabilities; the target family verifies.

    The environment must be a :class:`~brwsim.families.Transformer` family (the target).
    The draft model, a checkpoint of the same vocabulary, reads exactly the target's
    context at every node (the root's tokens, then the path's tokens, with the target's
    ``window`` and ``carry``) through its own per-node KV cache, and scores each child
    token of a node by its own log-probability, softmax(draft logits / ``temperature``).
    Nodes are the target's (named by their target rank, so the trees, the sampled target
    path and the node keys are those of :class:`Optimal` on common random numbers); a
    child the draft likes and the target ranks low is still a valid node. E[X | T] is
    the sum of TRUE target path probabilities over the drafter's tree. (String form
    ``drafter(...)``; not to be confused with :class:`brwsim.cost.Drafter`, the drafting
    cost model.)

    Shapes:

    * ``best``: best-first (SpecExec-style): the tree of budget P is the top P nodes by
      the draft's path probability (the product of its token probabilities from the
      root); ties by depth, then pre-order with children in the draft's rank order
      (descending draft probability, ties by ascending token id). Prefix-closed (a
      child's draft path probability never exceeds its parent's) and nested across
      budgets. With the target checkpoint as its own draft (same temperature) it is
      :class:`Optimal`.
    * ``chain``: the draft's greedy chain (its most likely token at every node); the
      chain of budget P is its first P nodes.
    * ``dynamic``: EAGLE-2/3 layers, as :class:`Dynamic` but on the draft's
      probabilities: layer 1 is the draft's top-``topk`` children of the root, each later
      layer expands the ``topk`` nodes of the newest layer with the highest draft path
      probability into their draft top-``topk`` children; the tree of budget P is the top
      min(P, ``total``) candidates by draft path probability (ties by depth, then
      generation order).

    Parameters
    ----------
    path : str or path-like
        The draft checkpoint folder (as :class:`~brwsim.families.Transformer`'s ``path``;
        ``"draft"`` and ``"target"`` name the shipped byte-level pair).
    shape : {"best", "chain", "dynamic"}, default "best"
        How the tree is drafted.
    temperature : float, default 1.0
        The draft model's temperature T > 0 (its probabilities are softmax(logits / T);
        independent of the target family's temperature).
    depth, topk : int, default 6 and 10
        ``shape="dynamic"`` only: layers and expansion width (:class:`Dynamic`'s).
    total : int, optional
        ``shape="dynamic"`` only: cap on the number of draft nodes.

    Notes
    -----
    Cost per tree node: one draft forward pass per collected node, one target forward
    pass per node with children (``best``; every node for ``chain`` and ``dynamic``);
    ``best`` is a threshold pass that may repeat for a root (as :class:`Noisy`). Memory:
    one target and one draft row (their KV caches) per tree level (``best``), per
    expanded node (``dynamic``), two (``chain``). Not combinable with
    ``simulate(batch=B > 1)`` (no policy is); generation runs work.
    """

    name = "drafter"

    def __init__(self, path: Any, shape: str = "best", temperature: float = 1.0,
                 depth: int | None = None, topk: int | None = None,
                 total: int | None = None) -> None:
        path = checkpoint_path(path, "drafter: ")
        if shape not in SHAPES:
            raise UserError(f"drafter: shape must be one of {', '.join(SHAPES)}, got {shape!r}")
        self.path = path
        self.shape = shape
        self.temperature = check_positive("temperature", temperature)
        dyn = {"depth": depth, "topk": topk, "total": total}
        if shape != "dynamic":
            given = [k for k, v in dyn.items() if v is not None]
            if given:
                raise UserError(f"drafter: {', '.join(given)} apply to shape='dynamic' only")
        self.depth = optional_int("depth", 6 if depth is None else depth, 1) if shape == "dynamic" else None
        self.topk = optional_int("topk", 10 if topk is None else topk, 1) if shape == "dynamic" else None
        self.total = optional_int("total", total, 1)
        if self.depth is not None and self.topk + (self.depth - 1) * self.topk ** 2 > 1 << 26:
            raise UserError(f"drafter: depth * topk**2 = {self.depth * self.topk ** 2} "
                            "candidates exceeds the supported maximum 2**26")
        self._ck = load_checkpoint(os.path.abspath(shipped_checkpoint(self.path)))
        self._block = self._ck.block
        self._vocab = self._ck.vocab_size

    def input_files(self) -> dict[str, str]:
        return checkpoint_sha256(shipped_checkpoint(self.path))

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "shape": self.shape,
                               "temperature": self.temperature}
        if self.shape == "dynamic":
            out.update(depth=self.depth, topk=self.topk, total=self.total)
        return out

    def check(self, spec) -> None:
        """The environment must be a transformer family that the draft can read."""
        if spec.kinds.size != 1 or int(spec.kinds[0]) != TRANSFORMER:
            raise UserError(f"{self!r}: the environment must be a transformer family "
                            "(transformer(path=...)), the model the draft is verified against")
        vt = int(spec.data[int(spec.ipar[0, DATA_OFF]) + 1])
        if vt != self._vocab:
            raise UserError(f"{self!r}: the draft's vocabulary ({self._vocab} tokens) differs "
                            f"from the target's ({vt} tokens)")
        check_slots(int(spec.ipar[0, TF_SLOTS]), self._ck, f"{self!r}: the target's ",
                    "the draft model's")

    def run_roots(self, spec, budgets, roots):
        self.check(spec)
        dcap = int(head_width(self._block, 0, int(spec.ipar[0, TF_SLOTS])))
        acc, exp, dep = new_outputs(budgets.size, roots.keys.size)
        env = (spec.kinds, spec.cw, spec.fpar, spec.ipar, spec.data, spec.cprog, spec.head_cap,
               roots.keys, roots.mode, roots.ci, roots.cf, roots.head, self._block,
               1.0 / self.temperature, dcap)
        if self.shape == "best":
            visited = _k.best_chunk(*env, budgets, start_threshold(budgets[-1]), acc, exp, dep)[0]
            if visited < 0:
                raise UserError("more than 2**28 nodes tie at one draft path probability")
        elif self.shape == "chain":
            _k.chain_chunk(*env, budgets, acc, exp, dep)
        else:
            b = budgets if self.total is None else np.minimum(budgets, self.total)
            _k.dynamic_chunk(*env, self.depth, self.topk, np.ascontiguousarray(b, np.int64),
                             acc, exp, dep)
        return acc, exp, dep
