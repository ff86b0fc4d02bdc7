"""Capture a bank from a transformer checkpoint with brwsim's own forward pass (no torch).

:func:`capture_bank` is ``brwsim capture``: the checkpoint (a Hugging Face folder read as
:class:`~brwsim.families.Transformer` reads it, or a shipped name ``target``/``draft``)
generates from every prompt by sampling at a temperature, and every generated position
becomes a bank row: the ``top_k`` largest log-probabilities of the distribution the token
was sampled from, the sampled token's rank in it and the generation it belongs to; exactly
the rows ``experiments/capture_hf.py`` writes, built by the same importer
(:func:`brwsim.bank.importer.import_arrays`) with the checkpoint's vocabulary size, so the
entropy bounds are finite (and exact when ``top_k`` is the whole vocabulary).

Contexts follow the family's window/carry rule (:class:`~brwsim.families.Transformer`): a
generation starts from the prompt's last ``window`` tokens, each sampled token is appended
to the KV cache (one token's forward pass) while at most ``carry`` tokens are carried
past the window, and then the context restarts from its last ``window`` tokens. So the
position at depth D of a generation sees what the node at depth D of
``transformer(path=..., prompt=..., window=W, carry=C)`` sees, and the bank is the i.i.d.
view of the same environment whose contextual view ``brwsim run`` simulates.

:func:`capture_roots` (``brwsim capture --family F --iterations N``) is the matched i.i.d.
view of a run instead: one row per root of ``brwsim run --family F --iterations N``, the
distribution at exactly that root, under any backend.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from brwsim.bank.importer import import_arrays
from brwsim.errors import UserError
from brwsim.families.transformer import Transformer
from brwsim.backends.rounds import sampled_rank, tempered
from brwsim.io import file_sha256, write_netcdf_atomic
from brwsim.keys import node_key, seed_key
from brwsim.kernels.rng import PATH, purpose_key, unit
from brwsim.kernels.transformer import transformer_sample, transformer_start
from brwsim.lazy import xarray as xr
from brwsim.validate import (
    MAX_TEXT_BYTES,
    MAX_VOCAB,
    check_input_file,
    check_int,
    check_output_path,
    check_work_size,
)

__all__ = ["capture_bank", "capture_roots", "read_prompts", "DEFAULT_TOKENS", "EXACT_VOCAB", "STEP_TOKENS"]

#: Tokens generated per prompt by default.
DEFAULT_TOKENS = 64
#: Without ``top_k``, vocabularies up to this size are stored whole (an exact bank);
#: larger ones keep their 64 most likely tokens, as ``capture_hf.py`` does.
EXACT_VOCAB = 1024
#: Tokens sampled per kernel call (the progress bar's step).
STEP_TOKENS = 64


def read_prompts(path: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """The prompts of a text file, one prompt per line (UTF-8), with their line numbers.

    Blank lines are skipped, as ``capture_hf.py`` skips them; a prompt is its line without
    the line break.

    Raises
    ------
    brwsim.errors.UserError
        When the file is missing, not a regular file, not UTF-8 or holds no prompt.
    """
    p = check_input_file(path, "prompts file", MAX_TEXT_BYTES)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise UserError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    out = [(i, line) for i, line in enumerate(lines, 1) if line.strip()]
    if not out:
        raise UserError(f"{p}: no prompts (expected one prompt per line)")
    return out


def _line_prompts(checkpoint: str, path: str | os.PathLike[str], **params: Any,
                  ) -> tuple[Transformer, list[np.ndarray]]:
    """The model (with the first prompt as its ``prompt``) and every prompt's token ids."""
    lines = read_prompts(path)
    try:
        model = Transformer(checkpoint, prompt=lines[0][1], **params)
    except UserError as exc:
        if str(exc) == "the prompt has no tokens":
            raise UserError(f"{path}:{lines[0][0]}: the prompt has no tokens") from None
        raise
    seqs = []
    for number, text in lines:
        toks = model.encode(text)
        if toks.size == 0:
            raise UserError(f"{path}:{number}: the prompt has no tokens")
        seqs.append(toks)
    return model, seqs


def _generate(model: Transformer, prompt: np.ndarray, tokens: int, k: int,
              rng: np.random.Generator, bar: Any) -> tuple[np.ndarray, np.ndarray]:
    """Top-k log-probabilities (tokens, k) and sampled ranks of one generation."""
    block, slots = model._block, model._slots
    hr = transformer_start(block, 0, slots, float(model.window), prompt.astype(np.float64))
    lp = np.empty((tokens, k))
    rank = np.empty(tokens, dtype=np.int64)
    tok = np.empty(tokens, dtype=np.int64)
    uniforms = rng.random(tokens)
    for a in range(0, tokens, STEP_TOKENS):
        b = min(a + STEP_TOKENS, tokens)
        transformer_sample(block, 0, slots, float(model.window), float(model.carry),
                           1.0 / model.temperature, hr, uniforms[a:b], k, lp[a:b],
                           rank[a:b], tok[a:b])
        if bar is not None:
            bar.update(b - a)
    return lp, rank


def capture_bank(checkpoint: str | os.PathLike[str], prompts: str | os.PathLike[str],
                 out: str | os.PathLike[str] | None = None, *, tokens: int = DEFAULT_TOKENS,
                 temperature: float = 1.0, top_k: int | None = None, seed: int = 0,
                 window: int = 32, carry: int = 32, roots: int | None = None,
                 progress: bool = False, command: str = "") -> xr.Dataset:
    """Generate from a checkpoint and write the bank of its sampled positions.

    Parameters
    ----------
    checkpoint : path-like
        A checkpoint folder as :class:`~brwsim.families.Transformer` reads it (GPT-2 or
        Llama architecture, ``config.json`` + ``model.safetensors`` [+ ``tokenizer.json``]),
        or ``"target"`` / ``"draft"``, the shipped byte-level pair.
    prompts : path-like
        A UTF-8 text file with one prompt per line (blank lines skipped), as
        ``capture_hf.py`` reads; with ``roots``, a corpus as the family's ``prompts=`` (a
        shipped name ``"prose"``/``"code"`` or a text file, tokenised as one stream).
    out : path-like, optional
        Write the bank there, atomically (checked writable before the work).
    tokens : int, default 64
        Tokens generated per prompt (or root); one bank row each.
    temperature : float, default 1.0
        T > 0: tokens are sampled from softmax(logits / T), and that is the distribution
        whose log-probabilities are stored.
    top_k : int, optional
        Entries kept per position (at most the vocabulary V). Default: V when
        V <= :data:`EXACT_VOCAB` (the bank is then exact), else 64.
    seed : int, default 0
        Seed of the sampling (and of the roots' draw with ``roots``).
    window, carry : int, default 32, 32
        The context rule of :class:`~brwsim.families.Transformer` (module docstring):
        window + carry must fit the model's positions.
    roots : int, optional
        Generate from this many windows of the corpus ``prompts``, drawn as
        ``transformer(path=checkpoint, prompts=prompts, window=window)`` draws the roots of
        iterations 0 .. roots - 1 with this seed (the roots of a run with that seed).
    progress : bool, default False
        Show a tqdm bar (on stderr) in generated tokens.
    command : str, optional
        Recorded in the ``history`` attribute.

    Returns
    -------
    xarray.Dataset
        The bank (variables of :data:`brwsim.bank.BANK_VARIABLES`), with attributes
        ``vocab``, ``capture_config_json`` (these parameters) and ``input_sha256`` (JSON:
        SHA-256 of the checkpoint's files and of the prompts, by path).

    Raises
    ------
    brwsim.errors.UserError
        For a bad checkpoint (:func:`brwsim.families.checkpoint.load_checkpoint`), a
        missing, empty or undecodable prompts file, a prompt without tokens, or bad
        parameters; nothing is written then.
    """
    tokens = check_int("tokens", tokens, 1, 1 << 24)
    seed = check_int("seed", seed, 0, 2 ** 63 - 1)
    if roots is not None:
        roots = check_int("roots", roots, 1, 1 << 24)
    if out is not None:
        check_output_path(out, "--out")
    checkpoint = os.fspath(checkpoint) if isinstance(checkpoint, os.PathLike) else checkpoint
    params = dict(temperature=temperature, window=window, carry=carry)
    if roots is None:
        model, seqs = _line_prompts(checkpoint, prompts, **params)
    else:
        model = Transformer(checkpoint, prompts=prompts, **params)
        seqs = [model.root_tokens(seed, i) for i in range(roots)]
    vocab = model.vocab_size
    k = (vocab if vocab <= EXACT_VOCAB else min(64, vocab)) if top_k is None else \
        check_int("top_k", top_k, 1, MAX_VOCAB)
    if k > vocab:
        raise UserError(f"top_k must be at most the model's vocabulary of {vocab} tokens, got {k}")
    check_work_size(float(len(seqs)) * tokens * (k + 2) * 8, f"{len(seqs)} x {tokens} positions")
    rng = np.random.default_rng(seed)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(seqs) * tokens, unit="tok", desc="capture", leave=False)
    try:
        parts = [_generate(model, s, tokens, k, rng, bar) for s in seqs]
    finally:
        if bar is not None:
            bar.close()
    inputs = model.input_files()
    if roots is None:
        inputs[str(Path(prompts).resolve())] = file_sha256(prompts)
    config = {"checkpoint": checkpoint, "prompts": os.fspath(prompts), "tokens": tokens,
              "temperature": float(temperature), "top_k": k, "seed": seed, "window": window,
              "carry": carry, "roots": roots}
    ds = import_arrays(np.concatenate([p[0] for p in parts]),
                       np.concatenate([p[1] for p in parts]),
                       np.repeat(np.arange(len(parts), dtype=np.int64), tokens),
                       source=f"capture of {checkpoint}", fmt="brwsim capture", vocab=vocab,
                       command=command or f"brwsim.capture.capture_bank({checkpoint!r}, "
                                          f"{os.fspath(prompts)!r})")
    ds.attrs["capture_config_json"] = json.dumps(config, sort_keys=True)
    ds.attrs["seed_entropy"] = str(seed)            # the sampling seed (an import has none)
    ds.attrs["input_sha256"] = json.dumps(inputs, sort_keys=True)
    ds.attrs["model_type"] = model.model_type
    if out is not None:
        write_netcdf_atomic(ds, out)
    return ds


def capture_roots(family: Transformer, iterations: int, out: str | os.PathLike[str] | None = None,
                  *, seed: int = 0, top_k: int | None = None, progress: bool = False,
                  command: str = "") -> xr.Dataset:
    """The matched i.i.d. view of a contextual run: a bank of the distributions at exactly
    its roots.

    Row i is the distribution at the root of iteration i of ``brwsim run --family FAMILY
    --seed SEED`` (:meth:`Transformer.root_context` under a batched backend, the root's
    window under the numba one), tempered as the family's nodes are; its sampled rank is
    the rank the run's target path takes at that root (the same keyed uniform). So an
    ``empirical(bank=...)`` of this bank and the run agree at P = 1 by construction, and
    any gap at larger P is the context's.

    Parameters
    ----------
    family : Transformer
        The run's environment (temperature > 0).
    iterations : int
        The run's iterations: one row per root.
    out : path-like, optional
        Write the bank there, atomically (checked writable before the work).
    seed : int, default 0
        The run's seed.
    top_k : int, optional
        Entries kept per row (default as :func:`capture_bank`).
    progress : bool, default False
        Show a tqdm bar (on stderr) in roots.
    command : str, optional
        Recorded in the ``history`` attribute.
    """
    if not isinstance(family, Transformer):
        raise UserError(f"capture --family takes a transformer family, got {family!r}")
    if family.temperature == 0:
        raise UserError("temperature=0: every root distribution is a point mass (nothing to bank)")
    iterations = check_int("iterations", iterations, 1, 1 << 24)
    seed = check_int("seed", seed, 0, 2 ** 63 - 1)
    if out is not None:
        check_output_path(out, "--out")
    vocab = family.vocab_size
    k = (vocab if vocab <= EXACT_VOCAB else min(64, vocab)) if top_k is None else \
        check_int("top_k", top_k, 1, MAX_VOCAB)
    if k > vocab:
        raise UserError(f"top_k must be at most the model's vocabulary of {vocab} tokens, got {k}")
    check_work_size(float(iterations) * (k + 2) * 8, f"{iterations} roots")
    lp = np.empty((iterations, k))
    rank = np.empty(iterations, np.int64)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=iterations, unit="root", desc="capture", leave=False)
    try:
        for it in range(iterations):
            if family.batched:            # the rows the run's rounds see (their dtype)
                row = tempered(family.evaluator().start(family.root_context(seed_key(seed), it))[None, :],
                               family.beta)[0]
            else:
                with np.errstate(divide="ignore"):
                    row = np.log(family.probs(family.root_tokens(seed, it)))
            r, order = sampled_rank(row, unit(np.uint64(purpose_key(np.uint64(node_key(seed, it, ())), PATH)), 0))
            rank[it] = min(r, row.size - 1)
            row = row.astype(np.float64)            # normalised again in float64
            top = row[order[0]]
            lp[it] = row[order[:k]] - (top + np.log(np.exp(row - top).sum()))
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    ds = import_arrays(lp, rank, np.arange(iterations, dtype=np.int64),
                       source=f"roots of {family!r}", fmt="brwsim capture --family", vocab=vocab,
                       command=command or f"brwsim.capture.capture_roots({family!r}, {iterations})")
    config = {"family": repr(family), "iterations": iterations, "seed": seed, "top_k": k}
    ds.attrs["capture_config_json"] = json.dumps(config, sort_keys=True)
    ds.attrs["seed_entropy"] = str(seed)
    ds.attrs["input_sha256"] = json.dumps(family.input_files(), sort_keys=True)
    ds.attrs["model_type"] = family.model_type
    if out is not None:
        write_netcdf_atomic(ds, out)
    return ds
