"""Real contexts: roots along the target's own sampled answers to prompts.

A root is a prompt's tokens (already rendered: a chat template applied, or raw text)
followed by the first k tokens of the target's own answer to it, the way EAGLE and
Spec-Bench measure acceptance. The answer to prompt i is sampled once per (seed, i) with
the evaluator itself, one node at a time along a chain (token j by inverse CDF over the
ranks of step j's distribution with the keyed uniform ``unit(purpose_key(a_i, PATH), j)``,
a_i the answer's key), and stops at an end-of-sequence token; every root of prompt i
reads a prefix of that one answer, so the roots of a prompt share its computation (and
the evaluator's prefix cache). Iteration t reads prompt ``(t // per_prompt) mod n_prompts``
(consecutive roots share a prompt, so the evaluator recomputes only the tokens after
their common prefix); its k is drawn uniformly in 0 .. k_max from the root's key
(``REGIME`` purpose). The context is
the whole prompt and answer prefix, cut to its last ``max_positions - reserve`` tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from brwsim.backends.base import TreeEvaluator
from brwsim.backends.rounds import sampled_rank, tempered
from brwsim.errors import UserError
from brwsim.kernels.rng import PATH, REGIME, mix, purpose_key, root_key, unit

__all__ = ["AnswerRoots"]

_ANSWER = np.uint64(0x5DEECE66D2545F49)     # the answers' own key stream, apart from the roots'


class AnswerRoots:
    """Contexts of roots along the target's own answers (see the module docstring).

    Parameters
    ----------
    ev : TreeEvaluator
        The target model; it samples the answers.
    prompts : sequence of array-like
        Each prompt's token ids (non-empty).
    seed_key : int
        The run's 64-bit seed key (:func:`brwsim.keys.seed_key`).
    k_max : int
        Largest number of answer tokens before a root.
    beta : float, default 1.0
        1 / temperature of the answers' sampling; ``math.inf`` answers greedily.
    eos : sequence of int, optional
        Tokens that end an answer (included in it; the answer is not continued).
    reserve : int, default 64
        Positions kept free for the tree below the root.
    per_prompt : int, default 4
        Consecutive iterations that read the same prompt.
    """

    def __init__(self, ev: TreeEvaluator, prompts: Sequence, seed_key: int, k_max: int,
                 beta: float = 1.0, eos: Sequence[int] = (), reserve: int = 64,
                 per_prompt: int = 4) -> None:
        self.ev = ev
        self.prompts = []
        for i, p in enumerate(prompts):
            a = np.asarray(p, np.int64).ravel()
            if a.size == 0 or a.min() < 0 or a.max() >= ev.vocab_size:
                raise UserError(f"prompt {i} must be a non-empty sequence of ids in "
                                f"0..{ev.vocab_size - 1}")
            self.prompts.append(a)
        if not self.prompts:
            raise UserError("no prompts given")
        if k_max < 0:
            raise UserError(f"k_max must be >= 0, got {k_max}")
        self.k_max = int(k_max)
        if per_prompt < 1:
            raise UserError(f"per_prompt must be >= 1, got {per_prompt}")
        self.per_prompt = int(per_prompt)
        self.beta = float(beta)
        self.eos = {int(t) for t in eos}
        self.limit = int(ev.max_positions) - int(reserve)
        self._key = np.uint64(seed_key)
        self._answers: dict[int, list[int]] = {}
        self._ended: set[int] = set()

    def k_of(self, iteration: int, rkey: int) -> int:
        """Answer tokens before the root of ``iteration`` (key ``rkey``): uniform in 0..k_max."""
        u = unit(np.uint64(purpose_key(np.uint64(rkey), REGIME)), 1)
        return min(int(u * (self.k_max + 1)), self.k_max)

    def answer(self, i: int, k: int) -> np.ndarray:
        """The first k tokens of the answer to prompt i (fewer if it ended)."""
        ans = self._answers.setdefault(i, [])
        if len(ans) < k and i not in self._ended:
            akey = np.uint64(purpose_key(np.uint64(root_key(np.uint64(mix(self._key ^ _ANSWER)),
                                                            np.uint64(i))), PATH))
            ctx = self.prompts[i]
            lp = self.ev.start(ctx) if not ans else self.ev.start(
                np.concatenate([ctx, np.asarray(ans[:-1], np.int64)]))
            parent = -1
            if ans:                           # one node: the last token sampled
                lp = self.ev.extend(np.array([-1]), np.array([ans[-1]]))[0]
                parent = 0
            while len(ans) < k:
                if math.isinf(self.beta):         # greedy: the argmax, lower id on ties
                    tok = int(np.argmax(lp))
                else:
                    r, order = sampled_rank(tempered(lp, self.beta), unit(akey, len(ans)))
                    tok = int(order[min(r, lp.size - 1)])
                ans.append(tok)
                if tok in self.eos:
                    self._ended.add(i)
                    break
                if len(ans) >= k or ctx.size + len(ans) >= self.limit:
                    break
                lp = self.ev.extend(np.array([parent]), np.array([tok]))[0]
                parent += 1
        return np.asarray(ans[:k], np.int64)

    def context(self, iteration: int, rkey: int) -> np.ndarray:
        """The root context of ``iteration``: its prompt, then k answer tokens."""
        i = (int(iteration) // self.per_prompt) % len(self.prompts)
        k = self.k_of(iteration, rkey)
        ctx = np.concatenate([self.prompts[i], self.answer(i, k)])
        return ctx[-self.limit:]
