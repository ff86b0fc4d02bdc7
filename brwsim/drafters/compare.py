"""One root, many drafters: E[X | T_P] of the optimal tree and of each drafter's tree.

For a root context and a target model (a :class:`~brwsim.backends.base.TreeEvaluator`)
at temperature T, :func:`measure_root` returns, for every budget P, E[X | T_P] of the
optimal tree (the P nodes of highest target path probability, built by
:func:`~brwsim.drafters.shapes.best_first` on the target itself) and of each drafter's
tree (its first P drafted nodes, scored against the target by
:func:`~brwsim.drafters.score.score_tree`), plus each drafted node's target path
probability so per-position acceptance along chains can be aggregated over roots.

At T = 0 the target's path is its argmax path, the optimal tree of P nodes is the argmax
chain and its X is P; a drafter's X is the number of its nodes on that chain.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from brwsim.backends.base import TreeEvaluator
from brwsim.drafters.score import score_tree, tempered
from brwsim.drafters.shapes import DraftTree, best_first

__all__ = ["Tempered", "RootResult", "measure_root", "curve"]

#: A drafter: (context, budget) -> its tree in rank order.
Drafter = Callable[[np.ndarray, int], DraftTree]


class Tempered:
    """A target seen at temperature T > 0: log softmax(lp / T) of the wrapped evaluator."""

    def __init__(self, inner: TreeEvaluator, temperature: float) -> None:
        self.inner = inner
        self.temperature = float(temperature)
        self.vocab_size = inner.vocab_size
        self.max_positions = inner.max_positions
        self.dtype = inner.dtype

    def start(self, context: np.ndarray) -> np.ndarray:
        return tempered(self.inner.start(context), self.temperature)

    def extend(self, parents: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        return tempered(self.inner.extend(parents, tokens), self.temperature)


class RootResult(NamedTuple):
    """Per-budget E[X | T_P] of the optimal tree and of each drafter, and each drafter's
    per-node target path probabilities in its rank order."""

    optimal: np.ndarray
    drafters: dict[str, np.ndarray]
    path_prob: dict[str, np.ndarray]


def curve(path_prob: np.ndarray, budgets: np.ndarray) -> np.ndarray:
    """E[X | T_P] for each P: the sum of the first P nodes' path probabilities (a tree
    smaller than P contributes all its nodes)."""
    c = np.concatenate([[0.0], np.cumsum(path_prob)])
    return c[np.minimum(budgets, path_prob.size)]


def measure_root(target: TreeEvaluator, context: np.ndarray, budgets: np.ndarray,
                 drafters: dict[str, Drafter], temperature: float = 1.0) -> RootResult:
    """The optimal tree and every drafter on one root, at one target temperature."""
    budgets = np.asarray(budgets, dtype=np.int64)
    pmax = int(budgets.max())
    context = np.asarray(context, dtype=np.int64)
    if temperature == 0:
        optimal = budgets.astype(np.float64)
    else:
        view = target if temperature == 1 else Tempered(target, temperature)
        tree = best_first(view, view.start(context), pmax)
        optimal = curve(np.exp(tree.log_value), budgets)
    out, probs = {}, {}
    for name, draft in drafters.items():
        tree = draft(context, pmax)
        score = score_tree(target, context, tree.parents, tree.tokens, temperature)
        probs[name] = score.path_prob
        out[name] = curve(score.path_prob, budgets)
    return RootResult(optimal, out, probs)
