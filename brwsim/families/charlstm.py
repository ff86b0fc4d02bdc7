"""CharLSTM: textgenrnn's pretrained character LSTM as an environment, run by brwsim's kernels.

The weights (``brwsim/data/textgenrnn``, MIT, see its ORIGIN.md) are read with h5py and
evaluated by brwsim's own numba forward pass (:mod:`brwsim.kernels.lstm`); TensorFlow is
never needed. The node's distribution is a pure function of (seed, path): the root's
window of 40 classes (drawn or given), then the characters of the path's ranks.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from brwsim.errors import UserError
from brwsim.families.base import Component, Family, check_int, check_positive
from brwsim.families.checkpoint import packed32
from brwsim.families.ngram import load_corpus
from brwsim.families.rootsampled import RootSampled
from brwsim.kernels import dist as K
from brwsim.kernels.lstm import LSTM_BETA, LSTM_CARRY
from brwsim.kernels.lstm import HDR, head_width, lstm_probs
from brwsim.keys import seed_key
from brwsim.validate import check_input_file, echo

__all__ = ["CharLSTM", "SHIPPED", "WINDOW", "META_TOKEN"]

#: Shipped weights by name: (weights file, vocabulary file) inside ``brwsim/data/textgenrnn``.
SHIPPED = {"textgenrnn": ("textgenrnn_weights.hdf5", "textgenrnn_vocab.json")}
#: textgenrnn's context length (``max_length``): the root window.
WINDOW = 40
#: textgenrnn's start-of-text meta token (a vocabulary entry of its own).
META_TOKEN = "<s>"
_LAYERS = ("embedding", "rnn_1", "rnn_2", "attention", "output")


def _shipped(name: str) -> Path:
    res = importlib.resources.files("brwsim").joinpath("data", "textgenrnn", name)
    with importlib.resources.as_file(res) as path:
        return Path(path)


def _dataset(f, layer: str, weight: str, what: str) -> np.ndarray:
    try:
        return np.asarray(f[layer][layer][weight], dtype=np.float64)
    except (KeyError, TypeError, OSError, ValueError):
        raise UserError(f"{what} has no {layer}/{weight} weights (not a textgenrnn model "
                        "saved by Keras)") from None


def _convert_lstm(kernel: np.ndarray, rec: np.ndarray, bias: np.ndarray, what: str):
    """Keras LSTM (kernel, recurrent kernel, bias) of a layer saved as LSTM or CuDNNLSTM.

    A CuDNNLSTM (bias of 8 u entries) stores each gate's matrices in cuDNN's layout and
    two biases; this is Keras' own conversion (``_convert_rnn_weights`` of its HDF5
    loader): input kernels ``k.T.reshape(k.shape, order='F')`` and recurrent kernels
    ``k.T`` per gate, biases summed.
    """
    u = rec.shape[0]
    if rec.shape != (u, 4 * u) or kernel.ndim != 2 or kernel.shape[1] != 4 * u:
        raise UserError(f"{what}: LSTM weights of shapes {kernel.shape}, {rec.shape} are not "
                        "a unidirectional LSTM's")
    if bias.shape == (8 * u,):
        kernel = np.hstack([k.T.reshape(k.shape, order="F") for k in np.hsplit(kernel, 4)])
        rec = np.hstack([k.T for k in np.hsplit(rec, 4)])
        bias = bias[:4 * u] + bias[4 * u:]
    elif bias.shape != (4 * u,):
        raise UserError(f"{what}: LSTM bias of shape {bias.shape} fits neither LSTM nor CuDNNLSTM")
    return kernel, rec, bias


@functools.lru_cache(maxsize=4)
def _load(weights_path: str, vocab_path: str) -> tuple[np.ndarray, dict[str, int], int, int, int]:
    """(weights block, vocabulary, classes, embedding size, units) of one model file."""
    import h5py

    what = f"weights file {weights_path!r}"
    if not os.path.exists(weights_path):
        raise UserError(f"{what} not found")
    check_input_file(weights_path, "weights file")
    if os.path.exists(vocab_path):
        check_input_file(vocab_path, "vocabulary file")
    try:
        with open(vocab_path, encoding="utf-8") as fh:
            vocab = json.load(fh)
    except FileNotFoundError:
        raise UserError(f"vocabulary file {vocab_path!r} not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"vocabulary file {vocab_path!r} is not JSON: {exc}") from None
    if (not isinstance(vocab, dict) or not vocab
            or sorted(vocab.values()) != list(range(1, len(vocab) + 1))):
        raise UserError(f"vocabulary file {vocab_path!r} must map characters to 1..n (textgenrnn's "
                        "format)")
    try:
        f = h5py.File(weights_path, "r")
    except OSError as exc:
        raise UserError(f"{what} is not a readable HDF5 file ({exc})") from None
    with f:
        if "rnn_3" in f:
            raise UserError(f"{what} has more than 2 LSTM layers; only textgenrnn's default "
                            "2-layer model is supported")
        emb = _dataset(f, "embedding", "embeddings:0", what)
        lstm = [_convert_lstm(*(_dataset(f, f"rnn_{i}", w, what) for w in
                                ("kernel:0", "recurrent_kernel:0", "bias:0")), what) for i in (1, 2)]
        wa = _dataset(f, "attention", "attention_W:0", what).ravel()
        wo = _dataset(f, "output", "kernel:0", what)
        bo = _dataset(f, "output", "bias:0", what)
    nc, e = emb.shape
    u = lstm[0][1].shape[0]
    x = e + 2 * u
    if (nc != len(vocab) + 1 or lstm[0][0].shape[0] != e or lstm[1][0].shape != (u, 4 * u)
            or lstm[1][1].shape[0] != u or wa.shape != (x,) or wo.shape != (x, nc)
            or bo.shape != (nc,)):
        raise UserError(f"{what} does not fit its vocabulary ({len(vocab)} characters) or "
                        "textgenrnn's architecture (embedding, 2 LSTM layers, attention, output)")
    (k1, r1, b1), (k2, r2, b2) = lstm
    parts = [emb @ k1 + b1, emb @ wa[:e], emb @ wo[:e], packed32(r1), packed32(k2),
             packed32(r2), b2, wa[e:e + u], wa[e + u:], packed32(wo[e:]), bo]
    header = np.zeros(HDR)
    header[:3] = nc, e, u
    off = HDR
    for k, p in enumerate(parts):
        header[3 + k] = off
        off += p.size
    block = np.concatenate([header] + [np.ravel(p) for p in parts])
    if not np.all(np.isfinite(block)):
        raise UserError(f"{what} holds non-finite weights")
    block.setflags(write=False)
    return block, vocab, nc, e, u


class CharLSTM(RootSampled, Family):
    """textgenrnn's pretrained character-level LSTM language model (a trained neural network).

    Parameters
    ----------
    weights : str or path-like, default ``"textgenrnn"``
        ``"textgenrnn"``: the pretrained model shipped with brwsim (textgenrnn 2.0.0's
        ``textgenrnn_weights.hdf5``, MIT licence; trained by its author on online posts);
        or a path to a weights file saved by textgenrnn with the default architecture.
    temperature : float, default 1.0
        T > 0: every node's distribution is q**(1/T) renormalised.
    carry : int, default 20
        How many characters a node's state may carry beyond textgenrnn's 40-character
        window (see Notes). 0 is textgenrnn's own predictor at every node (the network
        rerun over the node's last 40 characters: 40 LSTM steps per node); k > 0 carries
        the parent's state (one step per node) except at every (k + 1)-th level, which
        reruns over its last 40 characters.
    prompt : str, optional
        If given, every root is textgenrnn's generation start: the meta token ``<s>``
        followed by ``prompt``, its last 40 classes left-padded with the padding class 0
        (as ``textgenrnn_generate``). Every character must be in the vocabulary.
    corpus : str or path-like, default ``"prose"``
        Without a prompt, a root's window is the 40 characters ending at a uniformly drawn
        position of this text (a shipped corpus name, a path or the text, as
        :class:`~brwsim.families.NGram`); characters outside the vocabulary (e.g. newlines)
        encode as class 0, as ``textgenrnn_encode_sequence`` does.
    vocab : str or path-like, optional
        The vocabulary JSON of a custom ``weights`` file (required then).

    Attributes
    ----------
    alphabet : str
        The V characters by class 1..V (the meta token ``<s>`` is one class; its position
        holds ``"\\x00"``).
    vocab_size : int
        V, the number of characters (textgenrnn's classes minus the padding class).

    Notes
    -----
    **Which model brwsim computes.** The network's output for a class sequence s is
    f(s): embedding, both LSTM layers run over s from the zero state, the attention
    average over all positions of s and the softmax restricted to the characters (the
    padding class 0, which textgenrnn's sampler never emits, is dropped and the rest
    renormalised). textgenrnn predicts with f(last 40 classes, left-padded with 0).
    brwsim gives the node at depth d below a drawn root f(its last 40 + g classes) with
    g = d mod (carry + 1) (the root's window and the path's characters): the window grows
    by one character per level, which lets each node carry its parent's (h1, c1, h2, c2)
    and running attention sums and cost one LSTM step, and snaps back to textgenrnn's 40
    every carry + 1 levels. At g = 0 (every root, every node with ``carry=0``) it is
    textgenrnn's prediction exactly. At g > 0 it is the same trained network reading a
    slightly longer context, not textgenrnn's predictor: on prose roots with sampled
    continuations the total variation between f(last 40 + g) and f(last 40) averages
    0.07 at g = 1, 0.09 at g = 5 and 0.24 at g = 20 (40 paths). Unbounded growth is not
    offered: beyond about 40 extra characters the network (trained on 40-character
    windows) degenerates into noise. Generation runs and path walks continue the same
    count, so a node's distribution stays a function of (seed, path). Ranks are by
    probability descending, ties by ascending class. Checked against a from-scratch
    numpy recomputation in ``tests/unit/test_charlstm.py``.

    Roots: the stationary-like law is a uniformly drawn window of a real corpus (so
    roots are real contexts, as the n-gram family's), or the fixed prompt. ``moments()``
    is Monte Carlo over drawn roots.
    """

    name = "charlstm"
    example = "charlstm(carry=3)"
    iid = False
    _ROOT_SPAWN = 0x4C53544D

    def __init__(self, weights: Any = "textgenrnn", temperature: float = 1.0,
                 carry: int = 20, prompt: str | None = None, corpus: Any = "prose",
                 vocab: Any = None) -> None:
        self.temperature = check_positive("temperature", temperature)
        self.carry = check_int("carry", carry, 0)
        if isinstance(weights, str) and weights in SHIPPED:
            if vocab is not None:
                raise UserError("vocab is only for a custom weights file, not the shipped "
                                f"{weights!r}")
            wpath, vpath = (str(_shipped(n)) for n in SHIPPED[weights])
        elif isinstance(weights, (str, os.PathLike)):
            if vocab is None:
                raise UserError(f"a custom weights file ({os.fspath(weights)!r}) needs vocab= "
                                "(its textgenrnn vocabulary JSON)")
            wpath, vpath = os.fspath(weights), os.fspath(vocab)
        else:
            raise UserError(f"weights must be {', '.join(map(repr, SHIPPED))} or a path to a "
                            f"textgenrnn weights file, got {weights!r}")
        self.weights = os.fspath(weights)
        self.vocab = None if vocab is None else os.fspath(vocab)
        self._block, self._vocab, nc, e, u = _load(wpath, vpath)
        self._record_input(wpath)
        self._record_input(vpath)
        self.vocab_size = nc - 1
        chars = ["\x00"] * nc
        for ch, i in self._vocab.items():
            chars[i] = ch if len(ch) == 1 else "\x00"
        self.alphabet = "".join(chars[1:])
        self._head_cap = int(head_width(nc, e, u))
        self.prompt = prompt
        self.corpus = os.fspath(corpus) if isinstance(corpus, os.PathLike) else corpus
        if prompt is not None:
            if not isinstance(prompt, str):
                raise UserError(f"prompt must be a string, got {prompt!r}")
            bad = sorted({ch for ch in prompt if ch not in self._vocab})
            if bad:
                raise UserError(f"prompt character {bad[0]!r} is not in the model's vocabulary")
            self._roots = self.window([META_TOKEN] + list(prompt))
        else:
            text = load_corpus(corpus)
            if len(text) < WINDOW:
                raise UserError(f"the corpus has {len(text)} characters; a root window needs "
                                f"{WINDOW}")
            self._roots = self.encode(text)
            if not self._roots.any():
                raise UserError(f"corpus: none of its {len(text)} characters is in the model's "
                                "vocabulary (every root would be padding)")
        self._roots.setflags(write=False)
        self._cprog: np.ndarray | None = None

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"weights": self.weights, "temperature": self.temperature,
                               "carry": self.carry}
        if self.prompt is not None:
            out["prompt"] = self.prompt
        else:
            out["corpus"] = self.corpus
        if self.vocab is not None:
            out["vocab"] = self.vocab
        return out

    # -- text <-> classes ----------------------------------------------------------------
    def encode(self, text: Any) -> np.ndarray:
        """Classes of ``text`` (a string or a list of tokens such as ``"<s>"``), unknown -> 0."""
        if not isinstance(text, str) and not (isinstance(text, (list, tuple))
                                              and all(isinstance(t, str) for t in text)):
            raise UserError(f"text must be a string or a list of token strings, got "
                            f"{echo(text)}")
        get = self._vocab.get
        return np.array([get(ch, 0) for ch in text], dtype=np.int64)

    def window(self, text: Any) -> np.ndarray:
        """textgenrnn's model input for ``text``: its last 40 classes, left-padded with 0."""
        c = self.encode(text)[-WINDOW:]
        return np.concatenate([np.zeros(WINDOW - c.size, np.int64), c])

    def probs(self, classes: Any, beta: float = 1.0) -> np.ndarray:
        """f(classes): the distribution by class (entry 0, padding, is 0) after ``classes``.

        The network run from the zero state over the whole sequence (see Notes), tempered
        by ``beta / temperature``.
        """
        c = np.asarray(classes, dtype=np.int64)
        if c.ndim != 1 or c.size == 0 or c.min() < 0 or c.max() > self.vocab_size:
            raise UserError(f"classes must be a non-empty sequence in 0..{self.vocab_size}")
        out = np.empty(self.vocab_size + 1)
        lstm_probs(self._block, 0, c, float(beta) / self.temperature, out)
        return out

    def next_token_probs(self, context: Any = "", beta: float = 1.0) -> np.ndarray:
        """textgenrnn's own prediction after ``context``: f(its padded 40-class window)."""
        return self.probs(self.window(context), beta)

    def root_window(self, seed: int, iteration: int) -> np.ndarray:
        """The 40 classes of the root of ``iteration`` (as the kernel draws them)."""
        return self._window_at(seed_key(seed), iteration, WINDOW)

    def path_classes(self, seed: int, iteration: int, path: Any = ()) -> np.ndarray:
        """Classes at a node: the root's window, then the classes of the path's ranks."""
        return self._walk_ranks(self.root_window(seed, iteration), path)

    #: Ranked classes are 1.. (class 0 is padding, never a node).
    _TOKEN_OFFSET = 1

    def _ranked_probs(self, seq: list[int]) -> np.ndarray:
        return self.probs(self.context(seq))[1:]

    def context(self, classes: Any) -> np.ndarray:
        """What the network reads at the node whose classes (root window + path) are given.

        Its last 40 + g classes, g = (len - 40) mod (carry + 1) (see Notes).
        """
        c = np.asarray(classes, dtype=np.int64)
        g = (c.size - WINDOW) % (self.carry + 1) if c.size >= WINDOW else 0
        return c[-(WINDOW + g):]

    def decode(self, classes: Any) -> str:
        """Text of ``classes`` (padding as ``"\\x00"``; the meta token as ``"<s>"``)."""
        out = []
        for c in np.asarray(classes).tolist():
            if c == self._vocab.get(META_TOKEN):
                out.append(META_TOKEN)
            else:
                out.append("\x00" if c == 0 else self.alphabet[c - 1])
        return "".join(out)

    # -- numba form ----------------------------------------------------------------------
    def components(self, beta: float = 1.0) -> list[Component]:
        return [Component(K.LSTM, fpar={LSTM_BETA: float(beta) / self.temperature,
                                        LSTM_CARRY: float(self.carry)},
                          data=self._block, head_cap=self._head_cap)]

    def context_program(self, beta: float = 1.0) -> np.ndarray:
        return self._stream_program(WINDOW)

    # -- stationary-like marginal ----------------------------------------------------------
    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        i = int(rng.integers(self._roots.size - WINDOW + 1))
        return np.sort(self.probs(self._roots[i:i + WINDOW], beta)[1:])[::-1]
