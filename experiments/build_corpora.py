"""Build the two shipped NGram corpora (package data in brwsim/data/corpora) from the local Python.

* ``prose.txt``: English prose, the Python documentation's topic pages
  (``pydoc_data.topics.topics``, the text ``help()`` shows), whole topics in sorted key
  order, joined by a blank line, up to 300,000 characters.
* ``code.txt``: Python source, a fixed list of pure-Python standard library modules,
  concatenated in list order, each preceded by a ``# file: <path>`` comment line.

Both are distributed under the Python Software Foundation License Version 2, copied to
``brwsim/data/corpora/LICENSE-PSF.txt``. The output depends on the Python version (recorded in
``brwsim/data/corpora/README.md``); the committed files were built with the version named there.

Usage: ``python experiments/build_corpora.py [--out brwsim/data/corpora]``
"""

from __future__ import annotations

import argparse
import hashlib
import pydoc_data.topics
import shutil
import sys
import sysconfig
from pathlib import Path

PROSE_LIMIT = 300_000

#: Pure-Python stdlib modules of the code corpus, relative to the stdlib directory.
CODE_FILES = [
    "textwrap.py", "json/__init__.py", "json/decoder.py", "json/encoder.py", "json/scanner.py",
    "argparse.py", "string.py", "heapq.py", "bisect.py", "fractions.py", "functools.py",
    "contextlib.py", "graphlib.py", "copy.py", "reprlib.py", "colorsys.py",
]


def build_prose() -> str:
    topics = pydoc_data.topics.topics
    parts: list[str] = []
    size = 0
    for key in sorted(topics):
        text = topics[key].strip("\n")
        if size + len(text) + 2 > PROSE_LIMIT:
            break
        parts.append(text)
        size += len(text) + 2
    return "\n\n".join(parts) + "\n"


def build_code(stdlib: Path) -> str:
    parts = []
    for name in CODE_FILES:
        src = (stdlib / name).read_text(encoding="utf-8")
        parts.append(f"# file: {name}\n{src.rstrip()}\n")
    return "\n".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "brwsim" / "data"
                                         / "corpora"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name, text in (("prose.txt", build_prose()), ("code.txt", build_code(stdlib))):
        (out / name).write_text(text, encoding="utf-8")
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
        print(f"{name}: {len(text)} characters, {len(set(text))} distinct, sha256 {digest}...")
    licence = stdlib / "LICENSE.txt"
    shutil.copyfile(licence, out / "LICENSE-PSF.txt")
    print(f"licence: {licence}; Python {sys.version.split()[0]}")


if __name__ == "__main__":
    main()
