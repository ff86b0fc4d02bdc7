"""The interface of a batched tree evaluator.

A :class:`TreeEvaluator` holds one root at a time. :meth:`~TreeEvaluator.start` runs the
root's context once (filling the KV cache of the prefix) and returns the distribution of
the root's next token. :meth:`~TreeEvaluator.extend` appends a batch of tree nodes and
returns the distribution of the next token at each of them, in one forward pass in which
every node attends to the whole context and to its own ancestors in the tree (a tree
attention mask), never to other branches.

Node ids are assigned in call order: the first node appended after ``start`` is 0, the
next 1, and so on across calls; ``-1`` names the root (the context's last token). A
node's parent is the root or a node appended earlier, in an earlier call or earlier in the
same batch, so a batch may hold a whole subtree. A node's position is the context length
plus its depth minus one (the root's children sit at ``len(context)``).

Log-probabilities are those of the model at temperature 1, normalised over the full
vocabulary (a temperature is applied by the caller: ``log_softmax(lp / T)`` equals
``log_softmax(logits / T)``).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["TreeEvaluator"]


@runtime_checkable
class TreeEvaluator(Protocol):
    """A target model that evaluates one root's tree nodes in batches.

    Attributes
    ----------
    vocab_size : int
        Length of every returned distribution.
    max_positions : int
        The most positions (context plus tree depth) the model attends over.
    dtype : str
        ``"float32"``, ``"float64"`` or ``"bfloat16"``: the precision of the forward pass.
    """

    vocab_size: int
    max_positions: int
    dtype: str

    def start(self, context: np.ndarray) -> np.ndarray:
        """Begin a root: run ``context`` (int64 token ids, at least one) once.

        Returns
        -------
        numpy.ndarray
            float64 ``(vocab_size,)``: log-probabilities of the token after the context.
        """
        ...

    def extend(self, parents: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Append ``len(tokens)`` nodes to the current root's tree and evaluate them.

        Parameters
        ----------
        parents : numpy.ndarray
            int64; ``parents[i]`` is ``-1`` (the root) or the id of a node appended
            earlier (in an earlier call, or at an index below ``i`` of this call).
        tokens : numpy.ndarray
            int64; ``tokens[i]`` is node i's token (the edge from its parent).

        Returns
        -------
        numpy.ndarray
            float64 ``(len(tokens), vocab_size)``: log-probabilities of the token after
            each new node.
        """
        ...
