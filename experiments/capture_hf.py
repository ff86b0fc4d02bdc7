r"""Capture a Hugging Face causal LM's next-token distributions into a brwsim bank.

For every prompt (one per line of a text file) the model generates up to
``--max-new-tokens`` tokens by sampling at ``--temperature`` (top-k sampling disabled,
``--top-p`` 1 by default); at each generated position the script keeps the ``--top-k``
largest log-probabilities of the distribution the token was sampled from (the processed
``scores`` of ``generate``: temperature and any processor of the model's generation config
applied, renormalised by ``log_softmax``) and the rank of the sampled token in that
distribution. They are saved to an ``.npz`` file (``logprobs``, ``sampled_rank``,
``sequence``) that :func:`brwsim.bank.import_logprobs` turns into the bank ``--out``,
with the vocabulary size taken from the model so that the entropy bounds are finite.

Usage::

    python experiments/capture_hf.py MODEL_DIR prompts.txt --out data/bank_hf.nc \
        [--temperature 1.0] [--max-new-tokens 128] [--top-k 64] [--top-p 1.0] \
        [--seed 0] [--device cpu] [--chat-template] [--npz data/bank_hf.npz]

``MODEL_DIR`` is a local folder (or a model already in the local Hugging Face cache): the
script never downloads. It needs the optional dependencies ``pip install -e '.[hf]'`` in the brwsim checkout
(torch and transformers) and exits with one clear message when they are missing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from brwsim.errors import UserError
from brwsim.io import atomic_path, write_netcdf_atomic
from brwsim.bank import import_logprobs
from brwsim.cli.bank import describe_bank

__all__ = ["main", "capture", "build_parser"]

PROG = "capture_hf"


def build_parser() -> argparse.ArgumentParser:
    """Command-line parser of the script."""
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="local folder of a Hugging Face causal LM")
    parser.add_argument("prompts", help="text file with one prompt per line")
    parser.add_argument("--out", required=True, help="bank netCDF file to write")
    parser.add_argument("--npz", default=None,
                        help="intermediate .npz file (default: --out with suffix .npz)")
    parser.add_argument("--temperature", type=float, default=1.0,
                        help="sampling temperature, > 0 (default 1)")
    parser.add_argument("--top-p", type=float, default=1.0,
                        help="nucleus sampling threshold (default 1: off)")
    parser.add_argument("--top-k", type=int, default=64,
                        help="log-probabilities kept per position (default 64)")
    parser.add_argument("--max-new-tokens", type=int, default=128,
                        help="tokens generated per prompt at most (default 128)")
    parser.add_argument("--seed", type=int, default=0, help="torch seed (default 0)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--chat-template", action="store_true",
                        help="wrap each prompt in the tokenizer's chat template")
    return parser


def _import_hf() -> tuple[ModuleType, ModuleType]:
    """Import torch and transformers, or raise UserError naming the missing extra."""
    try:
        import torch
        import transformers
    except ImportError as exc:
        raise UserError("this script needs the optional dependencies torch and "
                        "transformers: pip install -e '.[hf]' in the brwsim checkout "
                        f"(import failed: {exc})") from None
    return torch, transformers


def _check_args(args: argparse.Namespace) -> list[str]:
    """Validate the numeric options and read the prompts."""
    if not args.temperature > 0:
        raise UserError(f"--temperature must be > 0, got {args.temperature}")
    if not 0 < args.top_p <= 1:
        raise UserError(f"--top-p must be in (0, 1], got {args.top_p}")
    for name in ("top_k", "max_new_tokens"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be >= 1, "
                            f"got {getattr(args, name)}")
    path = Path(args.prompts)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    prompts = [line.rstrip("\n") for line in path.read_text(encoding="utf-8").splitlines()]
    prompts = [p for p in prompts if p.strip()]
    if not prompts:
        raise UserError(f"{path}:1: no prompts (expected one prompt per line)")
    return prompts


def _load(transformers: ModuleType, model_dir: str, device: str) -> tuple[Any, Any]:
    """Load tokenizer and model from local files only."""
    looks_like_path = model_dir.startswith((".", "/", "~")) or model_dir.count("/") > 1
    if looks_like_path and not Path(model_dir).expanduser().is_dir():
        raise UserError(f"{model_dir}: no such folder (the model must be available locally)")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir,
                                                                  local_files_only=True)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{model_dir}: cannot load a local causal LM and tokenizer "
                        f"({first})") from None
    return tokenizer, model.to(device).eval()


def _encode(tokenizer: Any, prompt: str, chat: bool, device: str) -> Any:
    if chat:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                            add_generation_prompt=True, return_tensors="pt",
                                            return_dict=True)
    else:
        ids = tokenizer(prompt, return_tensors="pt")
    return {key: value.to(device) for key, value in ids.items()}


def _positions(torch: ModuleType, scores: tuple[Any, ...], tokens: Any,
               k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k log-probabilities and sampled ranks of one generation."""
    logp = torch.log_softmax(torch.stack(scores, dim=0)[:, 0, :].float(), dim=-1)
    top = torch.topk(logp, k=min(k, logp.shape[-1]), dim=-1).values
    sampled = logp.gather(1, tokens[:, None])
    rank = (logp > sampled).sum(dim=-1)
    return top.cpu().numpy(), rank.cpu().numpy().astype(np.int64)


def capture(args: argparse.Namespace) -> tuple[dict[str, np.ndarray], int]:
    """Generate from every prompt and collect the arrays of the .npz file.

    Returns
    -------
    arrays : dict of str to numpy.ndarray
        ``logprobs`` (positions, k) float32 sorted descending, ``sampled_rank`` and
        ``sequence`` (positions,) int64.
    vocab : int
        Size of the model's output distribution.
    """
    prompts = _check_args(args)
    torch, transformers = _import_hf()
    tokenizer, model = _load(transformers, args.model, args.device)
    torch.manual_seed(args.seed)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None \
        else tokenizer.eos_token_id
    chunks: list[tuple[np.ndarray, np.ndarray]] = []
    vocab = 0
    with torch.no_grad():
        for prompt in prompts:
            enc = _encode(tokenizer, prompt, args.chat_template, args.device)
            out = model.generate(**enc, do_sample=True, temperature=args.temperature,
                                 top_k=0, top_p=args.top_p,
                                 max_new_tokens=args.max_new_tokens, output_scores=True,
                                 return_dict_in_generate=True, pad_token_id=pad)
            tokens = out.sequences[0, enc["input_ids"].shape[1]:][:len(out.scores)]
            vocab = int(out.scores[0].shape[-1])
            chunks.append(_positions(torch, out.scores, tokens, args.top_k))
    return {
        "logprobs": np.concatenate([c[0] for c in chunks]).astype(np.float32),
        "sampled_rank": np.concatenate([c[1] for c in chunks]),
        "sequence": np.concatenate([np.full(len(c[1]), i, dtype=np.int64)
                                    for i, c in enumerate(chunks)]),
    }, vocab


def _save_npz_atomic(arrays: dict[str, np.ndarray], path: Path) -> None:
    with atomic_path(path, suffix=".npz") as tmp:      # .npz: np.savez keeps the name as is
        np.savez(tmp, **arrays)


def main(argv: list[str] | None = None) -> int:
    """Run the script; return the exit status (2 on a user error)."""
    args = build_parser().parse_args(argv)
    try:
        arrays, vocab = capture(args)
        npz = Path(args.npz) if args.npz else Path(args.out).with_suffix(".npz")
        _save_npz_atomic(arrays, npz)
        command = " ".join([PROG] + (sys.argv[1:] if argv is None else list(argv)))
        ds = import_logprobs([npz], None, vocab=vocab, command=command)
        ds.attrs["capture_config_json"] = json.dumps(
            {"model": args.model, "prompts": args.prompts, "temperature": args.temperature,
             "top_p": args.top_p, "top_k": args.top_k, "max_new_tokens": args.max_new_tokens,
             "seed": args.seed, "chat_template": args.chat_template}, sort_keys=True)
        write_netcdf_atomic(ds, args.out)
    except UserError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    print(describe_bank(ds, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
