"""Parse family strings such as ``dirichlet(alpha=0.05, vocab=200)`` (never evaluated).

Grammar::

    value := call | list | number | quoted string | bare word
    call  := NAME "(" [arg ("," arg)*] ")"        arg := NAME "=" value | value
    list  := "[" [value ("," value)*] "]"

A call names a family (case-insensitive) or, inside ``entropytarget(entropies=...)``, a
continuous ``scipy.stats`` distribution, e.g. ``lognorm(s=0.5, scale=1.5)``; the prefix
``stats.`` (the form families print) names one whose name is also a family's
(``stats.uniform(loc=0.2, scale=0.25)``). A bare word (``bank.nc``) is a string.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from scipy import stats

from brwsim.errors import UserError
from brwsim.families.base import Family
from brwsim.families.charlstm import CharLSTM
from brwsim.families.combinators import Mixture, Tempered
from brwsim.families.contextual import CorrelatedEntropy, DepthDrift, MarkovRegime
from brwsim.families.empirical import Empirical, EntropyTarget
from brwsim.families.ngram import NGram
from brwsim.families.parametric import Dirichlet, Fixed, Geometric, Peaked, SoftmaxNormal, Uniform, Zipf

__all__ = ["FAMILIES", "DEFAULT_FAMILY", "parse_family"]

FAMILIES: dict[str, type[Family]] = {
    cls.name: cls for cls in (Uniform, Fixed, Geometric, Zipf, Dirichlet, SoftmaxNormal, Peaked,
                              Mixture, EntropyTarget, Tempered, Empirical, MarkovRegime, DepthDrift,
                              CorrelatedEntropy, NGram, CharLSTM)
}

#: The default of ``brwsim run``: an LLM-like mixture of near-certain and diffuse positions.
DEFAULT_FAMILY = ("mixture(families=[peaked(a=4, b=0.5, s=1.1, vocab=32000), "
                  "zipf(s=1.1, vocab=32000, spread=0.3)], weights=[0.75, 0.25])")

_TOKEN = re.compile(r"""\s*(?:(?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w./]))
                     |(?P<str>'[^']*'|"[^"]*")
                     |(?P<punct>[()\[\],=])
                     |(?P<word>[^\s()\[\],='"]+))""", re.VERBOSE)


def _tokens(text: str, what: str = "family") -> list[tuple[str, str, int]]:
    out = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise UserError(f"cannot parse {what} {text!r} at character {pos}")
        kind = m.lastgroup
        out.append((kind, m.group(kind), m.start(kind)))
        pos = m.end()
    return out


class _Parser:
    """Recursive-descent parser of the grammar above; ``build(name, args, kwargs)`` makes calls."""

    def __init__(self, text: str, build=None, what: str = "family") -> None:
        self.text = text
        self.what = what
        self.build = build or _build
        self.toks = _tokens(text, what)
        self.i = 0

    def _peek(self) -> tuple[str, str, int] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def _fail(self, what: str) -> UserError:
        tok = self._peek()
        where = f"at character {tok[2]}" if tok else "at the end"
        return UserError(f"cannot parse {self.what} {self.text!r}: expected {what} {where}")

    def _expect(self, punct: str) -> None:
        tok = self._peek()
        if tok is None or tok[0] != "punct" or tok[1] != punct:
            raise self._fail(f"{punct!r}")
        self.i += 1

    def value(self) -> Any:
        tok = self._peek()
        if tok is None:
            raise self._fail("a value")
        kind, text, _ = tok
        if kind == "num":
            self.i += 1
            num = float(text)
            return int(num) if re.fullmatch(r"[-+]?\d+", text) else num
        if kind == "str":
            self.i += 1
            return text[1:-1]
        if kind == "punct" and text == "[":
            self.i += 1
            items = []
            if not self._at("]"):
                items.append(self.value())
                while self._at(","):
                    self.i += 1
                    items.append(self.value())
            self._expect("]")
            return items
        if kind == "word":
            self.i += 1
            if self._at("("):
                return self.call(text)
            return text
        raise self._fail("a value")

    def _at(self, punct: str) -> bool:
        tok = self._peek()
        return tok is not None and tok[0] == "punct" and tok[1] == punct

    def call(self, name: str) -> Any:
        self._expect("(")
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        if not self._at(")"):
            while True:
                tok = self._peek()
                nxt = self.toks[self.i + 1] if self.i + 1 < len(self.toks) else None
                if tok and tok[0] == "word" and nxt and nxt[0] == "punct" and nxt[1] == "=":
                    self.i += 2
                    kwargs[tok[1]] = self.value()
                else:
                    if kwargs:
                        raise self._fail("a keyword argument (positional after keyword)")
                    args.append(self.value())
                if not self._at(","):
                    break
                self.i += 1
        self._expect(")")
        return self.build(name, args, kwargs)


def bind_call(cls: type, key: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """``cls(*args, **kwargs)``, with a wrong argument reported as one :class:`UserError` line."""
    try:
        inspect.signature(cls.__init__).bind(None, *args, **kwargs)
    except TypeError as exc:
        params = ", ".join(list(inspect.signature(cls.__init__).parameters)[1:])
        raise UserError(f"{key}({params}): {exc}") from None
    return cls(*args, **kwargs)


def parse_text(text: str, build, what: str) -> Any:
    """Parse one value of the grammar with ``build`` making calls; nothing may follow it."""
    parser = _Parser(text, build, what)
    out = parser.value()
    if parser._peek() is not None:
        raise parser._fail(f"the end of the {what}")
    return out


def _build(name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    key = name.lower()
    if key in FAMILIES:
        return bind_call(FAMILIES[key], key, args, kwargs)
    key = key.removeprefix("scipy.").removeprefix("stats.")   # stats.uniform: not the family
    dist = getattr(stats, key, None)
    if isinstance(dist, stats.rv_continuous):
        try:
            return dist(*args, **kwargs)
        except (TypeError, ValueError) as exc:
            raise UserError(f"scipy.stats.{key}: {exc}") from None
    raise UserError(f"unknown family {name!r}; known: {', '.join(sorted(FAMILIES))}")


def parse_family(text: str) -> Family:
    """Build a family from its string form.

    Parameters
    ----------
    text : str
        E.g. ``"zipf(s=1.5, vocab=128000, spread=0.4)"``.

    Returns
    -------
    Family

    Raises
    ------
    brwsim.errors.UserError
        On a syntax error, an unknown name, a wrong argument or an invalid value.
    """
    out = parse_text(text, _build, "family")
    if not isinstance(out, Family):
        raise UserError(f"{text!r} is not a family; known: {', '.join(sorted(FAMILIES))}")
    return out
