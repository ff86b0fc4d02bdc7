"""One step of textgenrnn's character LSTM and its sorted next-character distribution.

The network (``textgenrnn/model.py`` of textgenrnn 2.0.0): an embedding of E = 100
dimensions, two LSTM layers of u = 128 units (Keras gate order i, f, c, o; logistic
``sigmoid`` recurrent activation, ``tanh`` activation, zero initial state), the
concatenation x_t = [e_t, h1_t, h2_t] (X = E + 2 u values) fed to an attention-weighted
average over the time steps

    a_t = exp(x_t . w - max_s x_s . w),   att = sum_t a_t x_t / (sum_t a_t + 1e-7),

(``AttentionWeightedAverage``: no mask, Keras' epsilon in the denominator) and a dense
softmax layer z = att Wo + bo over C classes (class 0 is the padding index, classes
1..C-1 the characters). Since the output layer is linear, z = G / (D + 1e-7) + bo with
G = sum_t a_t (x_t Wo) and D = sum_t a_t, kept relative to the running maximum M of the
attention logits (rescaled when M grows, so they never overflow).

A node's state is (h1, c1, h2, c2) after its last character, G, M and D. A node costs
one step of both layers from its parent's state (or, every ``carry + 1`` levels, a rerun
over its last W characters: see :func:`lstm_init`), one attention update and the listing of
its distribution. Children share their parent's recurrent products h1 R1 and h2 R2, and
the caller's cut-off already says which ranks will be visited, so the states of up to
``BATCH`` consecutive children are computed together when the first of them is set up
(stored in the parent's row): each weight matrix is then read from memory once per batch
instead of once per node. Only a tree pass (a finite cut-off: every listed rank will be
visited, in rank order) batches; walks and policies (no cut-off) compute one child at a time.
Weights are the file's float32 values; every sum accumulates in float64.

The node's distribution is the softmax restricted to the characters (class 0, which
textgenrnn's sampler never emits, is dropped and the rest renormalised), tempered by
``beta``: q_c = exp(beta z_c) / sum_{c >= 1} exp(beta z_c).

The weights live in one float64 block at offset ``o`` of the spec's ``data`` (offsets
relative to ``o``): ``[0]`` C, ``[1]`` E, ``[2]`` u, then offsets of: ``[3]`` the layer-1
input gates of every class (C x 4u, e_c K1 + b1), ``[4]`` the attention logit of every
embedding (C, e_c . w_e), ``[5]`` the output contribution of every embedding (C x C,
e_c Wo_e), ``[6]`` R1, ``[7]`` K2, ``[8]`` R2 (u x 4u each), ``[9]`` b2 (4u), ``[10]``,
``[11]`` the attention weights of h1 and h2 (u each), ``[12]`` the output kernel rows of
h1 and h2 (2u x C), ``[13]`` the output bias (C). Matrices are row-major; R1, K2, R2 and
the output rows are float32 packed two per float64 slot.

Layout of a level's head row (``head_width`` entries), V = C - 1 characters, SW = 4u + C
+ 2: ``[0, V)`` the listed log-probabilities in rank order, ``[V, 2V)`` their classes; at
S = 2V the state (h1, c1, h2, c2, G, M, D: SW entries); a flag (1 once the row's
recurrent products are computed) and the products h1 R1, h2 R2 (8u); the first rank and
the number of the children in the batch, and the batch size for this row's children (3);
the children's states (BATCH x SW); scratch (BATCH x max(4u, C)); the node's last
classes (W of ``HIST`` slots) and g, the characters carried beyond them (last slot).
"""

from __future__ import annotations

import math

import numpy as np

from brwsim.kernels import kernel, njit_cached

HDR = 14            # block header entries
EPS = 1e-7          # Keras' backend epsilon in the attention denominator
BATCH = 8           # children whose states are computed together
HIST = 64           # the row's last classes (window <= HIST - 1) and, last, g
_MARGIN = 1e-9      # relative margin of the cut-off: never drop a rank the caller would use


@kernel
def _state_width(nc, u):
    return 4 * u + nc + 2


@kernel
def head_width(n_classes, emb, units):
    """Entries of one level's head row (see the module docstring)."""
    sw = _state_width(n_classes, units)
    return (2 * (n_classes - 1) + sw + 1 + 8 * units + 3 + BATCH * sw
            + BATCH * max(4 * units, n_classes) + HIST)


@kernel
def _w32(data, o, k, n):
    """Slot range [a, b) of the packed float32 matrix of ``n`` entries at header entry ``k``."""
    a = o + int(data[o + k])
    return a, a + (n + 1) // 2


@kernel
def _axpy(a, w, b, n, out):
    """out[j] += a w[b + j] for j < n (1-d views: a separate kernel so that it vectorises)."""
    for j in range(n):
        out[j] += a * w[b + j]


@kernel
def _cell(z, g, c, h, u, add=True):
    """LSTM cell update from the pre-activations z (+ g if ``add``; gate order i, f, c, o).

    In place on c and h.
    """
    for j in range(u):
        zi, zf, zc, zo = z[j], z[u + j], z[2 * u + j], z[3 * u + j]
        if add:
            zi += g[j]
            zf += g[u + j]
            zc += g[2 * u + j]
            zo += g[3 * u + j]
        ig = 1.0 / (1.0 + math.exp(-zi))
        fg = 1.0 / (1.0 + math.exp(-zf))
        cc = math.tanh(zc)
        og = 1.0 / (1.0 + math.exp(-zo))
        cn = fg * c[j] + ig * cc
        c[j] = cn
        h[j] = og * math.tanh(cn)


@kernel
def _zero_state(data, o, row, head):
    """The zero initial state: h, c = 0, no attention mass."""
    nc = int(data[o])
    u = int(data[o + 2])
    s = 2 * (nc - 1)
    w = _state_width(nc, u)
    for j in range(s, s + w - 2):
        head[row, j] = 0.0
    head[row, s + w - 2] = -np.inf
    head[row, s + w - 1] = 0.0
    _fresh(data, o, row, head)


@kernel
def _fresh(data, o, row, head):
    """Mark the row's products and child batch as not computed (its state just changed)."""
    nc = int(data[o])
    u = int(data[o + 2])
    f = 2 * (nc - 1) + _state_width(nc, u)
    head[row, f] = 0.0
    head[row, f + 1 + 8 * u] = 0.0
    head[row, f + 2 + 8 * u] = 0.0


@kernel
def _products(data, o, row, head):
    """h1 R1 and h2 R2 of the state in ``head[row]`` (once per state)."""
    nc = int(data[o])
    u = int(data[o + 2])
    u4 = 4 * u
    s = 2 * (nc - 1)
    f = s + _state_width(nc, u)
    if head[row, f] == 1.0:
        return
    pr = head[row, f + 1:f + 1 + 2 * u4]
    for j in range(2 * u4):
        pr[j] = 0.0
    a, b = _w32(data, o, 6, u * u4)
    r1 = data[a:b].view(np.float32)
    a, b = _w32(data, o, 8, u * u4)
    r2 = data[a:b].view(np.float32)
    p1 = pr[:u4]
    p2 = pr[u4:]
    for i in range(u):
        _axpy(head[row, s + i], r1, i * u4, u4, p1)
    for i in range(u):
        _axpy(head[row, s + 2 * u + i], r2, i * u4, u4, p2)
    head[row, f] = 1.0


@kernel
def _batch(data, o, pd, head, r0, nb, cls0):
    """States of the children of ranks r0 .. r0 + nb - 1 of the state in ``head[pd]``.

    Into the row's batch area; their classes are the row's listed ones, or ``cls0`` for a
    single child (``cls0 >= 0``: the steps of a root window).
    """
    nc = int(data[o])
    u = int(data[o + 2])
    u4 = 4 * u
    v = nc - 1
    s = 2 * v
    sw = _state_width(nc, u)
    f = s + sw
    _products(data, o, pd, head)
    pr = head[pd, f + 1:f + 1 + 2 * u4]
    cb = f + 4 + 8 * u
    z0 = cb + BATCH * sw
    zw = max(u4, nc)
    ek = o + int(data[o + 3])
    b2 = o + int(data[o + 9])
    for k in range(nb):                 # layer 1: the parent's h1 R1 plus the class's row
        cls = cls0 if cls0 >= 0 else int(head[pd, v + r0 + k])
        st = cb + k * sw
        for j in range(sw):
            head[pd, st + j] = head[pd, s + j]
        e = ek + cls * u4
        _cell(data[e:e + u4], pr, head[pd, st + u:st + 2 * u], head[pd, st:st + u], u)
        z = head[pd, z0 + k * zw:z0 + k * zw + u4]
        for j in range(u4):
            z[j] = data[b2 + j] + pr[u4 + j]
    a, b = _w32(data, o, 7, u * u4)
    k2 = data[a:b].view(np.float32)
    for i in range(u):                  # layer 2: h1 K2 of every child, K2 read once
        for k in range(nb):
            _axpy(head[pd, cb + k * sw + i], k2, i * u4, u4, head[pd, z0 + k * zw:z0 + k * zw + u4])
    wa1 = o + int(data[o + 10])
    wa2 = o + int(data[o + 11])
    ea = o + int(data[o + 4])
    ew = o + int(data[o + 5])
    for k in range(nb):
        st = cb + k * sw
        z = head[pd, z0 + k * zw:z0 + k * zw + u4]
        _cell(z, pr[u4:], head[pd, st + 3 * u:st + 4 * u], head[pd, st + 2 * u:st + 3 * u], u,
              False)
    a, b = _w32(data, o, 12, 2 * u * nc)
    wo = data[a:b].view(np.float32)
    for k in range(nb):                 # this step's output contribution: the embedding's row
        cls = cls0 if cls0 >= 0 else int(head[pd, v + r0 + k])
        y = head[pd, z0 + k * zw:z0 + k * zw + nc]
        for j in range(nc):
            y[j] = data[ew + cls * nc + j]
    for i in range(2 * u):              # ... plus h1 and h2 times their rows, Wo read once
        hi = i if i < u else u + i      # h1 at [0, u), h2 at [2u, 3u) of a state
        for k in range(nb):
            _axpy(head[pd, cb + k * sw + hi], wo, i * nc, nc, head[pd, z0 + k * zw:z0 + k * zw + nc])
    for k in range(nb):                 # attention: G, D rescaled to the new maximum
        cls = cls0 if cls0 >= 0 else int(head[pd, v + r0 + k])
        st = cb + k * sw
        lg = data[ea + cls]
        for j in range(u):
            lg += head[pd, st + j] * data[wa1 + j] + head[pd, st + 2 * u + j] * data[wa2 + j]
        gg = head[pd, st + 4 * u:st + 4 * u + nc]
        im = st + 4 * u + nc
        m = head[pd, im]
        if lg > m:
            sc = math.exp(m - lg) if m > -np.inf else 0.0
            for j in range(nc):
                gg[j] *= sc
            head[pd, im + 1] *= sc
            head[pd, im] = lg
            m = lg
        at = math.exp(lg - m)
        y = head[pd, z0 + k * zw:z0 + k * zw + nc]
        for j in range(nc):
            gg[j] += at * y[j]
        head[pd, im + 1] += at
    head[pd, f + 1 + 8 * u] = r0
    head[pd, f + 2 + 8 * u] = nb


@kernel
def _take(data, o, pd, d, head, k):
    """Copy child k of the batch of ``head[pd]`` into the state of ``head[d]``."""
    nc = int(data[o])
    u = int(data[o + 2])
    s = 2 * (nc - 1)
    sw = _state_width(nc, u)
    cb = s + sw + 4 + 8 * u + k * sw
    for j in range(sw):
        head[d, s + j] = head[pd, cb + j]
    _fresh(data, o, d, head)


@kernel
def _listed(data, o, beta, row, head, min_logq):
    """Sorted tempered log-probabilities of the characters above ``min_logq`` into head[row].

    Ranks by q descending, ties by ascending class; returns the number listed.
    """
    nc = int(data[o])
    u = int(data[o + 2])
    v = nc - 1
    s = 2 * v
    gg = s + 4 * u
    im = gg + nc
    inv = 1.0 / (head[row, im + 1] + EPS)
    bo = o + int(data[o + 13])
    zmax = -np.inf
    for c in range(1, nc):
        z = head[row, gg + c] * inv + data[bo + c]
        if z > zmax:
            zmax = z
    tot = 0.0
    for c in range(1, nc):
        tot += math.exp(beta * (head[row, gg + c] * inv + data[bo + c] - zmax))
    lz = beta * zmax + math.log(tot)
    thr = min_logq - _MARGIN * (1.0 + abs(min_logq)) if min_logq > -np.inf else -np.inf
    # batch size of the children: with a finite cut, a tree pass visits every listed rank
    # in order; without one (walks, policies) the caller may want any single rank
    head[row, s + _state_width(nc, u) + 3 + 8 * u] = BATCH if min_logq > -np.inf else 1
    n = 0
    for c in range(1, nc):
        lq = beta * (head[row, gg + c] * inv + data[bo + c]) - lz
        if lq >= thr:
            head[row, n] = lq
            head[row, v + n] = c
            n += 1
    gap = 1                             # shell sort, descending by (lq, -c)
    while gap * 3 + 1 < n:
        gap = gap * 3 + 1
    while gap >= 1:
        for i in range(gap, n):
            lq = head[row, i]
            c = head[row, v + i]
            k = i
            while k >= gap and (head[row, k - gap] < lq
                                or (head[row, k - gap] == lq and head[row, v + k - gap] > c)):
                head[row, k] = head[row, k - gap]
                head[row, v + k] = head[row, v + k - gap]
                k -= gap
            head[row, k] = lq
            head[row, v + k] = c
        gap //= 3
    return n


@kernel
def _rerun(data, o, d, head, hb, w):
    """The zero state advanced over the ``w`` classes at ``head[d, hb:hb + w]``."""
    _zero_state(data, o, d, head)
    for t in range(w):
        _batch(data, o, d, head, 0, 1, int(head[d, hb + t]))
        _take(data, o, d, d, head, 0)


@kernel
def lstm_init(data, o, beta, carry, cprog, d, pd, draw, rank, n_list, min_logq, head, start):
    """Set up the node of level ``d``: its state, then its listed ranks; returns their number.

    A node keeps its last W classes (W = cprog[2], textgenrnn's window) and g, the number
    of characters its state carries beyond them. ``pd >= 0``: the parent's level (with
    ``n_list`` listed ranks) and the child of rank ``rank``: g is the parent's plus one;
    if that exceeds ``carry`` the network is rerun from the zero state over the last W
    classes (textgenrnn's own prediction) and g = 0, otherwise the parent's state is
    advanced by the class (from the parent's batch, computed here if the rank is not in
    it). ``draw`` (a ROOT_DRAW root): the root window of the context program's classes
    starting at ``start``, g = 0. Otherwise (ROOT_PRESET) the state, the classes and g are
    already in ``head[d]``. So g = depth mod (carry + 1) below a drawn root.
    """
    nc = int(data[o])
    u = int(data[o + 2])
    f = 2 * (nc - 1) + _state_width(nc, u)
    w = int(cprog[2])
    hb = head.shape[1] - HIST           # the row's last W classes, oldest first
    gs = hb + HIST - 1                  # g
    if pd >= 0:
        r = max(min(rank, n_list - 1), 0)
        for j in range(w - 1):
            head[d, hb + j] = head[pd, hb + j + 1]
        head[d, hb + w - 1] = head[pd, nc - 1 + r]
        g = head[pd, gs] + 1.0
        if g > carry:
            _rerun(data, o, d, head, hb, w)
            g = 0.0
        else:
            r0 = int(head[pd, f + 1 + 8 * u])
            nb = int(head[pd, f + 2 + 8 * u])
            if not r0 <= r < r0 + nb:
                r0 = r
                _batch(data, o, pd, head, r, max(min(int(head[pd, f + 3 + 8 * u]), n_list - r), 1),
                       -1)
            _take(data, o, pd, d, head, r - r0)
        head[d, gs] = g
    elif draw:
        for j in range(w):
            head[d, hb + j] = cprog[5 + start + j]
        _rerun(data, o, d, head, hb, w)
        head[d, gs] = 0.0
    else:
        _fresh(data, o, d, head)
    return _listed(data, o, beta, d, head, min_logq)


@njit_cached
def lstm_probs(data, o, classes, beta, out):
    """The distribution (by class, ``out[0]`` = 0) after running over ``classes`` from zero.

    The plain Python-facing form: one state row, every rank listed.
    """
    nc = int(data[o])
    head = np.empty((1, head_width(nc, int(data[o + 1]), int(data[o + 2]))))
    _zero_state(data, o, 0, head)
    for t in range(classes.shape[0]):
        _batch(data, o, 0, head, 0, 1, classes[t])
        _take(data, o, 0, 0, head, 0)
    n = _listed(data, o, beta, 0, head, -np.inf)
    out[0] = 0.0
    for r in range(n):
        out[int(head[0, nc - 1 + r])] = math.exp(head[0, r])
