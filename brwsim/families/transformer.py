"""Transformer: a Hugging Face GPT-2 or Llama-architecture checkpoint as an environment.

The checkpoint folder (``config.json``, ``model.safetensors`` and, unless the model is
byte-level, ``tokenizer.json``) is read with ``safetensors`` (:mod:`brwsim.families.checkpoint`)
and evaluated by brwsim's own numba forward pass with a per-node KV cache
(:mod:`brwsim.kernels.transformer`); torch is never needed. A node's distribution is a
pure function of (seed, path): the root's window of tokens (drawn from a corpus or a
given prompt), then the tokens of the path's ranks.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import importlib.resources
import os
from typing import Any

import numpy as np

from brwsim.keys import seed_key
from brwsim.errors import UserError
from brwsim.families.base import Component, Family, check_int, check_positive
from brwsim.families.checkpoint import (TensorMap, check_slots, checkpoint_path, is_gguf,
                                       load_checkpoint, open_checkpoint)
from brwsim.models.catalogue import CATALOGUE, local_path
from brwsim.models.gguf import load_gguf
from brwsim.models.tokenizer import gguf_tokenizer
from brwsim.prompts import BUILTIN as PROMPT_SETS, load_prompts, prompt_text
from brwsim.families.ngram import CORPORA, load_corpus
from brwsim.io import file_sha256
from brwsim.families.rootsampled import RootSampled
from brwsim.kernels import dist as K
from brwsim.kernels.transformer import TF_BETA, TF_CARRY, TF_SLOTS, TF_WINDOW
from brwsim.kernels.rng import root_key
from brwsim.kernels.transformer import head_width, transformer_logits
from brwsim.backends.numpyforward import NumpyEvaluator
from brwsim.backends.contexts import AnswerRoots
from brwsim.backends.rounds import (RootResult, RoundsTree, optimal_trees, score_budgets,
                                    stacked)
from brwsim.drafters.shapes import greedy_chain

__all__ = ["Transformer", "BYTE_SPECIALS", "SHIPPED", "checkpoint_sha256", "make_evaluator",
           "shipped_checkpoint"]

#: The byte-level GPT-2 pair trained here and shipped as package data
#: (``brwsim/data/transformers``, trained by ``experiments/train_transformers.py``).
SHIPPED = ("target", "draft")
#: Roots whose optimal trees a batched run keeps in flight together (each pass evaluates
#: all their rounds' nodes where the backend has root slots; a finished root's slot goes
#: to the next at once): the weights are read once per pass for all of them, at the cost
#: of each root's K/V cache held at once.
ROOTS_PER_PASS = 4


def shipped_checkpoint(path: str) -> str:
    """The folder or file of ``path``: a shipped checkpoint's name (``"target"``,
    ``"draft"``) or a catalogue model's (:mod:`brwsim.models.catalogue`, which must be
    fetched) when nothing of that name exists here, else ``path`` itself. A bare name
    (no folder separator, no ``.gguf``) that is none of these and names nothing here is
    refused with the names there are (a mistyped model name)."""
    if path in SHIPPED and not os.path.isdir(path):
        res = importlib.resources.files("brwsim").joinpath("data", "transformers", path)
        with importlib.resources.as_file(res) as folder:
            return os.fspath(folder)
    if path in CATALOGUE and not os.path.exists(path):
        return local_path(path)
    if not os.path.exists(path) and os.sep not in path and not path.endswith(".gguf"):
        raise UserError(f"path={path!r} is neither a file or folder here nor a model name "
                        f"(shipped: {', '.join(SHIPPED)}; catalogue: {', '.join(CATALOGUE)}; "
                        "brwsim models list)")
    return path

#: The files of a checkpoint folder that determine its distributions.
CHECKPOINT_FILES = ("config.json", "model.safetensors", "tokenizer.json")


def checkpoint_sha256(folder: str) -> dict[str, str]:
    """SHA-256 (hex) of the checkpoint files present in ``folder`` (config, weights,
    tokenizer; or the GGUF file itself), by absolute path; cached per (path, size,
    modification time)."""
    out = {}
    for name in CHECKPOINT_FILES if not is_gguf(folder) else (None,):
        path = os.path.abspath(folder if name is None else os.path.join(folder, name))
        if os.path.isfile(path):
            st = os.stat(path)
            out[path] = _sha256_cached(path, st.st_size, st.st_mtime_ns)
    return out


@functools.lru_cache(maxsize=16)
def _sha256_cached(path: str, size: int, mtime_ns: int) -> str:
    return file_sha256(path)


#: A checkpoint without ``tokenizer.json`` is byte-level if its vocabulary is 256 bytes
#: plus at most this many special tokens (ids 0..255 are the bytes).
BYTE_SPECIALS = 16


@functools.lru_cache(maxsize=4)
def _tokenizer(path: str):
    from tokenizers import Tokenizer

    if is_gguf(path):
        return gguf_tokenizer(path)
    try:
        return Tokenizer.from_file(path)
    except Exception as exc:            # tokenizers raises a bare Exception on bad files
        raise UserError(f"{path}: not a readable tokenizer.json ({str(exc).splitlines()[0]})") from None


def _prompt_set_items(model: str, source: Any, chat: bool | None = None) -> list[str] | None:
    """The texts of a prompt set (``"humaneval"``, ``"chat"``, a ``.jsonl`` file): each
    conversation rendered with the chat template of the GGUF ``model`` when ``chat`` is
    True, or None and the model has one; else its plain text. None when ``source`` is a
    corpus. ``chat=True`` on a model without a chat template is a :class:`UserError`."""
    if not isinstance(source, str) or (source not in PROMPT_SETS and not source.endswith(".jsonl")):
        return None
    conversations = load_prompts(source)
    m = load_gguf(model) if is_gguf(model) else None
    if chat and (m is None or m.chat_template is None):
        raise UserError(f"chat=true: {model} has no chat template (use chat=false for raw prompts)")
    if m is not None and m.chat_template is not None and chat is not False:
        return [m.render_chat(c) for c in conversations]
    return [prompt_text(c) for c in conversations]


def _bos_token(model: str, config: dict) -> int | None:
    """The BOS id that starts every encoded text of ``model``, or None: a GGUF's
    ``tokenizer.ggml.add_bos_token`` (llama.cpp's rule), a folder's
    ``tokenizer_config.json`` ``add_bos_token`` with the ``bos_token_id`` of its
    configuration ``config`` (the family's, already read and checked)."""
    if is_gguf(model):
        m = load_gguf(model)
        return m.bos_token_id if m.add_bos_token else None
    cfg_path = os.path.join(model, "tokenizer_config.json")
    if not os.path.isfile(cfg_path):
        return None
    try:
        with open(cfg_path, encoding="utf-8") as fh:
            add = json.loads(fh.read(1 << 22)).get("add_bos_token") is True
    except (OSError, ValueError, AttributeError):
        return None
    bos = config.get("bos_token_id")
    return bos if add and isinstance(bos, int) and not isinstance(bos, bool) else None


def _prompt_set_text(model: str, source: Any, chat: bool | None = None) -> str | None:
    """A prompt set's texts (:func:`_prompt_set_items`) joined by blank lines."""
    items = _prompt_set_items(model, source, chat)
    return None if items is None else "\n\n".join(items)


def _config_int(cfg: dict, name: str, where: str) -> int:
    v = cfg.get(name)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 < v < 1 << 31:
        raise UserError(f"{where}: config key {name!r} must be a positive integer, got {v!r}")
    return v


def _check_temperature(value: Any, backend: str) -> float:
    """T > 0, or T = 0 (greedy decoding) under a batched backend."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
        if backend == "numba":
            raise UserError("temperature must be a finite number > 0 with backend=numba "
                            "(temperature=0, greedy decoding, needs backend=numpy or torch)")
        return 0.0
    return check_positive("temperature", value)


def _check_chat(value: Any) -> bool | None:
    """``chat``: None (the template when the model has one), True or False."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise UserError(f"chat must be true or false, got {value!r}")


def make_evaluator(path: str, backend: str, dtype: str, device: str = "cpu",
                   opened: tuple | None = None):
    """The :class:`~brwsim.backends.base.TreeEvaluator` of a checkpoint (a shipped or
    catalogue name, a folder or a ``.gguf``) under a batched backend, built once per
    process (evaluators are used one root at a time: ``start`` replaces the root).

    ``opened``: the checkpoint's ``(config, tensors)`` when already opened
    (:func:`~brwsim.families.checkpoint.open_checkpoint`).
    """
    where = os.path.abspath(shipped_checkpoint(os.fspath(path)))
    st = os.stat(where if not os.path.isdir(where) else os.path.join(where, "config.json"))
    key = (where, backend, dtype, device, st.st_size, st.st_mtime_ns)
    if key not in _EVALUATORS:
        while len(_EVALUATORS) >= _EVALUATORS_KEPT:       # oldest first
            _EVALUATORS.pop(next(iter(_EVALUATORS)))
        _EVALUATORS[key] = _new_evaluator(where, backend, dtype, device, opened)
    return _EVALUATORS[key]


#: Evaluators of this process by checkpoint and backend: a sweep worker or a run loads a
#: model once (a target and a draft model are kept).
_EVALUATORS: dict[tuple, Any] = {}
_EVALUATORS_KEPT = 2


def _new_evaluator(where: str, backend: str, dtype: str, device: str, opened: tuple | None):
    if backend == "numpy":
        config, tensors = opened if opened is not None else open_checkpoint(where)
        return NumpyEvaluator(config, TensorMap(tensors), dtype)
    if backend != "torch":
        raise UserError(f"backend must be numpy or torch here, got {backend!r}")
    try:
        import torch  # noqa: F401
    except ImportError:
        raise UserError("backend=torch needs torch: pip install 'brwsim[torch]'") from None
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("device=cuda: no CUDA device is available here")
    from brwsim.backends.torchforward import TorchEvaluator

    return TorchEvaluator(where, device, dtype)


class Transformer(RootSampled, Family):
    """A decoder-only transformer checkpoint (GPT-2, Llama, Qwen2, Mistral, SmolLM).

    Parameters
    ----------
    path : str or path-like
        A ``.gguf`` file (llama or qwen2 architecture; tokenizer from its metadata), a
        fetched catalogue model's name (``brwsim models list``), or a Hugging Face
        checkpoint folder: ``config.json`` (``model_type`` ``gpt2``,
        ``llama``, ``qwen2`` or ``mistral``) and ``model.safetensors``; ``tokenizer.json``
        unless the vocabulary is 256 bytes plus at most 16 special tokens (then the text's
        UTF-8 bytes are the tokens). ``"target"`` and ``"draft"`` name the byte-level GPT-2
        pair shipped with brwsim (:data:`SHIPPED`; ``brwsim/data/transformers``, whose README
        states how it was trained and its held-out bits per byte).
    prompts : str or path-like, optional
        Default ``"prose"``; not with ``prompt`` (giving both is refused). Without ``prompt``, a root's window is the ``window`` tokens ending at a uniformly
        drawn position of this text, tokenised as one stream (a shipped corpus name,
        ``"prose"`` or ``"code"``, a path to a UTF-8 file or the text, as
        :class:`~brwsim.families.NGram`'s corpus); or a prompt set, ``"humaneval"`` or a
        ``.jsonl`` file (:func:`brwsim.prompts.load_prompts`), whose conversations are
        rendered with the GGUF's chat template when it has one (else their plain text)
        and joined by blank lines into that text.
    prompt : str, optional
        Every root is this text's last ``window`` tokens (all of it if shorter).
    temperature : float, default 1.0
        T > 0: every node's distribution is softmax(logits / T). T = 0 (batched backends):
        greedy decoding, the target's accepted path is its argmax path (ties: the lower
        token id), so the optimal tree of P nodes is that chain with X = P, and a policy's
        X is the number of its nodes on it; answers of ``contexts="answer"`` are greedy.
    window : int, default 32
        Tokens of a root's context.
    carry : int, default 32
        Tokens a node's context may carry beyond the window: below a drawn root, the node
        at depth D reads the last window + (D mod (carry + 1)) tokens (its own included):
        each node appends one token to its parent's KV cache, every (carry + 1)-th level
        is rerun over its last ``window`` tokens. window + carry must fit the model's
        positions; memory per tree level is about 2 L kvd (window + carry) float64.
        (The numba backend only: the batched backends attend to the whole context.)
    backend : {"numba", "numpy", "torch"}, default "numba"
        ``numba``: brwsim's node-at-a-time float64 kernel (the reference). ``numpy``
        (:class:`~brwsim.backends.numpyforward.NumpyEvaluator`, GPT-2 and Llama) and
        ``torch`` (``brwsim.backends.torchforward.TorchEvaluator``, the ``brwsim[torch]``
        extra) build each optimal tree in rounds of batched evaluations
        (:mod:`brwsim.backends.rounds`): the same trees, every node attending to the whole
        root context and its ancestors.
    dtype : {"float32", "float64"}, optional
        Precision of a batched backend (default float32); the numba backend is float64.
    device : {"cpu", "cuda"}, default "cpu"
        Where the torch backend runs (the others run on the CPU).
    contexts : {"window", "answer"}, optional
        Roots of a batched backend: ``window`` (the numba backend's only kind: windows
        of the prompts text as above) or ``answer`` (the default of the batched backends:
        a prompt, then the first k tokens of the model's own sampled answer to it, k
        uniform in 0 .. ``answer`` per root; :class:`~brwsim.backends.contexts.AnswerRoots`).
        The prompts are ``prompt`` (one) or else ``prompts``: a list of texts or of token-id
        lists, or a text (shipped corpus name, file or text) whose blank-line-separated
        blocks are the prompts. Iterations 4j .. 4j + 3 read prompt j mod (number of
        prompts), sharing its prefix.
    answer : int, default 32
        The largest k of ``contexts="answer"``.
    chat : bool, optional
        How a prompt set becomes prompts: ``true`` renders each conversation with the
        GGUF's chat template (refused for a model without one), ``false`` takes its plain
        text; default: the template when the model has one. Prompts of a model whose
        tokenizer adds a BOS token (a GGUF's ``tokenizer.ggml.add_bos_token``, a folder's
        ``tokenizer_config.json``) start with it (once: a template that writes it is kept).

    Attributes
    ----------
    vocab_size : int
        V, the checkpoint's vocabulary (every token is a rank; ranks by probability
        descending, ties by ascending token id).
    model_type, n_params : str, int
        From the checkpoint.

    Notes
    -----
    Weights are float32 from the file, widened exactly to float64; all arithmetic is
    float64 (agreeing with a float64 numpy recomputation to about 1e-12 relative,
    ``tests/unit/test_transformer.py``; with ``transformers``' float32 forward pass to
    float32 rounding). Generation runs and path walks continue the depth count, so a
    node's distribution stays a function of (seed, path). ``moments()`` and the spine law
    are Monte Carlo over drawn roots.
    """

    name = "transformer"
    example = None
    iid = False
    _ROOT_SPAWN = 0x5452464D
    _root_count = 200
    #: Drawn roots of the moments under a batched backend (a real model's forward pass
    #: over a whole prompt each).
    _BATCHED_ROOTS = 64

    def __init__(self, path: Any, prompts: Any = None, prompt: str | None = None,
                 temperature: float = 1.0, window: int = 32, carry: int = 32,
                 backend: str = "numba", dtype: str | None = None, device: str = "cpu",
                 contexts: str | None = None, answer: int = 32, chat: Any = None) -> None:
        if prompt is not None and prompts is not None:
            raise UserError("give prompt or prompts, not both (prompt: every root is that "
                            "text; prompts: roots drawn from a text)")
        prompts = "prose" if prompts is None else prompts
        self._set_backend(backend, dtype, device, contexts, answer)
        if self.backend != "numba":
            self._root_count = self._BATCHED_ROOTS
        self.temperature = _check_temperature(temperature, self.backend)
        self.chat = _check_chat(chat)
        self.window = check_int("window", window, 1, 4096)
        self.carry = check_int("carry", carry, 0, 4096)
        self.path = checkpoint_path(path)
        self._slots = self.window + self.carry
        where = os.path.abspath(shipped_checkpoint(self.path))
        if self.backend == "numba":
            ck = load_checkpoint(where)
            self._packed = ck.block
            self.vocab_size = ck.vocab_size
            self.model_type = ck.model_type
            self.n_params = ck.n_params
            self._config = ck.config
            check_slots(self._slots, ck)
        else:
            # A batched backend reads the weights itself (the torch backend through
            # transformers, so any architecture it knows): no numba block is packed.
            self._packed = None
            self._config, self._tensors = open_checkpoint(where)
            self.model_type = str(self._config.get("model_type"))
            self.vocab_size = _config_int(self._config, "vocab_size", where)
            self.n_params = int(sum(int(np.prod(TensorMap(self._tensors)._shape(n)))
                                    for n in self._tensors.names))
        tok = os.path.join(shipped_checkpoint(self.path), "tokenizer.json")
        if is_gguf(shipped_checkpoint(self.path)):       # the file's own tokenizer metadata
            tok = os.path.abspath(shipped_checkpoint(self.path))
        self._tokenizer = tok if os.path.isfile(tok) else None
        for name, digest in checkpoint_sha256(shipped_checkpoint(self.path)).items():
            self._record_input(name, digest)
        if self._tokenizer is None and not 256 <= self.vocab_size <= 256 + BYTE_SPECIALS:
            raise UserError(f"checkpoint {self.path!r} has no tokenizer.json and its "
                            f"vocabulary ({self.vocab_size}) is not byte-level")
        self.prompt = prompt
        self.prompts = os.fspath(prompts) if isinstance(prompts, os.PathLike) else prompts
        if self.contexts == "answer":
            self._answer_prompts = self._prompt_list(prompt, self.prompts)
            toks = self._answer_prompts[0]
            self._root_w = int(toks.size)
        elif isinstance(self.prompts, (list, tuple)):
            raise UserError("a list of prompts needs contexts='answer' (a batched backend)")
        elif prompt is not None:
            if not isinstance(prompt, str):
                raise UserError(f"prompt must be a string, got {prompt!r}")
            toks = self.encode(prompt)
            if toks.size == 0:
                raise UserError("the prompt has no tokens")
            toks = toks[-self.window:]
            self._root_w = int(toks.size)
        else:
            text = _prompt_set_text(shipped_checkpoint(self.path), self.prompts, self.chat)
            if text is None:
                text = load_corpus(prompts)
            key = (f"corpus {self.prompts}" if self.prompts in CORPORA else "prompts text"
                   if "\n" in str(self.prompts) else str(self.prompts))
            self._record_input(key, hashlib.sha256(text.encode("utf-8")).hexdigest())
            toks = self.encode(text)
            if toks.size < self.window:
                what = (f"prompts {self.prompts!r}" if "\n" not in str(self.prompts)
                        else "the prompts text")
                raise UserError(f"{what} has {toks.size} tokens; a root window needs "
                                f"{self.window} (window=)" if toks.size else
                                f"{what} has no tokens")
            self._root_w = self.window
        self._roots = toks
        self._roots.setflags(write=False)
        self._cprog: np.ndarray | None = None
        self._head_cap = int(head_width(self._block, 0, self._slots)) if self._packed is not None else None

    def params(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path}
        if self.prompt is not None:
            out["prompt"] = self.prompt
        else:
            out["prompts"] = self.prompts
        out.update(temperature=self.temperature, window=self.window, carry=self.carry)
        if self.backend != "numba":
            out.update(backend=self.backend, dtype=self.dtype, device=self.device,
                       contexts=self.contexts)
            if self.contexts == "answer":
                out["answer"] = self.answer
        if self.chat is not None:
            out["chat"] = self.chat
        return out

    def __getstate__(self) -> dict[str, Any]:
        # a batched backend's open checkpoint (file handles) is reopened where unpickled
        return {k: v for k, v in super().__getstate__().items() if k != "_tensors"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if state.get("backend", "numba") != "numba":
            self._config, self._tensors = open_checkpoint(
                os.path.abspath(shipped_checkpoint(self.path)))

    @property
    def _block(self) -> np.ndarray:
        """The numba kernel's packed weights (packed on first use under a batched backend)."""
        if self._packed is None:
            self._packed = load_checkpoint(os.path.abspath(shipped_checkpoint(self.path))).block
        return self._packed

    def _numba_head_cap(self) -> int:
        if self._head_cap is None:
            self._head_cap = int(head_width(self._block, 0, self._slots))
        return self._head_cap

    # -- batched backends ------------------------------------------------------------------
    #: Trees of a batched backend are built by :meth:`batched_trees` (brwsim.simulate reads it).
    @property
    def batched(self) -> bool:
        return self.backend != "numba"

    def _set_backend(self, backend: str, dtype: str | None, device: str, contexts: str | None,
                     answer: int) -> None:
        if backend not in ("numba", "numpy", "torch"):
            raise UserError(f"backend must be numba, numpy or torch, got {backend!r}")
        self.backend = backend
        if dtype is None:
            dtype = "float64" if backend == "numba" else "float32"
        ok = {"numba": ("float64",), "numpy": ("float32", "float64"),
              "torch": ("float32", "float64", "bfloat16")}[backend]
        if dtype not in ok:
            raise UserError(f"dtype {dtype!r} is not available with backend={backend} "
                            f"({', '.join(ok)})")
        self.dtype = dtype
        if device not in ("cpu", "cuda") or (device == "cuda" and backend != "torch"):
            raise UserError(f"device {device!r} is not available with backend={backend}")
        self.device = device
        if contexts is None:
            contexts = "window" if backend == "numba" else "answer"
        if contexts not in ("window", "answer") or (contexts == "answer" and backend == "numba"):
            raise UserError(f"contexts must be 'window'{'' if backend == 'numba' else ' or answer'}"
                            f" with backend={backend}, got {contexts!r}")
        self.contexts = contexts
        self.answer = check_int("answer", answer, 0, 1 << 20)

    def _prompt_list(self, prompt: Any, prompts: Any) -> list[np.ndarray]:
        """Token ids of each prompt of ``contexts="answer"``: a prompt set's conversations
        rendered with the GGUF's chat template (:func:`_prompt_set_items`), else raw text."""
        if prompt is not None:
            items: list = [prompt]
        elif isinstance(prompts, (list, tuple)):
            items = list(prompts)
        else:
            items = _prompt_set_items(os.path.abspath(shipped_checkpoint(self.path)), prompts,
                                      self.chat)
            if items is None:
                text = load_corpus(prompts)
                self._record_input("prompts text" if "\n" in str(prompts) else str(prompts),
                                   hashlib.sha256(text.encode("utf-8")).hexdigest())
                items = [b.strip() for b in text.split("\n\n") if b.strip()]
        out = []
        bos = _bos_token(os.path.abspath(shipped_checkpoint(self.path)), self._config)
        for i, item in enumerate(items):
            if isinstance(item, str):
                toks = self.encode(item)
                if bos is not None and (toks.size == 0 or toks[0] != bos):
                    toks = np.concatenate([[bos], toks]).astype(np.int64)
            else:
                try:
                    toks = np.asarray(item, dtype=np.int64).ravel()
                except (TypeError, ValueError):
                    raise UserError(f"prompt {i} must be a text or a list of token ids") from None
            if toks.size == 0 or toks.min() < 0 or toks.max() >= self.vocab_size:
                raise UserError(f"prompt {i} must have tokens, ids in 0..{self.vocab_size - 1}")
            out.append(toks)
        if not out:
            raise UserError("no prompts given")
        return out

    def evaluator(self):
        """The batched backend's :class:`~brwsim.backends.base.TreeEvaluator` (built once)."""
        return self.memoized("evaluator", lambda: make_evaluator(
            self.path, self.backend, self.dtype, self.device, (self._config, self._tensors)))

    @property
    def beta(self) -> float:
        """1 / temperature (infinite at temperature 0: greedy decoding)."""
        return math.inf if self.temperature == 0 else 1.0 / self.temperature

    def root_context(self, key: np.uint64, iteration: int) -> np.ndarray:
        """The whole context of the root of ``iteration`` under a batched backend, for a
        run of 64-bit seed key ``key`` (:func:`brwsim.keys.seed_key` of its seed, or a
        sweep point's key)."""
        key = np.uint64(key)
        if self.contexts == "window":
            return self._window_root(key, iteration)
        def answers() -> AnswerRoots:
            eos = self._config.get("eos_token_id")
            eos = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
            return AnswerRoots(self.evaluator(), self._answer_prompts, key, self.answer,
                               self.beta, eos)

        roots = self.memoized(("answers", int(key)), answers)
        return roots.context(iteration, int(root_key(key, np.uint64(iteration))))

    def batched_trees(self, budgets: np.ndarray, key: np.uint64, first: int, count: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """X_P, E[X | T_P] and the depth of T_P of iterations first .. first + count - 1
        of the run of seed key ``key``, each of shape (len(budgets), count), built by a
        batched backend in rounds."""
        if self.temperature == 0:       # the argmax chain: X = E[X | T_P] = depth = P
            col = np.asarray(budgets)[:, None].repeat(count, 1)
            return col.astype(np.int32), col.astype(np.float64), col.astype(np.int32)
        budgets = np.asarray(budgets, np.int64)
        contexts, rkeys = self.roots(key, first, count)
        trees = self._optimal_trees(contexts, rkeys, int(budgets[-1]))
        return stacked([self._scored(tree, budgets) for tree in trees], budgets.size)

    def roots(self, key: np.uint64, first: int, count: int) -> tuple[list[np.ndarray], list[int]]:
        """The contexts (:meth:`root_context`) and 64-bit keys of the roots of iterations
        first .. first + count - 1 of the run of seed key ``key`` (batched backends)."""
        its = range(first, first + count)
        return ([self.root_context(key, it) for it in its],
                [int(root_key(np.uint64(key), np.uint64(it))) for it in its])

    def _optimal_trees(self, contexts: list, rkeys: list, p_max: int) -> list[RoundsTree]:
        """T_{p_max} of each root, ``ROOTS_PER_PASS`` of them in flight at a time.

        Each call starts from the default first guess (later roots take the last finished
        tree's threshold): the rounds, and so a float32 target's rounding, depend only on
        the call's own roots, never on what the process ran before, so a sweep's chunk
        gives the same numbers on whichever worker runs it."""
        return optimal_trees(self.evaluator(), contexts, p_max, rkeys, self.beta,
                             slots=ROOTS_PER_PASS)

    @staticmethod
    def _scored(tree: RoundsTree, budgets: np.ndarray) -> RootResult:
        if tree.pos.size < int(budgets[-1]):
            raise UserError(f"fewer than P = {int(budgets[-1])} nodes of positive path "
                            "probability exist below a root")
        on = np.flatnonzero(tree.onpath)
        on = on[np.argsort(tree.depth[on], kind="stable")]
        return RootResult(*score_budgets(tree, budgets), tree.tokens[on], tree.ranks[on])

    def optimal_at(self, context: np.ndarray, rkey: int, budgets: np.ndarray) -> RootResult:
        """The optimal trees of every budget below a root of context ``context`` and key
        ``rkey``, built in rounds (at T = 0: the argmax chain), with the sampled path."""
        budgets = np.asarray(budgets, np.int64)
        p_max = int(budgets[-1])
        ev = self.evaluator()
        if self.temperature == 0:       # the argmax chain: X = E[X | T_P] = depth = P
            chain = greedy_chain(ev, ev.start(context), p_max).tokens
            return RootResult(budgets.astype(np.int32), budgets.astype(np.float64),
                              budgets.astype(np.int32), chain, np.zeros(chain.size, np.int64))
        return self._scored(self._optimal_trees([context], [rkey], p_max)[0], budgets)

    # -- text <-> tokens ---------------------------------------------------------------
    def encode(self, text: str) -> np.ndarray:
        """Token ids of ``text`` (the checkpoint's tokenizer, or its UTF-8 bytes)."""
        if self._tokenizer is None:
            return np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.int64)
        ids = _tokenizer(self._tokenizer).encode(text, add_special_tokens=False).ids
        toks = np.asarray(ids, dtype=np.int64)
        if toks.size and (toks.min() < 0 or toks.max() >= self.vocab_size):
            raise UserError(f"tokenizer.json gives ids outside the model's vocabulary "
                            f"0..{self.vocab_size - 1}")
        return toks

    def decode(self, tokens: Any) -> str:
        """Text of ``tokens`` (bytes decoded with replacement for a byte-level model)."""
        toks = [int(t) for t in np.asarray(tokens).ravel()]
        if self._tokenizer is None:
            return bytes(t for t in toks if t < 256).decode("utf-8", errors="replace")
        return _tokenizer(self._tokenizer).decode(toks)

    def logits(self, tokens: Any) -> np.ndarray:
        """The model's logits after ``tokens`` (positions 0.., no cache reuse)."""
        t = np.asarray(tokens, dtype=np.int64)
        if t.ndim != 1 or t.size == 0 or t.min() < 0 or t.max() >= self.vocab_size:
            raise UserError(f"tokens must be a non-empty sequence in 0..{self.vocab_size - 1}")
        out = np.empty(self.vocab_size)
        transformer_logits(self._block, 0, t.astype(np.float64), out)
        return out

    def probs(self, tokens: Any, beta: float = 1.0) -> np.ndarray:
        """softmax(beta logits / T) after ``tokens``, by token id."""
        z = self.logits(tokens) * (float(beta) / self.temperature)
        e = np.exp(z - z.max())
        return e / e.sum()

    def root_tokens(self, seed: int, iteration: int) -> np.ndarray:
        """The window of the root of ``iteration`` (as the kernel draws it)."""
        return self._window_root(seed_key(seed), iteration)

    def _window_root(self, key: np.uint64, iteration: int) -> np.ndarray:
        """The window of the root of ``iteration`` in the run of seed key ``key``."""
        return self._window_at(key, iteration, self._root_w)

    def context(self, tokens: Any) -> np.ndarray:
        """What the network reads at the node whose tokens (root window + path) are given.

        Below the root (w0 tokens), depth D < carry + 1 reads all w0 + D tokens; every
        (carry + 1)-th level restarts from its last w = min(window, previous w + carry + 1)
        tokens, and the levels after it append theirs (see the class Notes).
        """
        t = np.asarray(tokens, dtype=np.int64)
        depth = t.size - self._root_w
        w = self._root_w
        for _ in range(depth // (self.carry + 1)):
            w = min(self.window, w + self.carry + 1)
        if depth < self.carry + 1:
            return t
        return t[-(w + depth % (self.carry + 1)):]

    def path_tokens(self, seed: int, iteration: int, path: Any = ()) -> np.ndarray:
        """Tokens at a node: the root's window, then the tokens of the path's ranks."""
        return self._walk_ranks(self.root_tokens(seed, iteration), path)

    def _ranked_probs(self, seq: list[int]) -> np.ndarray:
        return self.probs(self.context(seq))

    # -- numba form ----------------------------------------------------------------------
    def components(self, beta: float = 1.0) -> list[Component]:
        return [Component(K.TRANSFORMER,
                          fpar={TF_BETA: float(beta) / self.temperature, TF_CARRY: float(self.carry),
                                TF_WINDOW: float(self.window)},
                          ipar={TF_SLOTS: self._slots}, data=self._block, head_cap=self._numba_head_cap())]

    def context_program(self, beta: float = 1.0) -> np.ndarray:
        return self._stream_program(self._root_w)

    # -- stationary-like marginal ----------------------------------------------------------
    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        if self.batched:            # a drawn root's distribution from the batched backend
            if self.contexts == "answer":
                i = int(rng.integers(len(self._answer_prompts)))
                ctx = self._answer_prompts[i]
            else:
                i = int(rng.integers(self._roots.size - self._root_w + 1))
                ctx = self._roots[i:i + self._root_w]
            memo = self.memoized("root_lp", dict)
            if i not in memo:                # a prompt drawn again costs no forward pass
                memo[i] = self.evaluator().start(ctx)
            lp = memo[i]
            if self.temperature == 0:            # greedy decoding: a point mass
                out = np.zeros(lp.size)
                out[0] = 1.0
                return out
            z = lp * (float(beta) / self.temperature)
            e = np.exp(z - z.max())
            return np.sort(e / e.sum())[::-1]
        i = int(rng.integers(self._roots.size - self._root_w + 1))
        return np.sort(self.probs(self._roots[i:i + self._root_w], beta))[::-1]
