"""Drafting policies: how a drafter chooses its tree of P draft nodes.

One strategy per module, each a subclass of :class:`~brwsim.policies.base.Policy`
(static shapes of :class:`~brwsim.policies.static.StaticPolicy`); defining the class
registers it by name (:data:`POLICIES`). See :mod:`brwsim.policies.base` for the
interface and for adding a policy in one file.

String forms (for the CLI and configs), parsed by :func:`parse_policy`::

    optimal()   chain()   kary(k=4)   expansion(widths=[4, 2, 2])
    sequoia(acceptance=[0.6, 0.15, 0.05], max_depth=8)
    dynamic(depth=6, topk=10, total=59)   noisy(sigma=0.5, T=1.0, gamma=0.5)
    drafter(path=draft, shape=best)   (a second checkpoint drafts; transformer targets only)

A policy may use fewer than P nodes (a static shape smaller than P, a dynamic tree with
fewer candidates); the rest of its budget is wasted. Trees nest (the tree of P inside the
tree of P + 1) except for :class:`Sequoia` with an unsorted vector.
"""

from brwsim.policies.base import DEFAULT_POLICY, POLICIES, Policy, Roots, run_policy
from brwsim.policies.chain import Chain
from brwsim.policies.drafter import DraftModel
from brwsim.policies.dynamic import Dynamic
from brwsim.policies.expansion import Expansion
from brwsim.policies.kary import KAry
from brwsim.policies.noisy import Noisy
from brwsim.policies.optimal import Optimal
from brwsim.policies.parse import parse_policy
from brwsim.policies.sequoia import Sequoia
from brwsim.policies.static import StaticPolicy

__all__ = ["Policy", "StaticPolicy", "Roots", "Optimal", "Chain", "KAry", "Expansion", "Sequoia",
           "Dynamic", "Noisy", "DraftModel", "POLICIES", "DEFAULT_POLICY", "parse_policy", "run_policy"]
