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

A node's state is (h1, c1, h2, c2) after its last character, G, M and D: a node costs
one step of both layers, one attention update and the listing of its distribution. The
products h1 R1 and h2 R2 of the recurrent kernels are the same for all children of a
node, so they are computed once per node, when its first child is set up (leaves never
pay them). The large products run in float32 (the file's own precision, as Keras runs
the model), the rest in float64.

The node's distribution is the softmax restricted to the characters (class 0, which
textgenrnn's sampler never emits, is dropped and the rest renormalised), tempered by
``beta``: q_c = exp(beta z_c) / sum_{c >= 1} exp(beta z_c).

The weights live in one float64 block at offset ``o`` of the spec's ``data`` (offsets
relative to ``o``): ``[0]`` C, ``[1]`` E, ``[2]`` u, then offsets of: ``[3]`` the layer-1
input gates of every class (C x 4u, e_c K1 + b1), ``[4]`` the attention logit of every
embedding (C, e_c . w_e), ``[5]`` the output contribution of every embedding (C x C,
e_c Wo_e), ``[6]`` R1, ``[7]`` K2, ``[8]`` R2 (u x 4u each), ``[9]`` b2 (4u), ``[10]``,
``[11]`` the attention weights of h1 and h2 (u each), ``[12]``, ``[13]`` the output kernel
rows of h1 and h2 (u x C each), ``[14]`` the output bias (C). Matrices are row-major;
R1, K2, R2 and the output rows are float32 packed two per float64 slot.

Layout of a level's head row (``head_width`` entries), V = C - 1 characters: ``[0, V)``
the listed log-probabilities in rank order, ``[V, 2V)`` their classes; at S = 2V the
state h1, c1, h2, c2 (u each), G (C), M, D; then a flag (1 once the row's recurrent
products are computed), the products h1 R1 and h2 R2 (8u float32), and float32 scratch:
x (2u), gates (4u), the output contribution (C).
"""

from __future__ import annotations

import math

import numpy as np

from brwsim.kernels import kernel, njit_cached

HDR = 15            # block header entries
EPS = 1e-7          # Keras' backend epsilon in the attention denominator
_MARGIN = 1e-9      # relative margin of the cut-off: never drop a rank the caller would use


@kernel
def _state_width(nc, u):
    return 4 * u + nc + 2


@kernel
def head_width(n_classes, emb, units):
    """Entries of one level's head row (see the module docstring)."""
    return (2 * (n_classes - 1) + _state_width(n_classes, units) + 1 + 4 * units
            + units + 2 * units + (n_classes + 1) // 2 + 1)


@kernel
def _acc(x, w, n_in, n_out, out):
    """out[j] += sum_i x[i] w[i n_out + j] (float32 views)."""
    for i in range(n_in):
        xi = x[i]
        b = i * n_out
        for j in range(n_out):
            out[j] += xi * w[b + j]


@kernel
def _cell(z, g, c, h, u):
    """LSTM cell update from the pre-activations z + g (i, f, c, o), in place on c and h."""
    for j in range(u):
        ig = 1.0 / (1.0 + math.exp(-(z[j] + g[j])))
        fg = 1.0 / (1.0 + math.exp(-(z[u + j] + g[u + j])))
        cc = math.tanh(z[2 * u + j] + g[2 * u + j])
        og = 1.0 / (1.0 + math.exp(-(z[3 * u + j] + g[3 * u + j])))
        cn = fg * c[j] + ig * cc
        c[j] = cn
        h[j] = og * math.tanh(cn)


@kernel
def _w32(data, o, k, n):
    """Offset (in float64 slots) of the packed float32 matrix at header entry ``k``."""
    return o + int(data[o + k]), (n + 1) // 2


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
    head[row, s + w] = 0.0              # recurrent products not computed


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
    pr = head[row, f + 1:f + 1 + u4].view(np.float32)
    xs = head[row, f + 1 + u4:f + 1 + u4 + u].view(np.float32)
    for j in range(2 * u4):
        pr[j] = 0.0
    for j in range(u):
        xs[j] = head[row, s + j]
        xs[u + j] = head[row, s + 2 * u + j]
    a, n = _w32(data, o, 6, u * u4)
    _acc(xs[:u], data[a:a + n].view(np.float32), u, u4, pr[:u4])
    a, n = _w32(data, o, 8, u * u4)
    _acc(xs[u:], data[a:a + n].view(np.float32), u, u4, pr[u4:])
    head[row, f] = 1.0


@kernel
def _step(data, o, pd, d, head, tok):
    """State of ``head[d]``: the state of ``head[pd]`` advanced by class ``tok`` (pd may be d)."""
    nc = int(data[o])
    u = int(data[o + 2])
    u4 = 4 * u
    s = 2 * (nc - 1)
    sw = _state_width(nc, u)
    f = s + sw
    _products(data, o, pd, head)
    if pd != d:
        for j in range(s, f + 1 + u4):  # state, flag and products (read below)
            head[d, j] = head[pd, j]
    pr = head[d, f + 1:f + 1 + u4].view(np.float32)
    xs = head[d, f + 1 + u4:f + 1 + u4 + u].view(np.float32)
    g0 = f + 1 + u4 + u
    g = head[d, g0:g0 + 2 * u].view(np.float32)
    y0 = f + 1 + u4 + 3 * u
    y = head[d, y0:y0 + (nc + 1) // 2].view(np.float32)
    h1 = head[d, s:s + u]
    c1 = head[d, s + u:s + 2 * u]
    h2 = head[d, s + 2 * u:s + 3 * u]
    c2 = head[d, s + 3 * u:s + 4 * u]
    ek = o + int(data[o + 3]) + tok * u4
    _cell(data[ek:ek + u4], pr[:u4], c1, h1, u)
    # layer 2: b2 + h2 R2 (the parent's) + h1 K2
    for j in range(u4):
        g[j] = 0.0
    for j in range(u):
        xs[j] = h1[j]
    a, n = _w32(data, o, 7, u * u4)
    _acc(xs[:u], data[a:a + n].view(np.float32), u, u4, g)
    for j in range(u4):
        g[j] += pr[u4 + j]
    b2 = o + int(data[o + 9])
    _cell(data[b2:b2 + u4], g, c2, h2, u)
    head[d, f] = 0.0                    # this state's own products are not computed yet
    # attention logit, then G, D rescaled to the new maximum
    wa1 = o + int(data[o + 10])
    wa2 = o + int(data[o + 11])
    lg = data[o + int(data[o + 4]) + tok]
    for j in range(u):
        lg += h1[j] * data[wa1 + j] + h2[j] * data[wa2 + j]
    gg = head[d, s + 4 * u:s + 4 * u + nc]
    im = s + 4 * u + nc
    m = head[d, im]
    if lg > m:
        sc = math.exp(m - lg) if m > -np.inf else 0.0
        for j in range(nc):
            gg[j] *= sc
        head[d, im + 1] *= sc
        head[d, im] = lg
        m = lg
    at = math.exp(lg - m)
    # this step's output contribution x_t Wo: the embedding's row, then h1 and h2
    for j in range(nc):
        y[j] = 0.0
    for j in range(u):
        xs[u + j] = h2[j]
    a, n = _w32(data, o, 12, u * nc)
    _acc(xs[:u], data[a:a + n].view(np.float32), u, nc, y[:nc])
    a, n = _w32(data, o, 13, u * nc)
    _acc(xs[u:], data[a:a + n].view(np.float32), u, nc, y[:nc])
    ew = o + int(data[o + 5]) + tok * nc
    for j in range(nc):
        gg[j] += at * (data[ew + j] + y[j])
    head[d, im + 1] += at


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
    bo = o + int(data[o + 14])
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
def lstm_init(data, o, beta, cprog, d, pd, draw, min_logq, head, tok):
    """Set up the node of level ``d``: its state, then its listed ranks; returns their number.

    ``pd >= 0``: the parent's level; the state is the parent's advanced by the class
    ``tok`` of the child's rank. ROOT_DRAW: the zero state advanced over the root window
    starting at position ``tok`` of the context program's classes (``draw`` true). Any
    other root (ROOT_PRESET): the state is already in ``head[d]`` (written by the caller).
    """
    if pd >= 0:
        _step(data, o, pd, d, head, tok)
    elif draw:
        _zero_state(data, o, d, head)
        for t in range(int(cprog[2])):
            _step(data, o, d, d, head, int(cprog[5 + tok + t]))
    else:
        head[d, 2 * (int(data[o]) - 1) + _state_width(int(data[o]), int(data[o + 2]))] = 0.0
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
        _step(data, o, 0, 0, head, classes[t])
    n = _listed(data, o, beta, 0, head, -np.inf)
    out[0] = 0.0
    for r in range(n):
        out[int(head[0, nc - 1 + r])] = math.exp(head[0, r])

