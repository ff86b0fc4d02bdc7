"""Parse family strings such as ``dirichlet(alpha=0.05, vocab=200)`` (never evaluated).

Grammar::

    value := call | list | number | quoted string | bare word
    call  := NAME "(" [arg ("," arg)*] ")"        arg := NAME "=" value | value
    list  := "[" [value ("," value)*] "]"

A call names a family (case-insensitive) or, inside ``entropytarget(entropies=...)``, a
continuous ``scipy.stats`` distribution, e.g. ``lognorm(s=0.5, scale=1.5)``; the prefix
``stats.`` (the form families print) names one whose name is also a family's
(``stats.uniform(loc=0.2, scale=0.25)``). A bare word (``bank.nc``) is a string.

Limits: calls and lists nest at most :data:`brwsim.validate.MAX_NESTING` (32) levels; a
keyword may be given once per call; error messages echo at most 120 characters of the text.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from brwsim.errors import UserError
from brwsim.families.base import REGISTRY, Family
from brwsim.validate import MAX_NESTING, echo

__all__ = ["FAMILIES", "DEFAULT_FAMILY", "parse_family"]

#: Every registered family by name: the live :data:`brwsim.families.base.REGISTRY` (a family
#: class defined anywhere, e.g. in a test module, is reachable as soon as it is defined).
FAMILIES: dict[str, type[Family]] = REGISTRY

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
    end = len(text.rstrip())        # computed once: the loop stays linear in the text
    while pos < end:
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise UserError(f"cannot parse {what} {echo(text)} at character {pos}")
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
        if not isinstance(text, str):
            raise UserError(f"a {what} must be given as a string, got {echo(text)}")
        self.toks = _tokens(text, what)
        self.i = 0
        self.depth = 0

    def _peek(self) -> tuple[str, str, int] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def _fail(self, what: str) -> UserError:
        tok = self._peek()
        where = f"at character {tok[2]}" if tok else "at the end"
        return UserError(f"cannot parse {self.what} {echo(self.text)}: expected {what} {where}")

    def _expect(self, punct: str) -> None:
        tok = self._peek()
        if tok is None or tok[0] != "punct" or tok[1] != punct:
            raise self._fail(f"{punct!r}")
        self.i += 1

    def value(self) -> Any:
        tok = self._peek()
        if tok is None:
            raise self._fail("a value")
        kind, text, pos = tok
        if kind == "num":
            self.i += 1
            if re.fullmatch(r"[-+]?\d+", text):
                if len(text) > 40:
                    raise UserError(f"{self.what}: integer {echo(text, 40)} has more than 40 digits")
                return int(text)
            return float(text)
        if kind == "str":
            self.i += 1
            return text[1:-1]
        if kind == "punct" and text == "[":
            self.i += 1
            self._enter(pos)
            items = []
            if not self._at("]"):
                items.append(self.value())
                while self._at(","):
                    self.i += 1
                    items.append(self.value())
            self._expect("]")
            self.depth -= 1
            return items
        if kind == "word":
            self.i += 1
            if self._at("("):
                self._enter(pos)
                out = self.call(text)
                self.depth -= 1
                return out
            return text
        raise self._fail("a value")

    def _enter(self, pos: int) -> None:
        """One more level of calls and lists; refused beyond :data:`MAX_NESTING`."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise UserError(f"cannot parse {self.what}: calls and lists nested deeper than "
                            f"{MAX_NESTING} levels (at character {pos})")

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
                    if tok[1] in kwargs:
                        raise UserError(f"{name}(): keyword {tok[1]!r} given twice "
                                        f"(at character {tok[2]})")
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
    from scipy import stats  # only here: it costs 0.3-0.8 s to import

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
        raise UserError(f"{echo(text)} is not a family; known: {', '.join(sorted(FAMILIES))}")
    return out
