"""Interpolated Kneser-Ney next-token distributions of a character n-gram model.

The model: with c(h, w) the raw count of context h followed by token w at the highest
order N and the continuation count N1+(. h w) (the number of distinct tokens seen before
h w) below it, C(h) = sum_w c(h, w) and T(h) the number of w with c(h, w) > 0,

    P_m(w | h) = lam(h) P_{m-1}(w | h') + max(c(h, w) - D, 0) / C(h),   lam(h) = D T(h) / C(h),

with h' = h minus its oldest token, P_m = P_{m-1} for a context never seen (C(h) = 0) and
P_0(w) = 1 / V: every token keeps mass > 0 and each P_m sums to 1.

Contexts are coded base V with the MOST RECENT token as the most significant digit: a
node's context ``ctx`` holds its last N - 1 tokens, its order-m context is the top m - 1
digits, and the contexts of order m + 1 that extend an order-m context h to the left
(x h) are contiguous in code order: a suffix trie, searched one token per order.

The tables live in one float64 block (inside the spec's ``data``) at offset ``o``; all
offsets stored in it are relative to ``o``:

* ``[0]`` V, ``[1]`` N, ``[2]`` D, ``[3]`` offset of the dense base, ``[4]`` offset of the
  order-3 child ranges by most recent token (V + 1 entries; N >= 3), ``[5]`` offset of the
  sorted base.
* The dense base: V + 1 rows of V probabilities, row h = P_2(. | h) and row V = P_1 (for
  N = 1 every row is P_1). The sorted base: per row, 3 V entries: the row's
  probabilities in descending order (ties by ascending token id), their token ids and
  their logarithms.
* For each order m = 3..N, ``HDR_ORDER`` header entries at ``HDR + HDR_ORDER (m - 3)``: the
  number of contexts, then offsets of: ``key`` (each context's oldest token, sorted within
  siblings), ``child`` (CSR ranges of its left extensions at order m + 1; m < N), ``ptr``
  (CSR ranges into the pairs), ``lam``, and the pairs ``tok`` (token id) and ``w``
  ((c - D) / C).
"""

from __future__ import annotations

import math

import numpy as np

from brwsim.kernels import kernel, njit_cached
from brwsim.kernels.kinds import CUT_MARGIN, NGRAM, lowered_cut

HDR = 6             # block header: V, N, D, base, order-3 child ranges, sorted base
HDR_ORDER = 7       # per order >= 3: n_ctx, key, child, ptr, lam, tok, w
# Parameter slots of an NGRAM component (the family writes them by these names)
NGRAM_BETA = 0      # fpar: 1 / temperature
NGRAM_DISCOUNT = 1  # fpar: Kneser-Ney discount (the tables in data already apply it)
NGRAM_VOCAB = 2     # ipar: vocabulary
NGRAM_ORDER = 3     # ipar: order N
#: the slots the kind owns (tests/unit/test_kind_table.py checks the family writes these)
LAYOUT = {NGRAM: ((NGRAM_BETA, NGRAM_DISCOUNT), (NGRAM_VOCAB, NGRAM_ORDER))}


@kernel
def _vpow(v, e):
    p = np.int64(1)
    for _ in range(e):
        p *= v
    return p


@kernel
def _child(data, o, m, lo, hi, x):
    """Index of the order-m context with oldest token ``x`` among [lo, hi), or -1."""
    key = o + int(data[o + HDR + HDR_ORDER * (m - 3) + 1])
    end = hi
    while lo < hi:
        mid = (lo + hi) >> 1
        if data[key + mid] < x:
            lo = mid + 1
        else:
            hi = mid
    if lo == end or data[key + lo] != x:
        return -1
    return lo


@kernel
def _children(data, o, m, j):
    """Range of the order-(m + 1) left extensions of order-m context j (m >= 2; j = h1 at m = 2)."""
    if m == 2:
        c = o + int(data[o + 4]) + j
    else:
        c = o + int(data[o + HDR + HDR_ORDER * (m - 3) + 2]) + j
    return int(data[c]), int(data[c + 1])


@kernel
def kn_row(data, o, ctx, top, buf, row):
    """KN probabilities of the next token after context ``ctx``, by token id, into buf[row, :V].

    Uses orders ``min(top, N)`` down to 1 (``top`` < N: only the top - 1 most recent
    digits of ``ctx`` are tokens). The plain recursion, bottom-up; returns V.
    """
    v = int(data[o])
    big_n = int(data[o + 1])
    n = min(big_n, top)
    p = _vpow(v, big_n - 2)             # weight of the most recent token's digit
    h1 = ctx // p if n >= 2 else v
    b = o + int(data[o + 3]) + h1 * v
    for w in range(v):
        buf[row, w] = data[b + w]
    j = h1
    for m in range(3, n + 1):
        p //= v
        lo, hi = _children(data, o, m - 1, j)
        j = _child(data, o, m, lo, hi, float((ctx // p) % v))
        if j < 0:
            break                       # unseen context: the lower order stands
        h = o + HDR + HDR_ORDER * (m - 3)
        lam = data[o + int(data[h + 4]) + j]
        for w in range(v):
            buf[row, w] *= lam
        ptr = o + int(data[h + 3]) + j
        pt = o + int(data[h + 5])
        pw = o + int(data[h + 6])
        for i in range(int(data[ptr]), int(data[ptr + 1])):
            buf[row, int(data[pt + i])] += data[pw + i]
    return v


@kernel
def ngram_init(data, o, beta, ctx, min_logq, head, d):
    """Sorted log-probabilities (tempered by ``beta``) of the node with context ``ctx``.

    Writes log q of rank r to ``head[d, r]`` and its token id to ``head[d, V + r]`` for
    the ranks with log q >= ``min_logq`` (less a relative margin); returns their number.
    ``head[d]`` needs 3 V + N entries (the rest is scratch).

    q(w) = W P_2(w | h1) + A(w), where W is the product of the back-off weights of the
    orders >= 3 whose context was seen and A(w) the weighted sum of their discounted
    counts of w. Tokens with no count there keep the order of the pre-sorted row
    P_2(. | h1), so only the few others above the cut-off are sorted (by q descending,
    ties by ascending token id) and merged in (ties: the pre-sorted row first). The
    order is a function of q alone, so a rank's token never depends on the cut-off.
    """
    v = int(data[o])
    big_n = int(data[o + 1])
    acc = 2 * v                         # scratch: A(w) by token, -1 = no count above order 2
    js = 3 * v                          # scratch: the seen context of each order >= 3
    p = _vpow(v, big_n - 2)
    h1 = ctx // p if big_n >= 2 else v
    top = 2
    j = h1
    for m in range(3, big_n + 1):       # suffix trie, one token further back per order
        p //= v
        lo, hi = _children(data, o, m - 1, j)
        j = _child(data, o, m, lo, hi, float((ctx // p) % v))
        if j < 0:
            break
        head[d, js + m - 3] = j
        top = m
    b = o + int(data[o + 3]) + h1 * v   # P_2(. | h1) by token
    sb = o + int(data[o + 5]) + h1 * 3 * v   # sorted P_2, its tokens, its logs (V each)
    n_t = 0                             # touched tokens (A(w) defined)
    wt = 1.0                            # W
    if top >= 3:
        for w in range(v):
            head[d, acc + w] = -1.0
        for m in range(top, 2, -1):     # top-down: A += W_m a_m, then W_m *= lam_m
            h = o + HDR + HDR_ORDER * (m - 3)
            j = int(head[d, js + m - 3])
            ptr = o + int(data[h + 3]) + j
            pt = o + int(data[h + 5])
            pw = o + int(data[h + 6])
            for i in range(int(data[ptr]), int(data[ptr + 1])):
                w = int(data[pt + i])
                if head[d, acc + w] < 0.0:
                    head[d, acc + w] = 0.0
                    n_t += 1
                    head[d, 2 * v - n_t] = w      # touched tokens at [V - n_t, V)
                head[d, acc + w] += wt * data[pw + i]
            wt *= data[o + int(data[h + 4]) + j]
    lz = 0.0
    if beta != 1.0:                     # log of the normaliser of q**beta
        z = 0.0
        for r in range(v):
            w = int(data[sb + v + r])
            if n_t == 0 or head[d, acc + w] < 0.0:
                z += (wt * data[sb + r]) ** beta
            else:
                z += (head[d, acc + w] + wt * data[b + w]) ** beta
        lz = math.log(z)
    thr = lowered_cut(min_logq)
    # q >= q_thr <=> beta log q - lz >= thr, with a margin: the exact cut is the merge's
    q_thr = math.exp((thr + lz) / beta) * (1.0 - CUT_MARGIN)
    n_k = 0                             # touched tokens above the cut-off, at [V - n_k, V)
    for i in range(v - 1, v - 1 - n_t, -1):
        w = int(head[d, v + i])
        q = head[d, acc + w] + wt * data[b + w]
        if q >= q_thr:
            n_k += 1
            k = v - n_k                 # insertion sort, descending by (q, -token)
            while k < v - 1 and (head[d, k + 1] > q
                                 or (head[d, k + 1] == q and head[d, v + k + 1] < w)):
                head[d, k] = head[d, k + 1]
                head[d, v + k] = head[d, v + k + 1]
                k += 1
            head[d, k] = q
            head[d, v + k] = w
    # merge; the output rank r never passes the next unread touched slot it
    lw = math.log(wt)
    ru = 0
    it = v - n_k
    r = 0
    last = np.inf
    while True:
        while ru < v and n_t > 0 and head[d, acc + int(data[sb + v + ru])] >= 0.0:
            ru += 1
        qu = wt * data[sb + ru] if ru < v else -1.0
        if it < v and head[d, it] > qu:
            x = math.log(head[d, it])
            w = head[d, v + it]
            it += 1
        elif ru < v:
            x = lw + data[sb + 2 * v + ru]
            w = data[sb + v + ru]
            ru += 1
        else:
            break
        if beta != 1.0:
            x = beta * x - lz
        x = min(x, last)                # rounding never breaks the descending order
        last = x
        if not x >= thr:
            break
        head[d, r] = x
        head[d, v + r] = w
        r += 1
    return r


@njit_cached
def kn_table(data, o, ctxs, top, out):
    """KN distributions (by token id) of many contexts: ``out[i, :V]`` for ``ctxs[i]``."""
    for i in range(ctxs.shape[0]):
        kn_row(data, o, ctxs[i], top, out, i)


@njit_cached
def kn_moments(data, o, ctxs, weights, beta, buf):
    """Weighted sums of H, sum q (log q)**2 and H**2 over contexts (q tempered by ``beta``).

    ``buf`` is a (1, V) scratch row. Returns (sum w H, sum w m2, sum w H**2).
    """
    sh = 0.0
    sm2 = 0.0
    sh2 = 0.0
    for i in range(ctxs.shape[0]):
        v = kn_row(data, o, ctxs[i], 1 << 30, buf, 0)
        lz = 0.0
        if beta != 1.0:
            z = 0.0
            for w in range(v):
                z += buf[0, w] ** beta
            lz = math.log(z)
        h = 0.0
        m2 = 0.0
        for w in range(v):
            lq = beta * math.log(buf[0, w]) - lz
            q = math.exp(lq)
            h -= q * lq
            m2 += q * lq * lq
        sh += weights[i] * h
        sm2 += weights[i] * m2
        sh2 += weights[i] * h * h
    return sh, sm2, sh2
