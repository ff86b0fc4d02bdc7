"""Generation runs and moments measured along real paths.

* :func:`generate` produces ``tokens`` tokens call by call: each call builds the optimal
  tree of ``budget`` nodes at its root, accepts X draft tokens and emits one more, and the
  next call's root is where the target's sampled path arrived (docs/design.md, idea 6). For
  i.i.d. families this is the same as independent trees; for context-dependent ones the
  roots carry the regime or latent state that the text has reached.
* :func:`path_moments` walks a long sampled path and measures, at every position, the
  entropy and second log-moment of the target's distribution: what a user measures on a
  real model. Its i.i.d. prediction is the renewal prediction of a family that redraws
  those measured distributions independently at every node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from brwsim.engine import check_grow_status, law, seed_key, validate_budgets
from brwsim.errors import UserError
from brwsim.families.base import Family
from brwsim.families.empirical import Empirical
from brwsim.io import provenance_attrs
from brwsim.kernels.dist import CTX_DEPTH, LEVEL_F, LEVEL_I, ROOT_DRAW, ROOT_PRESET
from brwsim.backends.rounds import sampled_rank, tempered
from brwsim.kernels.rng import PATH, child_key, purpose_key, root_key, unit
from brwsim.kernels.spec import Out
from brwsim.kernels.walk import advance, generation_run, path_distributions
from brwsim.lazy import xarray as xr
from brwsim.policies import Optimal, Policy, Roots, parse_policy
from brwsim.schema import variable
from brwsim.validate import check_int, check_work_size

__all__ = ["generate", "path_moments", "PathMoments"]


def generate(family: Family, policy=None, budget: int = 64, tokens: int = 10_000, seed: int = 0,
             *, run: int = 0) -> xr.Dataset:
    """Simulate producing ``tokens`` tokens with the optimal tree of ``budget`` nodes per call.

    Parameters
    ----------
    family : Family
        Any family; context-dependent ones carry their context from call to call.
    policy : Policy or str, optional
        The drafting policy of every call (default: the optimal tree). The optimal policy
        runs entirely in numba; the others are driven call by call from Python.
    budget : int
        Draft budget P of every call.
    tokens : int
        Tokens to produce (the run stops at the first call that reaches it).
    seed, run : int
        Root seed, and which run of that seed (runs are independent).

    Returns
    -------
    xarray.Dataset
        Dim ``call``: ``accepted`` (X), ``expected_accepted`` (E[X | T] at the call's root),
        ``depth``, ``root_context`` (regime / depth index) and ``root_latent`` (AR(1) latent);
        attributes ``tokens_per_call`` (produced tokens / calls) and ``calls``.
    """

    if isinstance(policy, str):
        policy = parse_policy(policy)
    if policy is not None and not isinstance(policy, Policy):
        raise UserError(f"policy must be a brwsim policy or its string form, got {policy!r}")
    if not isinstance(family, Family):
        raise UserError(f"family must be a brwsim family, got {family!r}")
    b = validate_budgets([budget])
    tokens = check_int("tokens", tokens, 1)
    check_work_size(float(tokens) * 32, f"generate: {tokens} tokens",      # 5 arrays of width tokens
                    "generate fewer tokens")
    batched = getattr(family, "batched", False)
    spec = None if batched else family.spec()
    if policy is not None and not isinstance(policy, Optimal):
        policy.check_batched(family) if batched else policy.check(spec)
    width = int(tokens)                      # at least one token per call
    acc = np.empty((1, width), np.int32)
    exp = np.empty((1, width))
    dep = np.empty((1, width), np.int32)
    ci = np.empty(width, np.int64)
    cf = np.empty(width)
    if batched:
        if isinstance(policy, Optimal) and policy.depth_cap is not None:
            raise UserError(f"{policy!r}: a depth cap is not available with backend={family.backend}")
        calls = _batched_run(family, policy, b, seed_key(seed), run, tokens, acc, exp, dep, ci)
        cf[:calls] = 0.0
    elif policy is None or isinstance(policy, Optimal):
        cap = (policy or Optimal()).depth_cap
        calls = generation_run(law(spec), spec.head_cap, seed_key(seed), run, b, cap, tokens,
                               Out(acc, exp, dep), ci, cf)
        check_grow_status(calls, cap)
    else:
        calls = _policy_run(policy, spec, b, seed_key(seed), run, tokens, acc, exp, dep, ci, cf)
    x = acc[0, :calls]
    produced = int(x.sum()) + calls
    call = ("call",)
    ds = xr.Dataset({
        "accepted": variable("accepted", x, call),
        "expected_accepted": variable("expected_accepted", exp[0, :calls], call),
        "depth": variable("depth", dep[0, :calls], call),
        "root_context": variable("root_context", ci[:calls]),
        "root_latent": variable("root_latent", cf[:calls]),
    }, coords={"call": ("call", np.arange(calls), {"long_name": "call index", "units": "1"})},
        attrs=provenance_attrs(f"brwsim generation run: {family!r}",
                               {"family": repr(family), "budget": int(budget), "tokens": int(tokens),
                                "seed": str(seed), "run": int(run)}, seed))
    ds.attrs["tokens_per_call"] = produced / calls
    ds.attrs["calls"] = calls
    ds.attrs["tokens_produced"] = produced
    return ds


def _batched_run(family, policy, budgets, key, run, tokens, acc, exp, dep, ci_out) -> int:
    """A generation run on a batched target (a real model): each call's tree below the
    current context, then the context grows by the X accepted tokens and the target's own
    next token, sampled with the keyed uniform of the node where its path left the tree
    (the argmax at T = 0); that node's child is the next root, so the run is a function of
    (seed, run). ``root_context`` records each call's context length."""
    ctx = family.root_context(key, run)
    rkey = np.uint64(root_key(key, np.uint64(run)))
    ev = family.evaluator()
    produced = calls = 0
    while produced < tokens and calls < acc.shape[1]:
        res = (family.optimal_at(ctx, int(rkey), budgets) if policy is None or isinstance(policy, Optimal)
               else policy.tree_at(family, ctx, int(rkey), budgets))
        x = int(res.accepted[-1])
        acc[0, calls], exp[0, calls], dep[0, calls] = x, res.expected[-1], res.depth[-1]
        ci_out[calls] = ctx.size
        for r in res.path_ranks[:x]:
            rkey = np.uint64(child_key(rkey, np.uint64(r)))
        ctx = np.concatenate([ctx, res.path_tokens[:x]]).astype(np.int64)
        lp = ev.start(ctx)                  # the node where the path left the tree
        if family.temperature == 0:          # the argmax, lower id on ties
            r, tok = 0, int(np.argmax(lp))
        else:
            r, order = sampled_rank(tempered(lp[None, :], family.beta)[0],
                                    unit(np.uint64(purpose_key(rkey, PATH)), 0))
            r = min(r, lp.size - 1)
            tok = int(order[r])
        rkey = np.uint64(child_key(rkey, np.uint64(r)))
        ctx = np.append(ctx, tok)[-(ev.max_positions - 64):]
        produced += x + 1
        calls += 1
    return calls


def _policy_run(policy, spec, budgets, key, run, tokens, acc, exp, dep, ci_out, cf_out) -> int:
    """A generation run driven from Python: one policy tree per call, then advance X + 1.

    Each call's root carries its head row along (where ``charlstm`` keeps its recurrent
    state), as :func:`brwsim.kernels.walk.generation_run` does for the optimal tree.
    """

    lf = np.empty((2, LEVEL_F))
    li = np.empty((2, LEVEL_I), np.int64)
    head = np.empty((2, max(spec.head_cap, 1)))
    dist = law(spec)
    node, ci, cf = advance(dist, np.uint64(root_key(key, np.uint64(run))), ROOT_DRAW, 0, 0.0, 0,
                           lf, li, head)              # the first root and its drawn context
    produced = calls = 0
    row = head[0].copy()                              # the root's head row
    while produced < tokens and calls < acc.shape[1]:
        a, e, d = policy.run_roots(spec, budgets, Roots.preset(node, ci, cf, row))
        acc[0, calls], exp[0, calls], dep[0, calls] = a[-1, 0], e[-1, 0], d[-1, 0]
        ci_out[calls], cf_out[calls] = ci, cf
        x = int(a[-1, 0])
        head[0, :] = row
        node, ci, cf = advance(dist, np.uint64(node), ROOT_PRESET, ci, cf, x + 1, lf, li, head)
        row = head[(x + 1) % 2].copy()                # advance alternates rows
        if int(spec.cprog[0]) == CTX_DEPTH:
            ci = 0                           # depth counts from the new root
        produced += x + 1
        calls += 1
    return calls


@dataclass(frozen=True)
class PathMoments:
    """Moments measured along sampled paths, and the rows they came from.

    Attributes
    ----------
    mu, mu2 : float
        Mean entropy and mean second log-moment of the visited positions (nats, nats^2).
    mu_se, mu2_se : float
        Standard errors over independent paths.
    rows : numpy.ndarray
        Top ranks of every visited position's distribution (a bank for ``Empirical``).
    """

    mu: float
    mu2: float
    mu_se: float
    mu2_se: float
    rows: np.ndarray

    def iid_family(self) -> Family:
        """The i.i.d. family that redraws the measured distributions at every node."""

        return Empirical(self.rows)


def path_moments(family: Family, tokens: int = 2000, paths: int = 8, seed: int = 0,
                 k: int = 64) -> PathMoments:
    """Measure mu and mu2 along ``paths`` sampled paths of ``tokens`` positions each.

    This is what a user measures on a real model (entropies at generated positions). For
    context-dependent families it differs from the stationary marginal when the sampled
    path prefers some contexts (e.g. an easy regime keeps itself going).
    """
    if tokens < 2 or paths < 2:
        raise UserError("path_moments needs tokens >= 2 and paths >= 2")
    spec = family.spec()
    key = seed_key(seed)
    rows = np.zeros((paths * tokens, k))
    h = np.empty(paths * tokens)
    m2 = np.empty(paths * tokens)
    lf = np.empty((2, LEVEL_F))
    li = np.empty((2, LEVEL_I), np.int64)
    head = np.empty((2, max(spec.head_cap, 1)))
    for i in range(paths):
        sl = slice(i * tokens, (i + 1) * tokens)
        path_distributions(law(spec), np.uint64(root_key(key, np.uint64(1_000_000 + i))), tokens,
                           rows[sl], h[sl], m2[sl], lf, li, head)
    per_h = h.reshape(paths, tokens).mean(axis=1)
    per_m2 = m2.reshape(paths, tokens).mean(axis=1)
    se = lambda v: float(v.std(ddof=1) / math.sqrt(paths))  # noqa: E731
    return PathMoments(float(h.mean()), float(m2.mean()), se(per_h), se(per_m2), rows)
