"""What the neural environments share: roots drawn from a token stream, paths walked by
rank, and spine laws and moments from the whole distributions of drawn roots.

Neural families (``charlstm``, ``transformer``) cost a forward pass per distribution, so
their root marginal is summarised once per instance from ``ROOT_SAMPLES`` drawn roots
(:meth:`~brwsim.families.Family.sample_full`, exact atoms of each) rather than by the
generic numba sampler. Their roots are windows of one token stream (``self._roots``),
drawn as the kernels' ``CTX_LSTM`` context program draws them.
"""

from __future__ import annotations

import numpy as np

from brwsim.errors import UserError
from brwsim.kernels import dist as K
from brwsim.kernels.rng import REGIME, purpose_key, root_key, unit
from brwsim.theory.laws import BatchedAtoms, Moments, SpineSteps

__all__ = ["RootSampled", "ROOT_SAMPLES"]

#: Drawn roots behind ``moments()`` and ``spine_law()``.
ROOT_SAMPLES = 1000


class RootSampled:
    """Mixin: ``spine_law`` and ``moments`` of a family's root marginal from drawn roots.

    The family sets ``_ROOT_SPAWN`` (the spawn key of its root draws) and implements
    ``sample_full``. A family whose roots are windows of a token stream keeps the stream
    in ``_roots`` (read-only int64) and uses :meth:`_window_at`, :meth:`_stream_program`
    and :meth:`_walk_ranks`; it sets ``_TOKEN_OFFSET`` (its token ids are the ranked
    class ids plus this) and implements ``_ranked_probs`` for the walk.
    """

    _ROOT_SPAWN = 0
    _root_count = ROOT_SAMPLES
    _TOKEN_OFFSET = 0

    # -- roots drawn from a token stream -----------------------------------------------------
    def _window_at(self, key, iteration: int, width: int) -> np.ndarray:
        """The ``width`` tokens of the root of ``iteration`` in the run of 64-bit seed key
        ``key``: the window starting at a position drawn uniformly (the root key's
        ``REGIME`` uniform), as the kernels draw it."""
        n_roots = self._roots.size - width + 1
        rk = np.uint64(purpose_key(np.uint64(root_key(np.uint64(key), np.uint64(iteration))), REGIME))
        i = min(int(unit(rk, 0) * n_roots), n_roots - 1)
        return self._roots[i:i + width].copy()

    def _stream_program(self, width: int) -> np.ndarray:
        """The kernels' ``CTX_LSTM`` context program over ``_roots`` with root windows of
        ``width`` tokens (built once)."""
        cprog = self.__dict__.get("_cprog")
        if cprog is None:
            n = self._roots.size
            cprog = np.concatenate([[K.CTX_LSTM, self.vocab_size, width, n - width + 1, n],
                                    self._roots]).astype(np.float64)
            cprog.setflags(write=False)
            self._cprog = cprog
        return cprog

    def _walk_ranks(self, start: np.ndarray, path) -> np.ndarray:
        """``start``'s tokens, then at each node the token of the next rank of ``path``
        (ranks by ``_ranked_probs`` descending, ties by ascending id)."""
        seq = [int(t) for t in start]
        for r in path:
            r = int(r)
            if not 0 <= r < self.vocab_size:
                raise UserError(f"rank {r} is outside the vocabulary 0..{self.vocab_size - 1}")
            p = self._ranked_probs(seq)
            order = np.lexsort((np.arange(p.size), -p))
            seq.append(int(order[r]) + self._TOKEN_OFFSET)
        return np.array(seq, dtype=np.int64)

    def _ranked_probs(self, seq: list[int]) -> np.ndarray:
        """The distribution over ranked tokens at the node whose tokens are ``seq``."""
        raise NotImplementedError

    def _root_rows(self, n: int, seed: int) -> np.ndarray:
        """Whole sorted distributions of ``n`` uniformly drawn roots (cached in the memo,
        which is not pickled: a real model's 64 rows are tens of MB, which every sweep
        task would otherwise carry)."""
        def draw() -> np.ndarray:
            rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(self._ROOT_SPAWN,)))
            return np.array([self.sample_full(rng) for _ in range(n)])

        return self.memoized(("root_rows", n, seed), draw)

    def spine_law(self) -> BatchedAtoms:
        """The spine-step law of the root marginal from drawn roots (exact atoms of each),
        in 10 batches so that predictions carry their standard error."""
        rows = self._root_rows(self._root_count, 0)
        batches = []
        for part in np.array_split(rows, 10):
            p = part[part > 0]
            batches.append(SpineSteps(-np.log(p), p / part.shape[0], exact=False))
        return BatchedAtoms(batches)

    def moments(self, n: int | None = None, seed: int = 0) -> Moments:
        """Monte Carlo moments over ``n`` drawn roots (default: the family's root count)."""
        rows = self._root_rows(self._root_count if n is None else int(n), seed)
        with np.errstate(divide="ignore", invalid="ignore"):
            lq = np.where(rows > 0, np.log(rows), 0.0)
        h = -(rows * lq).sum(1)
        m2 = (rows * lq * lq).sum(1)
        se = lambda x: float(x.std(ddof=1) / np.sqrt(x.size))  # noqa: E731
        return Moments(float(h.mean()), float(m2.mean()), se(h), se(m2), float((h * h).mean()),
                       se(h * h), exact=False)
