"""The conditioned Lagrangian bound on sampled trees: best-first expansion, then a min over lam.

For each sampled root the first ``expand`` nodes of its tree (the root, then best-first by
path probability) get their distributions drawn with the family's own kernels; every child
of an expanded node with ``S = -log p <= t_max`` that is not itself expanded is a frontier
node. With ``lam = e^{-tau}`` the bound of that realisation is

    G(tau) = sum_{expanded v != root} (p(v) - lam)^+
             + sum_{frontier f} [(p_f - lam)^+ + p_f Phi(lam / p_f)] + lam P,

where ``Phi(e^{-t}) <= cum_u[j] - e^{-t} cum_m[j]`` (``j = floor(t / h)``, the renewal sums
on the floor grid). G is continuous in tau and its slope is ``-e^{-tau} (P - N(tau))`` with
N the expected count above lam, which increases with tau: the minimum is where N crosses P,
found by bisection (``docs/theory.md``, section 2c).
"""

from __future__ import annotations

import math

import numpy as np

from brwsim.kernels import kernel, njit_cached
from brwsim.kernels.dist import COMP, ORDERSTAT, ROOT_DRAW, dist_init, dist_next
from brwsim.kernels.orderstat import OS_N_HEAD
from brwsim.kernels.rng import child_key, root_key

# Bisection steps on [lo, t_max]: tau to 2^-14 t_max (< 1e-3 nats). G is quadratic at its
# minimum, G(tau* + d) - G(tau*) ~ lam P d^2 / 2, so this costs < 1e-6 relative.
_BISECT = 14
#: Most frontier nodes of one sampled root: a law with more children above lam_min (a
#: Dirichlet over 2**40 tokens has billions) is refused, not expanded.
MAX_FRONTIER = 1 << 21


@kernel
def _push(hx, hk, n, x, key):
    """Push (x, key) onto the min-heap of size n; returns the new size."""
    i = n
    hx[i] = x
    hk[i] = key
    while i > 0:
        p = (i - 1) >> 1
        if hx[p] <= hx[i]:
            break
        hx[p], hx[i] = hx[i], hx[p]
        hk[p], hk[i] = hk[i], hk[p]
        i = p
    return n + 1


@kernel
def _pop(hx, hk, n):
    """Remove the heap's minimum (read it from hx[0], hk[0] first); returns the new size."""
    n -= 1
    hx[0] = hx[n]
    hk[0] = hk[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and hx[c + 1] < hx[c]:
            c += 1
        if hx[i] <= hx[c]:
            break
        hx[c], hx[i] = hx[i], hx[c]
        hk[c], hk[i] = hk[i], hk[c]
        i = c
    return n


@kernel
def _expand(law, scratch, key, x0, t_max, heap, n, work):
    """Draw the distribution of node (key, x0) into the level ``scratch`` = (lf, li, head) and
    push its children with S <= t_max onto ``heap`` = (hx, hk) of ``n`` entries.

    Every node of an i.i.d. family is drawn as a root (its distribution does not depend
    on its context). Returns the heap size, or -1 when the heap is full; adds the ranks
    generated (and an order-statistic law's exact head) to ``work[0]``.
    """
    kinds, fpar, ipar, data = law.kinds, law.fpar, law.ipar, law.data
    lf, li, head = scratch
    hx, hk = heap
    dist_init(law, key, 0, lf, li, head, x0 - t_max, ROOT_DRAW, 0)
    if kinds[li[0, COMP]] == ORDERSTAT:
        work[0] += ipar[li[0, COMP], OS_N_HEAD]     # its exact head is drawn up front
    cap = hx.shape[0]
    r = 0
    while True:
        lq = dist_next(fpar, ipar, data, key, 0, lf, li, head)
        work[0] += 1
        if lq == -np.inf:
            break
        x = x0 - lq
        if x > t_max:
            break                       # ranks come sorted: the rest are below lam_min too
        if n >= cap:
            return -1
        n = _push(hx, hk, n, x, child_key(key, r))
        r += 1
    return n


@kernel
def _count_value(tau, ex, ee, n_ex, fx, fe, n_f, cum_u, cum_m, h, budget):
    """N(tau) and G(tau) of one realisation (``ex``, ``fx`` sorted ascending, ``ee``, ``fe``
    their e^{-S})."""
    cnt = 0.0
    a = 0.0
    for i in range(n_ex):
        if ex[i] >= tau:
            break
        cnt += 1.0
        a += ee[i]
    for i in range(n_f):
        d = tau - fx[i]
        if d < 0.0:
            break
        j = int(d / h)
        cnt += 1.0 + cum_m[j]
        a += fe[i] * (1.0 + cum_u[j])
    return cnt, a + math.exp(-tau) * (budget - cnt)


@kernel
def _weights(tau, fx, n_f, h, w, b, r):
    """Add the frontier's weights on (cum_u, cum_m) at tau to ``w[b, r]`` and ``w[b, r + 1]``
    (G is linear in the renewal sums at a fixed tau: the law's delta method)."""
    for i in range(n_f):
        d = tau - fx[i]
        if d < 0.0:
            break
        j = int(d / h)
        w[b, r, j] += math.exp(-fx[i])
        w[b, r + 1, j] += math.exp(-tau)


@kernel
def _minimise(ex, ee, n_ex, fx, fe, n_f, cum_u, cum_m, h, budget, lo, t_max):
    """min over tau in [lo, t_max] of G(tau), given N(lo) < budget or lo = 0.

    Returns (value, its tau, the bisection's lower end: N there is below budget)."""
    hi = t_max
    c, _ = _count_value(hi, ex, ee, n_ex, fx, fe, n_f, cum_u, cum_m, h, budget)
    if c >= budget:
        for _ in range(_BISECT):
            mid = 0.5 * (lo + hi)
            c, _ = _count_value(mid, ex, ee, n_ex, fx, fe, n_f, cum_u, cum_m, h, budget)
            if c >= budget:
                hi = mid
            else:
                lo = mid
    _, v_hi = _count_value(hi, ex, ee, n_ex, fx, fe, n_f, cum_u, cum_m, h, budget)
    _, v_lo = _count_value(lo, ex, ee, n_ex, fx, fe, n_f, cum_u, cum_m, h, budget)
    if v_lo < v_hi:
        return v_lo, lo, lo
    return v_hi, hi, lo


@njit_cached
def conditioned_values(law, scratch, skey, n, expand, t_max, renewal, budgets, tau_fix, out,
                       weights, work):
    """Per sampled root s and budget b: ``out[0, s, b] = min_tau G(tau)`` and
    ``out[1, s, b] = G(tau_fix[b])`` (the control variate, whose mean is at most the
    unconditioned bound at ``tau_fix[b]``); ``out[2, s, b]`` is the minimising tau.

    Roots are ``root_key(skey, s)``, each tree drawn by expanding ``expand`` nodes best
    first, children within ``t_max``; ``renewal`` = (cum_u, cum_m, h) the renewal sums on
    their grid of step h; ``budgets`` ascending; ``scratch`` = (lf, li, head) one level.
    With ``weights`` = (w, True) the frontier weights of both values on the renewal sums
    are accumulated into ``w[b, 0:2]`` (at the minimiser) and ``w[b, 2:4]`` (at
    ``tau_fix``). ``work[0]`` counts the ranks generated (for the caller's sample size).
    Returns the largest frontier seen, or -1 (the outputs incomplete) when a root has
    more than :data:`MAX_FRONTIER`.
    """
    cum_u, cum_m, h = renewal
    out_b, out_g, out_t = out[0], out[1], out[2]
    w, want_w = weights
    n_b = budgets.shape[0]
    cap = 1024
    hx = np.empty(cap)
    hk = np.empty(cap, np.uint64)
    ex = np.empty(max(expand, 1))
    widest = 0
    for s in range(n):
        key = root_key(skey, np.uint64(s))
        while True:
            m = _expand(law, scratch, key, 0.0, t_max, (hx, hk), 0, work)
            n_ex = 0
            while n_ex < expand - 1 and m > 0:
                x = hx[0]
                kk = hk[0]
                m = _pop(hx, hk, m)
                ex[n_ex] = x            # popped in ascending order of S
                n_ex += 1
                m = _expand(law, scratch, kk, x, t_max, (hx, hk), m, work)
                if m < 0:
                    break
            if m >= 0:
                break
            if 2 * cap > MAX_FRONTIER:
                return -1
            cap *= 2                    # the heap was full: redo this root with room
            hx = np.empty(cap)
            hk = np.empty(cap, np.uint64)
        widest = max(widest, m)
        fx = np.sort(hx[:m])
        fe = np.exp(-fx)
        ee = np.exp(-ex)
        lo = 0.0
        for b in range(n_b):
            budget = budgets[b]
            # budgets ascend, so N(lo) < budget holds for the next one too
            v, tau, lo = _minimise(ex, ee, n_ex, fx, fe, m, cum_u, cum_m, h, budget, lo, t_max)
            out_b[s, b] = v
            out_t[s, b] = tau
            _, out_g[s, b] = _count_value(tau_fix[b], ex, ee, n_ex, fx, fe, m, cum_u, cum_m,
                                          h, budget)
            if want_w:
                _weights(tau, fx, m, h, w, b, 0)
                _weights(tau_fix[b], fx, m, h, w, b, 2)
    return widest
