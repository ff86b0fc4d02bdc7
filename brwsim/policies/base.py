"""The policy interface: a drafter's strategy for its tree of P draft nodes, and its registry.

A policy is evaluated on the very environment of the optimal tree (same seed, iteration
and node keys) and against the same sampled target path, so policies compare on common
random numbers. For each budget P it records the sampled accepted count X (path nodes
inside its tree), E[X | T] (the sum of TRUE path probabilities over its tree) and the
depth of its tree. A policy's trees are prefix-closed sets of at most P nodes, so no
policy can beat :class:`~brwsim.policies.Optimal` on E[X | T] in any iteration.

A new policy is one file: a subclass of :class:`Policy` (or of
:class:`~brwsim.policies.static.StaticPolicy` for a fixed shape of rank paths) that sets
``name``, stores its parameters, and implements :meth:`Policy.params` and
:meth:`Policy.run_roots`. Defining the class registers it (:data:`POLICIES`), so the
string form, ``simulate(policies=...)``, ``brwsim run --policy`` and sweeps' ``[[sweep.policy]]``
find it by name; import its module once (brwsim's own are imported by ``brwsim.policies``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from brwsim.errors import UserError
from brwsim.families.base import _fmt, check_int
from brwsim.interrupt import answering
from brwsim.kernels.spec import Out, Roots, Spec
from brwsim.registry import register

__all__ = ["Policy", "Roots", "POLICIES", "DEFAULT_POLICY", "run_policy", "new_outputs", "optional_int"]

#: Every policy class by its string name, filled by :meth:`Policy.__init_subclass__`.
POLICIES: dict[str, type["Policy"]] = {}

#: The policy of ``simulate`` when none is given.
DEFAULT_POLICY = "optimal()"


class Policy:
    """Base class of drafting policies.

    Subclasses set ``name`` (the lower-case string-form name), store their parameters and
    implement :meth:`params` and :meth:`run`.
    """

    name: str = "policy"
    #: How a sweep reads each parameter (the kinds of :data:`brwsim.registry.PARAM_KINDS`:
    #: ``scalar`` unless listed; a ``list`` parameter's list of lists makes a grid).
    param_kinds: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        register(POLICIES, cls, "policy")

    def params(self) -> dict[str, Any]:
        """Parameters as a JSON-serialisable dict (the string form's arguments)."""
        return {}

    def check(self, spec: Spec) -> None:
        """Refuse an environment the policy cannot draft on (a :class:`UserError`), before
        any tree is built; the default accepts every family."""

    def check_batched(self, family: Any) -> None:
        """Refuse a batched target (``transformer(backend=numpy|torch)``) the policy cannot
        draft for, before any tree is built; by default every policy but those that
        implement :meth:`run_batched` is refused."""
        raise UserError(f"{self!r} is not available with backend={family.backend}; a batched "
                        "target takes optimal() and drafter(...)")

    def run_batched(self, family: Any, budgets: np.ndarray, key: np.uint64, first: int,
                    count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Iterations ``first .. first + count - 1`` of the run of 64-bit seed key ``key`` on
        a batched target (roots ``family.root_context(key, i)``): X, E[X | T] and depth,
        each of shape (len(budgets), count)."""
        raise NotImplementedError

    def input_files(self) -> dict[str, str]:
        """SHA-256 (hex) of every file the policy reads, by path (a draft model's
        checkpoint); recorded in a run's or sweep's ``input_sha256`` beside the family's."""
        return {}

    def run(self, spec: Spec, budgets: np.ndarray, key: np.uint64, first: int,
            count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Iterations ``first .. first + count - 1``: see :func:`run_policy` (SIGINT is
        answered while the policy's kernels run, :func:`brwsim.interrupt.answering`)."""
        return answering(self.run_roots, spec, budgets, Roots.stationary(key, first, count))

    def run_roots(self, spec: Spec, budgets: np.ndarray,
                  roots: "Roots") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The policy's trees below explicit roots (one output column per root)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={_fmt(v)}" for k, v in self.params().items() if v is not None)
        return f"{self.name}({args})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and repr(other) == repr(self)

    def __hash__(self) -> int:
        return hash(repr(self))


def new_outputs(m: int, count: int) -> Out:
    """Uninitialised policy outputs for ``m`` budgets and ``count`` roots."""
    return Out.new(m, count)


def optional_int(name: str, value: Any, minimum: int) -> int | None:
    if value is None or (isinstance(value, str) and value.lower() == "none"):
        return None
    return check_int(name, value, minimum)


def run_policy(policy: Policy, spec: Spec, budgets: np.ndarray, seed_key: np.uint64, first: int,
               count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Iterations ``first .. first + count - 1`` of one policy: the numba call, few checks.

    The analogue of :func:`brwsim.engine.run_iterations` for any policy, on the same
    environment (the root of iteration i is ``root_key(seed_key, i)``).

    Parameters
    ----------
    policy : Policy
        The drafting policy.
    spec : Spec
        The family's compiled form (``family.spec()``).
    budgets : numpy.ndarray
        Sorted distinct positive int64 budgets (see :func:`brwsim.engine.validate_budgets`).
    seed_key : numpy.uint64
        Root key of the run (:func:`brwsim.keys.seed_key`).
    first, count : int
        Iteration range.

    Returns
    -------
    accepted, expected_accepted, depth : numpy.ndarray
        Arrays of shape (len(budgets), count): sampled X, E[X | T] (sum of true path
        probabilities over the policy's tree) and the depth of the policy's tree.
    """
    if not isinstance(policy, Policy):
        raise UserError(f"policy must be a brwsim policy, got {policy!r}")
    budgets = np.ascontiguousarray(budgets, dtype=np.int64)
    return policy.run(spec, budgets, np.uint64(seed_key), int(first), int(count))
