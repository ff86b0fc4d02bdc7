"""The family interface: what every next-token distribution law provides.

A :class:`Family` has three faces:

* ``components(beta)``: its numba form, a list of :class:`Component` (one unless it is a
  mixture), compiled by :func:`compile_spec` into the flat arrays the kernels read;
  ``beta = 1 / T`` tempers every node distribution (q**beta renormalised).
* ``sample_full(rng, beta)``: an exact, plain numpy sampler of one whole distribution,
  sorted descending: the reference the lazy kernels are tested against, the engine of
  Monte Carlo moments and of the heapq baseline.
* ``moments()``: mu = E[H(q)] and mu2 = E[sum q (log q)**2] in nats, exact where a closed
  form exists, otherwise Monte Carlo with standard errors.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, ClassVar

import numpy as np

from brwsim.io import file_sha256
from brwsim.kernels.spec import Component, Spec, compile_spec
from brwsim.registry import PARAM_KINDS, register
from brwsim.theory.laws import Moments
from brwsim.theory.sampled import SampledLaw, current_law_seed
from brwsim.validate import check_int, check_positive  # noqa: F401 - re-exported

__all__ = ["Family", "Component", "Spec", "Moments", "compile_spec", "distribution_moments",
           "REGISTRY", "PARAM_KINDS", "check_int", "check_positive", "tempered_listed",
           "log_or_minf"]

#: Every family class by its string name, filled by :meth:`Family.__init_subclass__`.
REGISTRY: dict[str, type["Family"]] = {}


def tempered_listed(q: np.ndarray, beta: float) -> np.ndarray:
    """Temper listed probabilities ``q`` (sum <= 1) with the missing mass as one token.

    Returns q**beta / Z sorted descending, Z = sum q**beta + (1 - sum q)**beta, so the
    missing mass stays a token outside any tree.
    """
    q = np.sort(np.asarray(q, dtype=np.float64))[::-1]
    if beta == 1.0:
        return q
    tail = max(0.0, 1.0 - q.sum())
    w = q ** beta
    z = w.sum() + (tail ** beta if tail > 1e-15 else 0.0)
    return w / z


def log_or_minf(q: np.ndarray) -> np.ndarray:
    """``log(q)`` with ``-inf`` (no warning) where q is 0."""
    with np.errstate(divide="ignore"):
        return np.log(q)

def distribution_moments(q: np.ndarray) -> tuple[float, float]:
    """Entropy and second log-moment, (-sum q log q, sum q (log q)**2), over q > 0."""
    q = q[q > 0]
    lq = np.log(q)
    return float(-(q * lq).sum()), float((q * lq * lq).sum())


class Family:
    """Base class of next-token distribution families.

    A family is one class. It declares, as class attributes,

    * ``name``: its lower-case string name (``dirichlet``); defining the class registers
      it in :data:`REGISTRY`, which is what :func:`brwsim.parse_family`, sweep configs, the
      CLI and the tests' family table read, so nothing else needs editing;
    * ``param_kinds``: each constructor parameter's kind (:data:`PARAM_KINDS`; parameters
      not listed are ``scalar``);
    * ``example``: the string form of a small instance for the tests' family table;
    * ``iid``: False for context-dependent environments (their spine law is a marginal).

    and implements :meth:`params`, :meth:`components`, :meth:`sample_full`,
    :meth:`spine_law` (exact where a closed form, atoms or quadrature exist; the default
    samples it in numba) and :meth:`moments`.
    """

    name: ClassVar[str] = "family"
    param_kinds: ClassVar[dict[str, str]] = {}
    example: ClassVar[str | None] = None
    iid: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        register(REGISTRY, cls, "family")

    @classmethod
    def param_kind(cls, key: str) -> str:
        """The declared kind of parameter ``key`` (``scalar`` when not declared)."""
        return cls.param_kinds.get(key, "scalar")

    def params(self) -> dict[str, Any]:
        """Parameters as a JSON-serialisable dict (the CLI string form's arguments)."""
        raise NotImplementedError

    def components(self, beta: float = 1.0) -> list[Component]:
        """Numba components of the family tempered by ``beta`` (= 1 / temperature)."""
        raise NotImplementedError

    def sample_full(self, rng: np.random.Generator, beta: float = 1.0) -> np.ndarray:
        """One whole next-token distribution, exact, sorted descending.

        The entries may sum to less than 1 (mass outside any tree) and infinite
        vocabularies are truncated where the remaining mass is below 1e-17.
        """
        raise NotImplementedError

    def context_program(self, beta: float = 1.0) -> np.ndarray:
        """The context program of the kernels (``[0]``: i.i.d. nodes)."""
        return np.zeros(1)

    def spec(self) -> Spec:
        """The compiled numba form of this family."""
        return compile_spec(self.components(1.0), self.context_program(1.0))

    def spine_law(self):
        """The law of one spine step ``-log q_I``, ``I ~ q`` (:mod:`brwsim.theory.laws`).

        Families with a closed form, atoms or a quadrature override this; the default
        samples whole distributions inside numba with the family's own kernels
        (:class:`~brwsim.theory.sampled.SampledLaw`), so predictions carry a standard error.
        :func:`brwsim.theory.spine_steps` computes it once per instance.
        """
        return SampledLaw(self)

    def context_spine(self):
        """The spine of a context-dependent environment, for its proven bound, or None.

        None for i.i.d. families (their :meth:`spine_law` is the whole story) and for
        context-dependent families without a proven bound. Those with one return a
        :class:`~brwsim.theory.contextual.ContextSpine` (``docs/theory.md``, Section 7).
        """
        return None

    def top1_mean(self) -> float | None:
        """E[max_i q_i], the exact E[X] at budget P = 1, where a closed form exists (else None)."""
        return None

    def cached_spine_law(self):
        """:meth:`spine_law`, computed once per instance and law seed (the seed is
        :func:`brwsim.theory.sampled.law_seed`'s)."""
        seed = current_law_seed()
        return self.memoized("spine_law" if seed == 0 else f"spine_law:{seed}", self.spine_law)

    def memoized(self, name: Hashable, compute: Callable[[], Any]) -> Any:
        """``compute()``, computed once per instance under ``name`` (families never change
        after construction); the memo is not pickled, so workers recompute it."""
        memo = self.__dict__.setdefault("_brwsim_memo", {})
        if name not in memo:
            memo[name] = compute()
        return memo[name]

    def tempered_family(self, beta: float) -> "Family | None":
        """An equivalent family of the tempered law ``q**beta`` renormalised, or None.

        Used by :class:`~brwsim.families.Tempered` to inherit an exact spine law and exact
        moments (e.g. Geometric(r) at beta is Geometric(r**beta)); None means there is no
        such family and the tempered law is sampled.
        """
        return None

    def moments(self, n: int | None = None, seed: int = 0) -> Moments:
        """mu, mu2 and E[H^2], with standard errors, from the sampled spine law.

        Subclasses with closed forms override this. The default reads the per-distribution
        entropies that :class:`~brwsim.theory.sampled.SampledLaw` records while it samples the
        spine law (``n`` and ``seed`` are ignored).
        """
        law = self.cached_spine_law()
        if hasattr(law, "moments"):
            return law.moments
        return Moments(law.mu, law.mu2, exact=law.exact)

    def input_files(self) -> dict[str, str]:
        """SHA-256 (hex) of every file this family and the families in its parameters
        read, by path (empty for a family defined by numbers alone).

        A family that reads a file records it with :meth:`_record_input` when it reads it,
        so the hash is of the bytes the numbers came from.
        """
        out = dict(self.__dict__.get("_input_sha256", {}))
        todo = list(self.params().values())
        while todo:
            value = todo.pop()
            if isinstance(value, Family):
                out.update(value.input_files())
            elif isinstance(value, (list, tuple)):
                todo.extend(value)
            elif isinstance(value, dict):
                todo.extend(value.values())
        return out

    def _record_input(self, path: Any, sha256: str | None = None) -> None:
        """Remember that this family read ``path`` (its SHA-256 computed unless given)."""

        self.__dict__.setdefault("_input_sha256", {})[str(path)] = sha256 or file_sha256(path)

    def __getstate__(self) -> dict[str, Any]:
        # cached moments / spine steps (brwsim.simulate) stay behind: workers recompute them
        return {k: v for k, v in self.__dict__.items() if k != "_brwsim_memo"}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={_fmt(v)}" for k, v in self.params().items())
        return f"{self.name}({args})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and repr(other) == repr(self)

    def __hash__(self) -> int:
        return hash(repr(self))


def _fmt(v: Any) -> str:
    if isinstance(v, Family):
        return repr(v)
    if hasattr(v, "dist") and hasattr(v, "ppf"):       # a frozen scipy.stats distribution
        args = [_fmt(a) for a in v.args] + [f"{k}={_fmt(x)}" for k, x in sorted(v.kwds.items())]
        return f"stats.{v.dist.name}({', '.join(args)})"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, str):
        return repr(v)
    return repr(v)
