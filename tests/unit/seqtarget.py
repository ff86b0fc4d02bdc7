"""A test target model whose next-token distribution is a function of the whole sequence."""

from __future__ import annotations

import numpy as np

from brwsim.drafters.score import tempered


class FunctionTarget:
    """A target whose next-token distribution is a fixed pseudo-random function of the
    whole token sequence, evaluated one sequence at a time (the reference for trees)."""

    vocab_size = 7
    max_positions = 64
    dtype = "float64"

    def __init__(self):
        self.seqs: list[tuple[int, ...]] = []
        self.context: tuple[int, ...] = ()
        self.calls = 0

    def full(self, seq):
        rng = np.random.default_rng(abs(hash(tuple(seq))) % (2 ** 32))
        return tempered(rng.normal(0, 2, self.vocab_size), 1.0)

    def start(self, context):
        self.context = tuple(int(x) for x in context)
        self.seqs = []
        return self.full(self.context)

    def extend(self, parents, tokens):
        self.calls += 1
        out = []
        for p, tok in zip(parents, tokens):
            seq = (self.context if p < 0 else self.seqs[p]) + (int(tok),)
            self.seqs.append(seq)
            out.append(self.full(seq))
        return np.array(out)
