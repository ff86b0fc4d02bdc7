"""Real drafters: a draft model, an EAGLE-style head or prompt lookup drafts, the target
family verifies."""

from __future__ import annotations

import importlib.resources
import os
from typing import Any

import numpy as np

from brwsim.drafters.compare import Tempered
from brwsim.drafters.eagle import EagleHead
from brwsim.drafters.promptlookup import lookup_chain, lookup_tree
from brwsim.drafters.score import score_tree, tempered
from brwsim.drafters.shapes import DraftTree, best_first, dynamic, greedy_chain
from brwsim.engine import run_policy, start_threshold
from brwsim.errors import UserError
from brwsim.families.base import check_int, check_positive
from brwsim.families.checkpoint import check_slots, checkpoint_path, load_checkpoint
from brwsim.families.transformer import Transformer, checkpoint_sha256, make_evaluator, shipped_checkpoint
from brwsim.io import file_sha256
from brwsim.backends.rounds import RootResult, stacked
from brwsim.kernels import drafter as _k
from brwsim.kernels.dist import DATA_OFF, TRANSFORMER
from brwsim.kernels.transformer import H_V, TF_SLOTS, head_width
from brwsim.policies.base import Policy, new_outputs, optional_int

__all__ = ["DraftModel", "SHAPES", "KINDS", "NGRAM_SHAPES"]

#: The drafter's tree shapes (kinds ``model`` and ``eagle``).
SHAPES = ("best", "chain", "dynamic")
#: What drafts: a draft checkpoint, an EAGLE-style head, or prompt lookup.
KINDS = ("model", "eagle", "ngram")
#: Prompt lookup's shapes: vLLM's chain, or every recurring continuation merged as a tree.
NGRAM_SHAPES = ("chain", "tree")


def head_folder(path: str) -> str:
    """An EAGLE-style head's folder: a head shipped with brwsim (``brwsim/data/drafters``,
    e.g. ``"eagle-smollm2"``) when nothing of that name exists here, else ``path``."""
    if not os.path.exists(path) and os.sep not in path:
        res = importlib.resources.files("brwsim").joinpath("data", "drafters", path)
        if res.is_dir():
            with importlib.resources.as_file(res) as folder:
                return os.fspath(folder)
    if not os.path.isdir(path):
        raise UserError(f"drafter: no EAGLE head folder {path!r} (shipped: eagle-smollm2)")
    return path


class DraftModel(Policy):
    """Trees drafted by a draft model, an EAGLE-style head or prompt lookup; the target
    family verifies.

    ``kind`` says what drafts:

    * ``model`` (default): a second checkpoint's probabilities (below).
    * ``eagle``: an EAGLE-style head (:class:`~brwsim.drafters.eagle.EagleHead`, e.g. the
      shipped ``path=eagle-smollm2``) drafting exactly as at inference time: depth 1 from
      the target's true last hidden state of the root's context, deeper levels from its
      own predicted features; shapes ``best``, ``chain`` and ``dynamic`` on its
      probabilities. Needs ``transformer(..., backend=numpy)`` (the target's features).
    * ``ngram``: prompt lookup as vLLM's ``ngram`` method
      (:mod:`brwsim.drafters.promptlookup`): the longest suffix of the context, of
      ``min`` .. ``max`` tokens, that recurs in it proposes what followed it;
      ``shape=chain`` (vLLM's) or ``shape=tree`` (every recurring continuation merged).

    On a batched target (``transformer(backend=numpy|torch)``) each root's drafted tree
    is scored by :func:`~brwsim.drafters.score.score_tree`: E[X | T] is the sum of the
    target's path probabilities over it, and X counts its nodes on the target's sampled
    path, drawn with the optimal tree's keyed uniforms (common random numbers). At target
    temperature 0, X = E[X | T] = its nodes on the target's argmax path. Kinds ``eagle``
    and ``ngram`` need a batched target; ``model`` runs on both.

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
        ``kind=model``: the draft checkpoint (as :class:`~brwsim.families.Transformer`'s
        ``path``; ``"draft"`` and ``"target"`` name the shipped byte-level pair).
        ``kind=eagle``: the head's folder or a shipped head's name. Not for ``ngram``.
    shape : str, default "best" (``ngram``: "chain")
        How the tree is drafted: ``best``, ``chain`` or ``dynamic``; ``ngram``: ``chain``
        or ``tree``.
    temperature : float, default 1.0
        The draft model's temperature T > 0 (its probabilities are softmax(logits / T);
        independent of the target family's temperature).
    depth, topk : int, default 6 and 10
        ``shape="dynamic"`` only: layers and expansion width (:class:`Dynamic`'s).
    total : int, optional
        ``shape="dynamic"`` only: cap on the number of draft nodes (EAGLE-2's released
        trees: ``depth=6, topk=10, total=59``).
    kind : {"model", "eagle", "ngram"}, default "model"
    min, max : int, default 1 and 4
        ``kind=ngram`` only: the lengths of the context suffix matched (1 <= min <= max).

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

    def __init__(self, path: Any = None, shape: str | None = None, temperature: float = 1.0,
                 depth: int | None = None, topk: int | None = None,
                 total: int | None = None, kind: str = "model", min: Any = None,
                 max: Any = None) -> None:
        if kind not in KINDS:
            raise UserError(f"drafter: kind must be one of {', '.join(KINDS)}, got {kind!r}")
        self.kind = kind
        lengths = {"min": min, "max": max}
        if kind == "ngram":
            if path is not None:
                raise UserError("drafter: kind=ngram takes no path (it drafts from the context)")
            self.path = None
            shape = "chain" if shape is None else shape
            if shape not in NGRAM_SHAPES:
                raise UserError(f"drafter: kind=ngram's shape must be chain or tree, got {shape!r}")
            self.min = check_int("min", 1 if min is None else min, 1, 1 << 16)
            self.max = check_int("max", 4 if max is None else max, 1, 1 << 16)
            if self.min > self.max:
                raise UserError(f"drafter: min = {self.min} exceeds max = {self.max}")
        else:
            given = [k for k, v in lengths.items() if v is not None]
            if given:
                raise UserError(f"drafter: {', '.join(given)} apply to kind=ngram only")
            self.min = self.max = None
            self.path = checkpoint_path(path, "drafter: ")
            shape = "best" if shape is None else shape
            if shape not in SHAPES:
                raise UserError(f"drafter: shape must be one of {', '.join(SHAPES)}, got {shape!r}")
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
        if kind == "eagle":
            self._head = head_folder(self.path)
        elif kind == "model" and not os.path.exists(shipped_checkpoint(self.path)):
            raise UserError(f"drafter: checkpoint {self.path!r} not found")
        self._ck = None

    @property
    def _checkpoint(self):
        """The draft checkpoint packed for the numba kernel (kind=model on a numba target)."""
        if self._ck is None:
            self._ck = load_checkpoint(os.path.abspath(shipped_checkpoint(self.path)))
        return self._ck

    def input_files(self) -> dict[str, str]:
        if self.kind == "model":
            return checkpoint_sha256(shipped_checkpoint(self.path))
        if self.kind == "eagle":
            return {os.path.abspath(os.path.join(self._head, f)): file_sha256(os.path.join(self._head, f))
                    for f in sorted(os.listdir(self._head))
                    if os.path.isfile(os.path.join(self._head, f))}
        return {}

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.kind != "model":
            out["kind"] = self.kind
        if self.path is not None:
            out["path"] = self.path
        out["shape"] = self.shape
        if self.kind == "ngram":
            out.update(min=self.min, max=self.max)
            return out
        out["temperature"] = self.temperature
        if self.shape == "dynamic":
            out.update(depth=self.depth, topk=self.topk, total=self.total)
        return out

    def __getstate__(self) -> dict[str, Any]:
        # evaluators and the packed checkpoint stay behind: a worker rebuilds them
        return {k: v for k, v in self.__dict__.items() if k not in ("_ck", "_memo")} | {"_ck": None}

    def check(self, spec) -> None:
        """The environment must be a transformer family that the draft can read."""
        if spec.kinds.size != 1 or int(spec.kinds[0]) != TRANSFORMER:
            raise UserError(f"{self!r}: the environment must be a transformer family "
                            "(transformer(path=...)), the model the draft is verified against")
        if self.kind != "model":
            raise UserError(f"{self!r}: kind={self.kind} needs a batched target: "
                            "transformer(..., backend=numpy)")
        ck = self._checkpoint
        vt = int(spec.data[int(spec.ipar[0, DATA_OFF]) + H_V])
        if vt != ck.vocab_size:
            raise UserError(f"{self!r}: the draft's vocabulary ({ck.vocab_size} tokens) differs "
                            f"from the target's ({vt} tokens)")
        check_slots(int(spec.ipar[0, TF_SLOTS]), ck, f"{self!r}: the target's ",
                    "the draft model's")

    # -- batched targets -----------------------------------------------------------------
    def check_batched(self, family) -> None:
        """Refuse a batched target this drafter cannot draft for (before any tree)."""
        if not isinstance(family, Transformer) or not family.batched:
            raise UserError(f"{self!r}: the environment must be a transformer family with a "
                            "batched backend here")
        ev = family.evaluator()
        if self.kind == "eagle":
            if not hasattr(ev, "context_features"):
                raise UserError(f"{self!r}: kind=eagle reads the target's hidden states, which "
                                f"backend={family.backend} does not give (use backend=numpy)")
            self._drafter_state(family)            # builds the head: checks its sizes
        elif self.kind == "model":
            draft = self._drafter_state(family)
            if draft.vocab_size != ev.vocab_size:
                raise UserError(f"{self!r}: the draft's vocabulary ({draft.vocab_size} tokens) "
                                f"differs from the target's ({ev.vocab_size} tokens)")

    def _drafter_state(self, family):
        """The draft evaluator or EAGLE head for ``family``'s target (built once)."""
        memo = self.__dict__.setdefault("_memo", {})
        key = (id(family), self.kind)
        if key not in memo:
            ev = family.evaluator()
            if self.kind == "eagle":
                memo[key] = EagleHead(self._head, ev.embedding(), ev.lm_head(), dtype=family.dtype)
            else:
                draft = make_evaluator(self.path, family.backend, family.dtype, family.device)
                memo[key] = draft if self.temperature == 1 else Tempered(draft, self.temperature)
        return memo[key]

    def draft_tree(self, family, context: np.ndarray, budget: int) -> DraftTree:
        """The drafted tree of ``budget`` nodes below a root of context ``context``, in
        rank order (the tree of budget P is its first P nodes)."""
        if self.kind == "ngram":
            if self.shape == "chain":
                t = lookup_chain(context, budget, self.min, self.max)
                return DraftTree(np.arange(-1, t.size - 1, dtype=np.int64), t, np.zeros(t.size))
            p, t = lookup_tree(context, budget, self.min, self.max)
            return DraftTree(p, t, np.zeros(t.size))
        draft = self._drafter_state(family)
        if self.kind == "eagle":
            ev = family.evaluator()
            root = draft.start(context, ev.context_features(context))
            if self.temperature != 1:
                root = tempered(root, self.temperature)
                draft = Tempered(draft, self.temperature)
        else:
            root = draft.start(context)
        if self.shape == "best":
            return best_first(draft, root, budget)
        if self.shape == "chain":
            return greedy_chain(draft, root, budget)
        total = budget if self.total is None else min(budget, self.total)
        return dynamic(draft, root, self.depth, self.topk, total)

    def run_batched(self, family, budgets: np.ndarray, key: np.uint64, first: int, count: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """X, E[X | T] and the depth of the drafted trees of iterations first .. first +
        count - 1 on a batched target (:meth:`Transformer.batched_trees`' roots)."""
        self.check_batched(family)
        contexts, rkeys = family.roots(key, first, count)
        return stacked([self.tree_at(family, c, k, budgets) for c, k in zip(contexts, rkeys)],
                       budgets.size)

    def tree_at(self, family, context: np.ndarray, rkey: int, budgets: np.ndarray) -> RootResult:
        """The drafted trees of every budget below a root of context ``context`` and key
        ``rkey`` on a batched target, scored, with the target's sampled path in them."""
        budgets = np.asarray(budgets, np.int64)
        tree = self.draft_tree(family, context, int(budgets[-1]))
        sc = score_tree(family.evaluator(), context, tree.parents, tree.tokens,
                        family.temperature, root_key=rkey)
        n = sc.path_prob.size
        cut = np.minimum(budgets, n)
        acc = np.concatenate([[0], np.cumsum(sc.onpath, dtype=np.int64)])[cut].astype(np.int32)
        exp = np.concatenate([[0.0], np.cumsum(sc.path_prob)])[cut]
        dep = (np.concatenate([[0], np.maximum.accumulate(sc.depth)])[cut] if n
               else np.zeros(budgets.size, np.int64)).astype(np.int32)
        on = np.flatnonzero(sc.onpath)
        on = on[np.argsort(sc.depth[on], kind="stable")]
        return RootResult(acc, exp, dep, tree.tokens[on], sc.path_ranks)

    def run_roots(self, spec, budgets, roots):
        self.check(spec)
        ck = self._checkpoint
        dcap = int(head_width(ck.block, 0, int(spec.ipar[0, TF_SLOTS])))
        out = new_outputs(budgets.size, roots.keys.size)
        draft = _k.Draft(ck.block, 1.0 / self.temperature, dcap)
        if self.shape == "best":
            visited = run_policy(_k.best_chunk, spec, roots, draft, budgets,
                                 start_threshold(budgets[-1]), out)[0]
            if visited < 0:
                raise UserError("more than 2**28 nodes tie at one draft path probability")
        elif self.shape == "chain":
            run_policy(_k.chain_chunk, spec, roots, draft, budgets, out)
        else:
            b = budgets if self.total is None else np.minimum(budgets, self.total)
            run_policy(_k.dynamic_chunk, spec, roots, draft, self.depth, self.topk,
                       np.ascontiguousarray(b, np.int64), out)
        return out
