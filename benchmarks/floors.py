"""Two bare floors for the tree-kernel benchmark: a heap and a threshold pass, no distributions.

Both enumerate the same fixed tree: every node's children have the log-probabilities of
one Zipf(1.5) law over 128,000 tokens (a table, read, never drawn), and both count P nodes
per tree. Neither hashes keys, samples a path, draws a distribution or selects: they are
the cost of the search itself, so a kernel's ratio to them says how much the distribution
and bookkeeping work costs on top.

* :func:`heap_floor`: best-first search with a binary heap of (position, rank, parent's
  position): pop the best, push its first child and its next sibling, P times.
* :func:`threshold_floor`: depth-first pass over every node with position <= t, children
  in rank order, stopping at the first child above t; t is the smallest threshold holding
  P nodes, found before timing.
"""

from __future__ import annotations

import math
import time

import numba as nb
import numpy as np

VOCAB = 128000
S = 1.5


def zipf_table(s: float = S, vocab: int = VOCAB) -> np.ndarray:
    """log q_r of Zipf(s) over ``vocab`` tokens, r = 0 .. vocab - 1."""
    lw = -s * np.log(np.arange(1, vocab + 1, dtype=float))
    return lw - np.logaddexp.reduce(lw)


@nb.njit(cache=True)
def heap_floor(lq, p, hs, hr, hp, out):
    """Best-first search of P nodes with a binary heap; positions into ``out``."""
    v = lq.shape[0]
    n = 1
    hs[0] = -lq[0]
    hr[0] = 0
    hp[0] = 0.0
    for i in range(p):
        s, r, ps = hs[0], hr[0], hp[0]
        out[i] = s
        # replace the top by the first child, sift down
        cs, cr, cp = s - lq[0], 0, s
        for push in range(2):
            if push == 1:
                if r + 1 >= v:
                    break
                cs, cr, cp = ps - lq[r + 1], r + 1, ps
                # sift up a new leaf
                j = n
                n += 1
                while j > 0:
                    par = (j - 1) >> 1
                    if hs[par] <= cs:
                        break
                    hs[j], hr[j], hp[j] = hs[par], hr[par], hp[par]
                    j = par
                hs[j], hr[j], hp[j] = cs, cr, cp
            else:
                j = 0
                while True:
                    c = 2 * j + 1
                    if c >= n:
                        break
                    if c + 1 < n and hs[c + 1] < hs[c]:
                        c += 1
                    if hs[c] >= cs:
                        break
                    hs[j], hr[j], hp[j] = hs[c], hr[c], hp[c]
                    j = c
                hs[j], hr[j], hp[j] = cs, cr, cp
    return n


@nb.njit(cache=True)
def threshold_floor(lq, t, cap, pos, st_s, st_r):
    """Depth-first pass over the nodes with position <= t (at most ``cap``); their count."""
    v = lq.shape[0]
    d = 0
    st_s[0] = 0.0
    st_r[0] = 0
    n = 0
    while d >= 0:
        r = st_r[d]
        sc = st_s[d] - lq[r] if r < v else np.inf
        if not sc <= t or n >= cap:
            d -= 1
            continue
        st_r[d] = r + 1
        pos[n] = sc
        n += 1
        d += 1
        st_s[d] = sc
        st_r[d] = 0
    return n


def _best_rate(fn, p: int, seconds: float, repeats: int) -> float:
    """Best of ``repeats`` timings of P nodes per call, each about ``seconds`` long."""
    best = 0.0
    for _ in range(repeats):
        calls, t0 = 0, time.perf_counter()
        while calls == 0 or time.perf_counter() - t0 < seconds:
            fn()
            calls += 1
        best = max(best, calls * p / (time.perf_counter() - t0))
    return best


def heap_rate(p: int, seconds: float, repeats: int = 3) -> float:
    """Nodes per second of :func:`heap_floor` at budget P (best of ``repeats``)."""
    lq = zipf_table()
    hs, hr, hp = np.empty(2 * p + 2), np.empty(2 * p + 2, np.int64), np.empty(2 * p + 2)
    out = np.empty(p)
    return _best_rate(lambda: heap_floor(lq, p, hs, hr, hp, out), p, seconds, repeats)


def threshold_rate(p: int, seconds: float, repeats: int = 3) -> float:
    """Nodes per second (P per pass) of :func:`threshold_floor` at the threshold of P nodes."""
    lq = zipf_table()
    cap = 4 * p + 64
    pos, st_s, st_r = np.empty(cap), np.empty(4096), np.empty(4096, np.int64)
    lo, hi = 0.0, 2.0 * math.log(p + 1.0) + 10.0
    for _ in range(60):                      # the smallest t with at least P nodes
        mid = 0.5 * (lo + hi)
        if threshold_floor(lq, mid, cap, pos, st_s, st_r) >= p:
            hi = mid
        else:
            lo = mid
    return _best_rate(lambda: threshold_floor(lq, hi, cap, pos, st_s, st_r), p, seconds, repeats)
