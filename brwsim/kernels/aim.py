"""Threshold aiming: where each pass of a worker puts its cut-off.

Each root's first pass aims at a tuned multiple of P_max nodes from the last root's count
(:func:`aim`, :func:`tune`); a pass short of P_max steps its threshold up by the worker's
learnt growth rate (:func:`retarget`, :func:`rate`). The thresholds set the speed only:
the trees never depend on them.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from brwsim.kernels import kernel
from brwsim.kernels.collect import ABORT
from brwsim.kernels.select import lower_cut, within


class Search(NamedTuple):
    """One root's threshold search between its passes (:func:`after_pass`): the bracket
    (``t_lo``, ``t_hi``) its cut-off lies in, the passes so far, the previous pass's count
    of nodes within its threshold and that threshold (``prev`` = -1: none to learn the
    worker's growth rate from), and whether the root's first pass fell short of P_max."""

    t_lo: float
    t_hi: float
    passes: int
    prev: int
    t_prev: float
    short: bool


_NONE = np.int64(-1)        # Search.prev: no count to learn from


@kernel
def new_search():
    """A root's :class:`Search` before its first pass."""
    return Search(-np.inf, np.inf, np.int64(0), _NONE, 0.0, False)


@kernel
def bracket_search(search, t):
    """``search``'s bracket for a pass at ``t`` that learns nothing (the policies' passes:
    not a first pass, no count to learn the growth rate from)."""
    return Search(search.t_lo, search.t_hi, np.int64(1), _NONE, t, False)


@kernel
def start_threshold(p_max):
    """The first pass's threshold -log p for a largest budget ``p_max`` (it only sets the
    speed: every pass retargets it until it holds enough nodes)."""
    return math.log(1.5 * max(p_max, 1.0)) + 1.0


# How a worker aims its thresholds (:func:`retarget`, :func:`aim`)
AIM_TIES = 0      # positions with exact ties (lattices): n(t) moves in steps, aim wide
AIM_REPEAT = 1    # a short pass is repeated whole
AIM_RESUME = 2    # a short pass is continued (:func:`resume`)
_RESUME_AIM = 1.08     # a continued pass aims at this many times P_max nodes
_REPEAT_STEP_AIM = 1.3  # a repeated one at this many
_AIM_STEP = 1.0        # the next root's threshold moves by at most this much
# A root's first pass aims at a P_max nodes by the last root's count, a tuned per worker:
# up by the first factor after a short pass, down by the second otherwise (never below
# _AIM_MIN). The balance sits where short passes are 1 in (1 + log(up) / -log(down)):
# 1 in 15 when a short pass is repeated whole, 1 in 2.6 when it is continued (cheap).
_AIM_MIN = 1.02
_AIM_REPEAT = (1.2, 1.15, 0.99)     # start, up, down
_AIM_RESUME = (1.05, 1.05, 0.97)


@kernel
def tune(a, short, mode):
    """The next root's aim after a root whose first pass was ``short`` (or not)."""
    start, up, down = _AIM_RESUME if mode == AIM_RESUME else _AIM_REPEAT
    if a == 0.0:
        a = start
    a = a * up if short else a * down
    return min(max(a, _AIM_MIN), 4.0)


@kernel
def _rate(rate, t0, n0, t1, n1):
    """The worker's growth rate of counts with t after two passes (t0, n0), (t1, n1) of a
    root: half the old estimate and half log(n1 / n0) / (t1 - t0), within [0.25, 64];
    unchanged when the passes cannot tell (too few nodes, equal counts)."""
    if n0 < 16 or n1 < 16 or n0 == n1 or t1 == t0:
        return rate
    g = math.log(n1 / n0) / (t1 - t0)
    if not g > 0.0:
        return rate
    return min(max(0.5 * rate + 0.5 * g, 0.25), 64.0)


@kernel
def retarget(n, p_max, t, t_lo, t_hi, mode, rate):
    """Threshold bookkeeping after a pass of ``n`` < P_max nodes, or of at least P_max
    nodes at or below t (done): extrapolate or bisect.

    Returns (done, t, t_lo, t_hi). A pass short of P_max (of at least 16 nodes) steps up
    by log(a P_max / n) / rate, as the count of nodes below t grows about as exp(rate t)
    (see :func:`aim`): a = _RESUME_AIM when it will be continued (``mode`` AIM_RESUME), a
    little more when it is repeated whole; with AIM_TIES (counts that move in steps) by
    at least 0.5.
    """
    if n < p_max:
        t_lo = t
        if mode != AIM_TIES and n >= 16:
            a = _RESUME_AIM if mode == AIM_RESUME else _REPEAT_STEP_AIM
            t += max(0.01, math.log(a * p_max / n) / rate)
            if t >= t_hi:
                t = 0.5 * (t_lo + t_hi)
        elif t_hi < np.inf:
            t = 0.5 * (t_lo + t_hi)
        else:
            t += max(0.5, 1.2 * math.log(1.5 * p_max / max(n, 1)))
        return False, t, t_lo, t_hi
    return True, t, t_lo, t_hi


@kernel
def after_pass(pos, dep, order, n, filled, p_max, t, mode, flags, search):
    """Bookkeeping after a pass of ``n`` nodes (or ``ABORT``, its buffers full, the first
    ``filled`` of them written) at ``t``, the root's ``search.passes``-th pass (its
    :class:`Search`).

    The pass is done only when P_max nodes lie at or below t itself (then every node
    tied with the P_max-th is within the pass's tie cut-off). The nodes a pass holds are
    nodes of the tree, so the P_max-th smallest of their positions, v, has P_max nodes
    at or below it and a pass at v is never short: a pass that holds P_max nodes only in
    its tie margin above t moves on to v, and so does one that overflows its buffers
    (``ABORT``) when v < t; when v >= t more nodes than the buffers hold tie at the cut
    (a lattice, a flat law), and the caller widens its buffers (``order`` is scratch,
    ``order[:filled]`` is overwritten). An overflow that kept fewer than P_max nodes
    bisects, and widens once the bracket has closed on a point. Otherwise
    :func:`retarget` steps or bisects. The
    worker's growth rate (``flags[2]``, :func:`_rate`) learns from this pass and the
    previous one (``search.prev`` nodes at ``search.t_prev``). Returns (done, t, widen,
    search): whether the root is done, the next pass's threshold, whether the caller
    widens its buffers, and the search after this pass.
    """
    t_lo, t_hi, passes, prev, t_prev, short = search
    passes += 1
    if n == ABORT and filled >= p_max:
        v = lower_cut(pos, dep, order, filled, p_max)
        if v < t:
            return False, v, False, Search(t_lo, t, passes, _NONE, t, short)
        return False, v, True, Search(t_lo, np.inf, passes, _NONE, t, short)
    if n == ABORT:                  # too few nodes kept to tell: bisect, widen at a point
        if t - t_lo > 1e-9 * max(1.0, abs(t)):
            t_new = 0.5 * (t_lo + t) if t_lo > -np.inf else t - 0.7
            return False, t_new, False, Search(t_lo, t, passes, _NONE, t, short)
        return False, t, True, Search(t_lo, t, passes, _NONE, t, short)
    core = n if n < p_max else within(pos, n, t)
    if passes == 1:
        short = core < p_max
    elif prev >= 0:
        flags[2] = _rate(flags[2], t_prev, prev, t, core)
    if core < p_max <= n:
        return (False, lower_cut(pos, dep, order, n, p_max), False,
                Search(t, t_hi, passes, core, t, short))
    done, t_new, t_lo, t_hi = retarget(core, p_max, t, t_lo, t_hi, mode, flags[2])
    return done, t_new, False, Search(t_lo, t_hi, passes, core, t, short)


@kernel
def aim(n, p_max, t, mode, a, rate):
    """Threshold for the next root after a final pass of ``n`` nodes at ``t``.

    The count of nodes below t grows about as exp(rate t) (rate 1 asymptotically, the
    Malthusian rate of children's probabilities summing to 1; a shallow tree of a flat
    law grows much faster, see :func:`_rate`), so this root would have had a P_max nodes
    at about t - log(n / (a P_max)) / rate: the next root starts there (``a`` from
    :func:`tune`), the step clipped to _AIM_STEP. Counts that move in steps (``mode`` AIM_TIES) would make
    that oscillate across a step: they lower t only past 2 P_max nodes, to about
    1.5 P_max.
    """
    if mode == AIM_TIES:
        if n > 2 * p_max:
            t -= 0.5 * math.log(n / (1.5 * p_max))
        return t
    step = math.log(n / (a * p_max)) / rate if n > 0 else -_AIM_STEP
    return t - min(max(step, -_AIM_STEP), _AIM_STEP)

