"""NGram: a character-level Kneser-Ney language model trained on real text.

Tokens are the characters (Unicode code points) of the corpus, numbered 0..V-1 in code
point order. A node's context is its last ``order - 1`` characters: a root drawn by
:func:`brwsim.simulate` starts at a uniformly chosen corpus position (so roots are real
contexts), and every child appends the character of its rank. The node's distribution is
the model's interpolated Kneser-Ney next-character distribution given that context
(formula in :mod:`brwsim.kernels.ngram`), so the environment is again a pure function of
(seed, path). ``moments()`` and ``sample_full`` describe the stationary marginal: the
distribution at a uniformly chosen corpus position.
"""

from __future__ import annotations

import functools
import importlib.resources
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from brwsim.errors import UserError
from brwsim.families.base import Component, Family, Moments, check_int
from brwsim.kernels import dist as K
from brwsim.kernels.ngram import (HDR, HDR_ORDER, NGRAM_BETA, NGRAM_DISCOUNT, NGRAM_ORDER, NGRAM_VOCAB,
                                  kn_moments, kn_table, ngram_init)
from brwsim.kernels.rng import REGIME, purpose_key, unit
from brwsim.keys import node_key
from brwsim.theory.laws import SpineSteps
from brwsim.validate import MAX_TEXT_BYTES, check_input_file

__all__ = ["CORPORA", "CORPUS_DIR", "NGram"]

#: Directory of the shipped corpora: package data ``brwsim/data/corpora``, found through
#: importlib.resources so that an installed wheel has them too.
CORPUS_DIR = Path(str(importlib.resources.files("brwsim") / "data" / "corpora"))
#: Shipped corpora by name (see ``brwsim/data/corpora/README.md``).
CORPORA = {"prose": "prose.txt", "code": "code.txt"}

#: Largest supported alphabet (the model keeps a dense V x V table of its two lowest orders).
MAX_VOCAB = 2048
_PATHLIKE = re.compile(r"[/\\]|^\S+\.[A-Za-z0-9]{1,5}$")
_TOP = 1 << 30


def _read(path: Path, what: str) -> str:
    if path.exists():        # a named pipe, a device or a huge file: refused, not opened
        check_input_file(path, what, MAX_TEXT_BYTES)
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{what} {str(path)!r} not found") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {str(path)!r} is not UTF-8 text ({exc.reason} at byte "
                        f"{exc.start})") from None
    except OSError as exc:
        raise UserError(f"cannot read {what} {str(path)!r}: {exc.strerror}") from None


def load_corpus(corpus: Any) -> str:
    """The text of ``corpus``: a shipped name, a path or the text itself (see :class:`NGram`)."""
    if isinstance(corpus, os.PathLike):
        return _read(Path(corpus), "corpus file")
    if not isinstance(corpus, str):
        raise UserError(f"corpus must be a corpus name ({', '.join(CORPORA)}), a path to a "
                        f"UTF-8 text file or the text itself, got {corpus!r}")
    if corpus in CORPORA:
        path = CORPUS_DIR / CORPORA[corpus]
        if not path.is_file():
            raise UserError(f"shipped corpus {corpus!r} is missing ({path}); regenerate it with "
                            "python experiments/build_corpora.py")
        return _read(path, "corpus file")
    if "\n" not in corpus:
        if os.path.isfile(corpus) or (os.path.exists(corpus) and not os.path.isdir(corpus)):
            return _read(Path(corpus), "corpus file")      # a pipe or device is refused there
        if _PATHLIKE.search(corpus):
            raise UserError(f"corpus file {corpus!r} not found (a one-line text with a '/' or a "
                            "file extension is taken as a path; end the text with a newline "
                            "to train on it)")
    return corpus


@functools.lru_cache(maxsize=8)
def _train(text: str, order: int, discount: float) -> tuple[str, np.ndarray, np.ndarray]:
    """(alphabet, table block, context code of each corpus position) of one model.

    The block layout is documented in :mod:`brwsim.kernels.ngram`.
    """
    cp = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
    letters, tok = np.unique(cp, return_inverse=True)
    v = int(letters.size)
    if v < 2:
        raise UserError(f"the corpus needs at least 2 distinct characters, got {v}")
    if v > MAX_VOCAB:
        raise UserError(f"the corpus has {v} distinct characters; at most {MAX_VOCAB} are supported")
    if tok.size < order + 1:
        raise UserError(f"the corpus has {tok.size} characters; order {order} needs at least "
                        f"{order + 1}")
    if v ** (order - 1) > 2 ** 53 or v ** order >= 2 ** 63:
        top = max(m for m in range(1, order) if v ** (m - 1) <= 2 ** 53 and v ** m < 2 ** 63)
        raise UserError(f"order {order} is too high for a {v}-character alphabet (contexts are "
                        f"coded base {v} in 53 bits); use order <= {top}")
    tok = tok.astype(np.int64).ravel()
    n_tok = tok.size
    vi = np.int64(v)

    def grams(m: int) -> np.ndarray:
        """Codes h * V + w of the m-grams ending at positions m-1 .. L-1 (newest digit first)."""
        out = tok[m - 1:].copy()
        for k in range(1, m):
            out += tok[m - 1 - k:n_tok - k] * vi ** (m - k)
        return out

    def counts(m: int) -> tuple[np.ndarray, np.ndarray]:
        """Sorted m-gram codes and their counts: raw at order N, continuation below."""
        if m == order:
            return np.unique(grams(m), return_counts=True)
        g = np.unique(grams(m + 1))     # (x h w) -> (h w): drop x, the lowest context digit
        return np.unique((g // (vi * vi)) * vi + g % vi, return_counts=True)

    def level(m: int) -> tuple[np.ndarray, ...]:
        """(context codes, pair CSR pointer, lam, tokens, weights) of order m."""
        g, c = counts(m)
        ctx = g // vi
        codes, start = np.unique(ctx, return_index=True)
        ptr = np.append(start, g.size)
        c = c.astype(np.float64)
        total = np.add.reduceat(c, start)
        types = np.diff(ptr)
        return codes, ptr, discount * types / total, g % vi, (c - discount) / np.repeat(total, types)

    _, _, lam1, tok1, w1 = level(1)
    p1 = np.full(v, lam1[0] / v)
    p1[tok1] += w1
    base = np.tile(p1, (v + 1, 1))
    if order >= 2:
        codes, ptr, lam, tk, w = level(2)
        for j, h in enumerate(codes):
            row = lam[j] * p1
            row[tk[ptr[j]:ptr[j + 1]]] += w[ptr[j]:ptr[j + 1]]
            base[h] = row
    header = np.zeros(HDR + HDR_ORDER * max(order - 2, 0))
    header[:3] = v, order, discount
    blocks = [header]
    off = header.size

    def put(a: np.ndarray) -> int:
        nonlocal off
        blocks.append(np.asarray(a, dtype=np.float64).ravel())
        off += blocks[-1].size
        return off - blocks[-1].size

    header[3] = put(base)
    perm = np.lexsort((np.broadcast_to(np.arange(v), base.shape), -base), axis=1)
    sorted_base = np.take_along_axis(base, perm, 1)
    header[5] = put(np.concatenate([sorted_base, perm, np.log(sorted_base)], axis=1))
    levels = {m: level(m) for m in range(3, order + 1)}
    if order >= 3:
        header[4] = put(np.searchsorted(levels[3][0], np.arange(v + 1) * vi))
    for m in range(3, order + 1):
        codes, ptr, lam, tk, w = levels[m]
        h = HDR + HDR_ORDER * (m - 3)
        header[h] = codes.size
        header[h + 1] = put(codes % vi)
        if m < order:
            header[h + 2] = put(np.searchsorted(levels[m + 1][0], np.append(codes * vi, vi ** m)))
        header[h + 3:h + 7] = put(ptr), put(lam), put(tk), put(w)
    block = np.concatenate(blocks)
    pos_ctx = grams(order) // vi if order > 1 else np.zeros(n_tok, np.int64)
    alphabet = "".join(map(chr, letters.tolist()))
    for a in (block, pos_ctx):
        a.setflags(write=False)
    return alphabet, block, pos_ctx


def _temper(q: np.ndarray, beta: float) -> np.ndarray:
    """q**beta renormalised (a full distribution: no mass outside the vocabulary)."""
    if beta == 1.0:
        return q
    w = q ** beta
    return w / w.sum()


class NGram(Family):
    """Character n-gram model with interpolated Kneser-Ney smoothing, trained on real text.

    Parameters
    ----------
    corpus : str or path-like
        ``"prose"`` (the Python documentation's topic pages, English) or ``"code"`` (Python
        standard library source), shipped as package data in ``brwsim/data/corpora`` (see
        its README); or a path to a UTF-8 text file; or the training text itself. Rule for a
        ``str``: a shipped name first; then, if it has no newline and names an existing
        file, that file; a one-line string that looks like a path (has a '/' or '\\', or is
        one word with a file extension) but names no file is an error; anything else is
        the text.
    order : int, default 5
        n: a node's context is its last n - 1 characters (order 1: a unigram model, no
        context). Limited by V**(order - 1) <= 2**53.
    discount : float, default 0.75
        The absolute discount D of every order, in (0, 1].

    Attributes
    ----------
    alphabet : str
        The V characters, in token-id order (code point order).
    vocab, n_chars : int
        V and the corpus length in characters.

    Notes
    -----
    The highest order uses raw counts, lower orders continuation counts (the number of
    distinct characters seen before an n-gram), and the recursion ends in the uniform
    distribution over the alphabet, so every character has mass > 0 and each node's
    distribution sums to 1. An n-gram whose only occurrence starts the corpus has no
    left extension and so no continuation count.
    """

    name = "ngram"
    example = "ngram(corpus=prose, order=3)"
    iid = False

    def __init__(self, corpus: Any, order: int = 5, discount: float = 0.75) -> None:
        self.order = check_int("order", order, 1)
        try:
            d = float(discount)
        except (TypeError, ValueError):
            raise UserError(f"discount must be a number in (0, 1], got {discount!r}") from None
        if not 0.0 < d <= 1.0:
            raise UserError(f"discount must be in (0, 1], got {discount!r}")
        self.discount = d
        self.corpus = os.fspath(corpus) if isinstance(corpus, os.PathLike) else corpus
        text = load_corpus(corpus)
        if text is not corpus:           # read from a file: the hash of the text trained on
            import hashlib

            self._record_input(f"corpus {self.corpus}", hashlib.sha256(text.encode("utf-8")).hexdigest())
        self.alphabet, self._block, self._pos_ctx = _train(text, self.order, d)
        self.vocab = len(self.alphabet)
        self.n_chars = len(text)
        self._head_cap = 3 * self.vocab + self.order  # see brwsim.kernels.ngram.ngram_init
        self._cprog: np.ndarray | None = None
        self._moments: Moments | None = None

    def params(self) -> dict[str, Any]:
        return {"corpus": self.corpus, "order": self.order, "discount": self.discount}

    # -- numba form --------------------------------------------------------------------
    def components(self, beta: float = 1.0) -> list[Component]:
        return [Component(K.NGRAM, fpar={NGRAM_BETA: float(beta), NGRAM_DISCOUNT: self.discount},
                          ipar={NGRAM_VOCAB: self.vocab, NGRAM_ORDER: self.order},
                          data=self._block, head_cap=self._head_cap)]

    def context_program(self, beta: float = 1.0) -> np.ndarray:
        if self._cprog is None:
            v, n = self.vocab, self.order
            cprog = np.concatenate([[K.CTX_NGRAM, v, n - 1, self._pos_ctx.size,
                                     v ** (n - 2) if n >= 2 else 0], self._pos_ctx])
            cprog.setflags(write=False)
            self._cprog = cprog
        return self._cprog

    # -- the model in plain terms --------------------------------------------------------
    def _encode(self, text: str) -> tuple[int, int]:
        """(context code, top order) of the last order - 1 characters of ``text``.

        The newest character is the most significant digit; a shorter text fills the top
        digits and uses only the orders it can (``top``).
        """
        tail = text[max(0, len(text) - self.order + 1):] if self.order > 1 else ""
        code = 0
        for k, ch in enumerate(reversed(tail)):
            i = self.alphabet.find(ch)
            if i < 0:
                raise UserError(f"character {ch!r} is not in the corpus alphabet")
            code += i * self.vocab ** (self.order - 2 - k)
        return code, len(tail) + 1

    def _decode(self, code: int, length: int) -> str:
        """The ``length`` characters of a full context code, oldest first."""
        out = []
        for _ in range(length):
            out.append(self.alphabet[code % self.vocab])
            code //= self.vocab
        return "".join(out)

    def next_token_probs(self, context: str = "", beta: float = 1.0) -> np.ndarray:
        """The model's next-character distribution after ``context``, by token id.

        Only the last ``order - 1`` characters count; a shorter context uses the orders
        it can fill (the empty context: the lowest order). Entry i is the probability of
        ``alphabet[i]``.
        """
        code, top = self._encode(context)
        out = np.empty((1, self.vocab))
        kn_table(self._block, 0, np.array([code], np.int64), top, out)
        return _temper(out[0], beta)

    def path_text(self, seed: int, iteration: int, path: Any = ()) -> str:
        """The text at a node of the environment: the root's context, then the path's tokens.

        ``path`` holds ranks from the root of ``iteration`` (as :func:`brwsim.environment.node_logprobs`);
        the first ``order - 1`` characters are the corpus context the root drew.
        """

        rk = np.uint64(purpose_key(np.uint64(node_key(seed, iteration, ())), REGIME))
        u = unit(rk, 0)                 # as the kernel's root draw (brwsim.kernels.dist)
        n_pos = self._pos_ctx.size
        ctx = int(self._pos_ctx[min(int(u * n_pos), n_pos - 1)])
        text = self._decode(ctx, self.order - 1)
        head = np.empty((1, self._head_cap))
        for r in path:
            r = int(r)
            if not 0 <= r < self.vocab:
                raise UserError(f"rank {r} is outside the vocabulary 0..{self.vocab - 1}")
            ngram_init(self._block, 0, 1.0, ctx, -np.inf, head, 0)
            ch = self.alphabet[int(head[0, self.vocab + r])]
            text += ch
            ctx = self._encode(text)[0]
        return text

    # -- stationary marginal -------------------------------------------------------------
    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        ctx = self._pos_ctx[rng.integers(self._pos_ctx.size)]
        out = np.empty((1, self.vocab))
        kn_table(self._block, 0, np.array([ctx], np.int64), _TOP, out)
        return np.sort(_temper(out[0], beta))[::-1]

    def spine_law(self):
        """The exact spine-step law of the stationary marginal (:func:`brwsim.theory.spine_steps`).

        Atoms -log q_w with weight freq(context) q_w over every corpus context and token.
        """

        codes, counts = np.unique(self._pos_ctx, return_counts=True)
        freq = counts / counts.sum()
        values, weights = [], []
        for lo in range(0, codes.size, 8192):
            out = np.empty((min(8192, codes.size - lo), self.vocab))
            kn_table(self._block, 0, codes[lo:lo + out.shape[0]], _TOP, out)
            values.append(np.maximum(-np.log(out), 0.0).ravel())
            weights.append((out * freq[lo:lo + out.shape[0], None]).ravel())
        return SpineSteps(np.concatenate(values), np.concatenate(weights), exact=True)

    def moments(self, n: int | None = None, seed: int = 0) -> Moments:
        """Exact moments of the stationary marginal (every corpus position's context)."""
        if self._moments is None:
            codes, counts = np.unique(self._pos_ctx, return_counts=True)
            w = counts / counts.sum()
            h, m2, h2 = kn_moments(self._block, 0, codes, w, 1.0, np.empty((1, self.vocab)))
            self._moments = Moments(float(h), float(m2), 0.0, 0.0, float(h2), 0.0, exact=True)
        return self._moments
