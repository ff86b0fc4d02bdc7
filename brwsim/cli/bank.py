"""The bank subcommands of the CLI: ``brwsim import-logprobs``, ``brwsim capture`` and
``brwsim bank-stats``.

Argument handling and printing only; the work is done by :func:`brwsim.bank.import_logprobs`,
:func:`brwsim.capture.capture_bank` and :func:`brwsim.bankstats.bank_stats`.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any

from brwsim.cli.common import add_command, meaningful_asymptotic, warning_lines
from brwsim.cli.output import add_format, emit, report, stdin_file
from brwsim.errors import UserError

__all__ = ["describe_bank", "entropy_histogram_text", "format_bank_stats", "register"]

#: ``capture``'s defaults, :data:`brwsim.capture.DEFAULT_TOKENS` and ``EXACT_VOCAB``, named
#: here so that parsing the arguments imports no model code (a test keeps them equal).
DEFAULT_TOKENS = 64
EXACT_VOCAB = 1024

#: Default budgets of ``bank-stats``: 1, 2, 4, ..., 4096.
DEFAULT_BUDGETS = "1..4096"
_BAR_WIDTH = 24


def register(subparsers: Any) -> None:
    """Add the ``import-logprobs`` and ``bank-stats`` subcommands to an argparse subparsers
    object (from ``parser.add_subparsers()``)."""
    _register_import(subparsers)
    _register_capture(subparsers)
    _register_stats(subparsers)


def _add_bank_out(parser: argparse.ArgumentParser) -> None:
    """The ``--out BANK.nc`` option of the commands that write a bank."""
    parser.add_argument("--out", required=True, metavar="BANK.nc", help="output netCDF file")


def _register_import(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``import-logprobs`` (its parser is returned)."""
    parser = add_command(
        subparsers, "import-logprobs", _run_import,
        "turn next-token log-probabilities (JSON Lines, .npz) into a bank file",
        description="Read OpenAI-compatible responses with logprobs/top_logprobs or "
                    "llama.cpp /completion responses with n_probs (.jsonl, "
                    ".ndjson, .json) or .npz files with a 'logprobs' array of shape "
                    "(positions, k) and write a bank: sorted top-k probabilities, tail mass, "
                    "sampled rank and bounds of the entropy and second log-moment (nats).")
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help="input files ('-': JSON Lines on standard input)")
    _add_bank_out(parser)
    parser.add_argument("--skip-bad", action="store_true",
                        help="skip bad positions and lines (with a warning) instead of failing")
    parser.add_argument("--top-k", type=int, default=None, metavar="K",
                        help="keep at most K entries per position")
    parser.add_argument("--vocab", type=int, default=None, metavar="V",
                        help="vocabulary size (makes the upper bounds finite)")
    return parser


def _register_capture(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``capture`` (its parser is returned)."""
    parser = add_command(
        subparsers, "capture", _run_capture,
        "generate from a transformer checkpoint (no torch) and write the bank of its positions",
        description="Sample a continuation of every prompt (one per line of PROMPTS, blank "
                    "lines skipped) with brwsim's own forward pass of CHECKPOINT (a Hugging "
                    "Face GPT-2 or Llama-architecture folder, or the shipped 'target' or "
                    "'draft'), and write a bank: at every generated position the top-k "
                    "log-probabilities of the distribution the token was sampled from "
                    "(temperature applied) and the sampled token's rank, with the "
                    "checkpoint's vocabulary size. The rows of experiments/capture_hf.py, "
                    "without torch. Contexts follow transformer(window=W, carry=C): the "
                    "prompt's last W tokens, then each token appended to the KV cache until "
                    "C tokens are carried past the window, then a restart from the last W. "
                    "With --family F --iterations N instead: the matched i.i.d. view of "
                    "`brwsim run --family F --iterations N --seed S`, a bank of the "
                    "distributions at exactly that run's roots (any transformer backend).")
    parser.add_argument("checkpoint", metavar="CHECKPOINT", nargs="?",
                        help="checkpoint folder (config.json, model.safetensors [, "
                             "tokenizer.json]) or 'target' / 'draft'")
    parser.add_argument("prompts", metavar="PROMPTS", nargs="?",
                        help="UTF-8 text file, one prompt per line ('-': standard input; with "
                             "--roots: a corpus, 'prose', 'code' or a text file)")
    parser.add_argument("--family", metavar="F", default=None,
                        help="a transformer family's string form: bank its run's roots "
                             "(instead of CHECKPOINT PROMPTS)")
    parser.add_argument("--iterations", type=int, default=None, metavar="N",
                        help="with --family: the run's iterations, one row per root")
    _add_bank_out(parser)
    parser.add_argument("--tokens", "--max-new-tokens", dest="tokens", type=int,
                        default=DEFAULT_TOKENS, metavar="N",
                        help=f"tokens generated per prompt (default {DEFAULT_TOKENS})")
    parser.add_argument("--temperature", type=float, default=1.0, metavar="T",
                        help="sampling temperature (default 1)")
    parser.add_argument("--top-k", type=int, default=None, metavar="K",
                        help=f"entries kept per position (default: the whole vocabulary "
                             f"when it has at most {EXACT_VOCAB} tokens, an exact bank; "
                             "else 64)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument("--window", type=int, default=32, metavar="W",
                        help="context window in tokens, as transformer(window=) (default 32)")
    parser.add_argument("--carry", type=int, default=32, metavar="C",
                        help="tokens carried past the window before a restart, as "
                             "transformer(carry=) (default 32)")
    parser.add_argument("--roots", type=int, default=None, metavar="R",
                        help="PROMPTS is a corpus: generate from R windows drawn as "
                             "transformer(prompts=PROMPTS) draws a run's roots with --seed")
    parser.add_argument("--quiet", action="store_true",
                        help="no progress bar or compile notice: stderr holds errors and warnings only")
    return parser


def _run_capture(args: argparse.Namespace) -> int:
    """Run ``brwsim capture`` with parsed arguments; print a summary."""
    import time

    from brwsim.capture import capture_bank, capture_roots
    from brwsim.families import parse_family

    start = time.perf_counter()
    if args.family is not None:
        if args.checkpoint is not None or args.iterations is None:
            raise UserError("capture: give CHECKPOINT PROMPTS, or --family F --iterations N")
        ds = capture_roots(parse_family(args.family), args.iterations, args.out, seed=args.seed,
                           top_k=args.top_k, progress=not args.quiet,
                           command=" ".join(["brwsim"] + sys.argv[1:]))
        print(describe_bank(ds, args.out))
        print(f"Banked {ds.sizes['position']} roots in {time.perf_counter() - start:.1f} s.")
        return 0
    if args.checkpoint is None or args.prompts is None or args.iterations is not None:
        raise UserError("capture: give CHECKPOINT PROMPTS, or --family F --iterations N")
    with stdin_file(args.prompts, ".txt") as prompts:
        ds = capture_bank(args.checkpoint, prompts, args.out, tokens=args.tokens,
                          temperature=args.temperature, top_k=args.top_k, seed=args.seed,
                          window=args.window, carry=args.carry, roots=args.roots,
                          progress=not args.quiet,
                          command=" ".join(["brwsim"] + sys.argv[1:]))
    seconds = time.perf_counter() - start
    print(describe_bank(ds, args.out))
    print(f"Generated {ds.sizes['position']} tokens in {seconds:.1f} s "
          f"({ds.sizes['position'] / seconds:.0f} tokens/s, compilation included).")
    return 0


def _mean_text(values: np.ndarray) -> str:
    import numpy as np

    finite = np.isfinite(values)
    return f"{values.mean():.4g}" if finite.all() else "inf"


def describe_bank(ds: xr.Dataset, out: str | os.PathLike[str]) -> str:
    """One-paragraph description of a bank, as printed by ``brwsim import-logprobs``."""
    import numpy as np

    probs = ds["probs"].values
    counts = (probs > 0).sum(axis=1)
    n, k = probs.shape
    files = json.loads(ds.attrs.get("source_files", "[]"))
    rank = ds["sampled_rank"].values
    infinite = int((~np.isfinite(ds["entropy_upper"].values)).sum())
    text = (f"Wrote {out}: {n} positions from {len(files)} file(s) "
            f"({ds.attrs.get('format', 'unknown format')}), "
            f"k = {k}" + (f" (varies {counts.min()}..{counts.max()})"
                          if counts.min() != counts.max() else "")
            + f", mean tail mass {ds['tail_mass'].values.mean():.4g}, sampled rank known at "
            f"{(rank >= 0).sum()} positions. Mean entropy in "
            f"[{ds['entropy_lower'].values.mean():.4g}, {_mean_text(ds['entropy_upper'].values)}]"
            f" nat, mean second log-moment in [{ds['mu2_lower'].values.mean():.4g}, "
            f"{_mean_text(ds['mu2_upper'].values)}] nat^2.")
    if infinite:
        text += (f" Upper bounds are infinite at {infinite} positions with tail mass: "
                 "pass --vocab to bound them.")
    skipped = int(ds.attrs.get("skipped_positions", 0)) + int(ds.attrs.get("skipped_lines", 0))
    if skipped:
        text += (f" Skipped {ds.attrs['skipped_positions']} bad positions and "
                 f"{ds.attrs['skipped_lines']} bad lines or files.")
    return text


def _run_import(args: argparse.Namespace) -> int:
    """Run ``brwsim import-logprobs`` with parsed arguments; print a summary.

    Returns
    -------
    int
        0 on success (errors raise :class:`~brwsim.errors.UserError`).
    """
    from brwsim.bank import BadInputWarning, import_logprobs

    if args.files.count("-") > 1:
        raise UserError("import-logprobs: '-' (standard input) can be given once")
    with warning_lines(BadInputWarning), contextlib.ExitStack() as stack:
        files = [stack.enter_context(stdin_file(f, ".jsonl")) for f in args.files]
        ds = import_logprobs(files, args.out, skip_bad=args.skip_bad, top_k=args.top_k,
                             vocab=args.vocab, command=" ".join(["brwsim"] + sys.argv[1:]))
    print(describe_bank(ds, args.out))
    return 0


def _mean(values: np.ndarray) -> str:
    import numpy as np

    return f"{values.mean():.6g}" if np.isfinite(values).all() else "inf"


def _bar(count: int, top: int) -> str:
    return "#" * (round(_BAR_WIDTH * count / top) if top else 0)


def entropy_histogram_text(stats: BankStats, bins: int = 10) -> str:
    """Text histogram of the per-position entropy bounds (upper column only when finite)."""
    import numpy as np
    from brwsim.bankstats import histogram_bins

    edges = histogram_bins(stats, bins)
    lower, _ = np.histogram(stats.entropy_lower, edges)
    upper_finite = np.isfinite(stats.entropy_upper)
    columns = [("lower bound", lower)]
    if upper_finite.all():
        columns.append(("upper bound", np.histogram(stats.entropy_upper, edges)[0]))
    top = max(int(c.max()) for _, c in columns)
    digits = len(str(top))
    labels = [f"[{a:.3g}, {b:.3g}{']' if i == bins - 1 else ')'}"
              for i, (a, b) in enumerate(itertools.pairwise(edges))]
    width = max(len(x) for x in labels)
    head = "  ".join([" " * width] + [f"{name:<{digits + 1 + _BAR_WIDTH}}" for name, _ in columns])
    lines = [f"Entropy histogram (nats; {stats.positions} positions):", head.rstrip()]
    for i, label in enumerate(labels):
        cells = [f"{int(c[i]):>{digits}} {_bar(int(c[i]), top):<{_BAR_WIDTH}}" for _, c in columns]
        lines.append("  ".join([label.ljust(width)] + cells).rstrip())
    if not upper_finite.all():
        lines.append(f"(upper bounds are infinite at {int((~upper_finite).sum())} positions "
                     "with tail mass: pass --vocab V to bound them)")
    return "\n".join(lines)


def format_bank_stats(stats: BankStats, name: str = "bank") -> str:
    """The report printed by ``brwsim bank-stats``."""
    import numpy as np
    from brwsim.textform import format_table

    k_text = f"{stats.k}" + (f" (varies {stats.k_min}..{stats.k})" if stats.k_min != stats.k else "")
    vocab = str(stats.vocab) if stats.vocab is not None else "unknown"
    lines = [
        (f"{name}: {stats.positions} positions, k = {k_text}, mean tail mass "
         f"{stats.tail_mass:.6g}, vocab {vocab}. Natural logarithms throughout."),
        ("Empirical family (stored top-k rows; the tail mass is outside every tree): "
         f"mu = {stats.mu:.6g} nats, mu2 = {stats.mu2:.6g} nats^2, "
         f"E[H^2] = {stats.h2:.6g} nats^2"),
        ("Full distributions (mean of per-position bounds): entropy in "
         f"[{_mean(stats.entropy_lower)}, {_mean(stats.entropy_upper)}] nats, "
         f"mu2 in [{_mean(stats.mu2_lower)}, {_mean(stats.mu2_upper)}] nats^2"),
        "",
        entropy_histogram_text(stats),
        "",
        ("Accepted draft tokens X of Empirical(bank) per budget P (tau = X + 1 tokens per "
         "call). Empirical(bank) draws every node's distribution i.i.d. from the stored rows, "
         "so its upper bound is proven for that i.i.d. model, not for the model that wrote "
         "the bank. "
         f"Exact E[X] at P = 1 (E[max q] over the rows): {stats.top1_mean:.4f}"),
    ]

    def fmt(v: float) -> str:
        return "n/a" if np.isnan(v) else f"{v:.4f}"

    asym = meaningful_asymptotic(stats.asymptotic, stats.mu, stats.budgets)
    rows = [[str(p), fmt(u), fmt(x), fmt(x + 1), fmt(a), fmt(b)] for p, u, x, a, b in
            zip(stats.budgets, stats.upper_bound, stats.prediction, asym, stats.paper_bound)]
    lines.append(format_table(rows, ["P", "upper bound", "prediction", "tau pred.",
                                     "asymptotic", "paper bound"]))
    lines.append("upper bound: proven for the i.i.d. model of the rows; prediction: the renewal "
                 "prediction of E[X]; asymptotic: for large P only (n/a where mu P < 1 or it "
                 "is negative)")
    return "\n".join(lines)


def _register_stats(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``bank-stats`` (its parser is returned)."""
    parser = add_command(
        subparsers, "bank-stats", _run_stats,
        "moments, entropy bounds and histogram, predicted E[X] of a bank",
        description="Summarise a bank written by 'brwsim import-logprobs': mu and mu2 of the "
                    "Empirical family over the stored top-k rows, the bounds of the full "
                    "distributions' entropy and second log-moment, an entropy histogram and "
                    "the renewal prediction of E[X] and the paper's bound per budget (nats).")
    parser.add_argument("bank", metavar="BANK.nc", help="bank netCDF file")
    parser.add_argument("--budgets", default=DEFAULT_BUDGETS,
                        help="comma list and ranges: '1,4,16', '1..4096' (powers of 2), "
                             "'1-8' (default 1..4096)")
    parser.add_argument("--vocab", type=int, default=None, metavar="V",
                        help="vocabulary size: recompute the bounds with it (finite uppers)")
    parser.add_argument("--plot", default=None, metavar="FIG.png",
                        help="also write a histogram of per-position entropy")
    add_format(parser)
    return parser


def _run_stats(args: argparse.Namespace) -> int:
    """Run ``brwsim bank-stats`` with parsed arguments; print the report."""
    from brwsim.bankstats import bank_stats, plot_entropy_histogram
    from brwsim.textform import parse_budgets
    from brwsim.validate import check_output_path

    if args.plot:
        check_output_path(args.plot, "--plot")     # before the work, as every output
    stats = bank_stats(args.bank, parse_budgets(args.budgets), vocab=args.vocab)
    if args.format == "table":
        print(format_bank_stats(stats, args.bank))
    else:
        emit(args.format, bank_stats_report(stats, args.bank))
    if args.plot:
        plot_entropy_histogram(stats, args.plot, title=Path(args.bank).name)
        print(f"wrote {args.plot}", file=sys.stdout if args.format == "table" else sys.stderr)
    return 0


def bank_stats_report(stats: BankStats, name: str) -> dict:
    """``bank-stats``'s report (:func:`brwsim.cli.output.report`): one row per budget."""
    import numpy as np
    from brwsim.bankstats import histogram_bins

    rows = [{"budget": int(p), "upper_bound": float(u), "prediction": float(x),
             "tokens_per_call_prediction": float(x) + 1, "prediction_asymptotic": float(a),
             "paper_bound": float(b)}
            for p, u, x, a, b in zip(stats.budgets, stats.upper_bound, stats.prediction,
                                     meaningful_asymptotic(stats.asymptotic, stats.mu, stats.budgets),
                                     stats.paper_bound)]
    edges = histogram_bins(stats, 10)
    units = {"budget": "draft tokens (tree nodes, root excluded)",
             "upper_bound": "tokens (proven for the i.i.d. model of the rows)", "prediction": "tokens",
             "tokens_per_call_prediction": "tokens per target call",
             "prediction_asymptotic": "tokens (null where meaningless)", "paper_bound": "tokens",
             "mu": "nats", "mu2": "nats^2", "h2": "nats^2", "entropy": "nats", "tail_mass": "1",
             "top1_mean": "tokens (exact E[X] at P = 1)"}
    return report("bank-stats", rows, units, bank=str(name), positions=stats.positions,
                  k=stats.k, k_min=stats.k_min, vocab=stats.vocab, tail_mass=stats.tail_mass,
                  mu=stats.mu, mu2=stats.mu2, h2=stats.h2, top1_mean=stats.top1_mean,
                  entropy_lower_mean=float(np.mean(stats.entropy_lower)),
                  entropy_upper_mean=float(np.mean(stats.entropy_upper)),
                  mu2_lower_mean=float(np.mean(stats.mu2_lower)),
                  mu2_upper_mean=float(np.mean(stats.mu2_upper)),
                  entropy_histogram={"edges": edges,
                                     "lower": np.histogram(stats.entropy_lower, edges)[0],
                                     "upper": (np.histogram(stats.entropy_upper, edges)[0]
                                               if np.isfinite(stats.entropy_upper).all() else None)})
