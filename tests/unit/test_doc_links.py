"""Every relative link of README.md and docs/*.md names a file or folder that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")


def links(path: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    return [a or b for a, b in _LINK.findall(text)]


def test_the_documents_have_links():
    assert sum(len(links(p)) for p in DOCS) > 10


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_relative_links_resolve(doc):
    broken = []
    for target in links(doc):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue                       # a URL or an anchor of the same page
        file = target.split("#", 1)[0]
        if not (doc.parent / file).exists():
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)}: broken links {broken}"
