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

A node's state is (h1, h2, c1, c2) after its last character, G, M and D. A node costs
one step of both layers from its parent's state (or, every ``carry + 1`` levels, a rerun
over its last W characters: see :func:`lstm_init`), one attention update and the listing of
its distribution. Children share their parent's recurrent products p1 = h1 R1 and p2 =
h2 R2 + b2 (computed once per parent, :func:`_products`), and the caller's cut-off already
says which ranks will be visited, so the states of up to ``BATCH`` consecutive children are
computed together when the first of them is set up (into the parent's row, :func:`_batch`):
layer 1 is p1 plus the class's row of e_c K1 + b1; the children's h1 K2 is one dense
product of nb rows, then layer 2 from p2; their a (h1, h2) Wo one more, added to G. Only a
tree pass (a finite cut-off: every listed rank will be visited, in rank order) batches;
walks and policies (no cut-off) compute one child at a time. (Computing, in the batch, the
products of the children that the pass will expand as one dense product too was measured
at no gain: most parents have one child.)

Weights are the file's float32 values, widened exactly to float64; every sum accumulates
in float64. The dense products (:func:`_mm`) are register-blocked loops: blocks of up to 4
rows (children) times 4 inputs per pass over the outputs, so each weight is loaded once
per block of rows and each output once per 4 inputs, and the inner loop over the outputs
vectorises with fused multiply-adds (:data:`brwsim.kernels.dense_kernel`). About 3e5
multiply-adds per tree node: a single row is bound by the weights' memory bandwidth
(about 13e9 multiply-adds/s on the AMD EPYC of the benchmarks), 4 rows by arithmetic
(about 25e9/s). The gates use a branch-free exp (:func:`_exp`, within 4e-16 relative), so
that the loops over the units vectorise too; sigmoid = 1 / (1 + exp(-x)), tanh = 1 - 2 / (1
+ exp(2x)). A rerun runs layer 1 step by step (h1 R1), then layer 2 over chunks of
``BATCH`` steps with their h1 K2 as one dense product, and keeps G as the sum of a_t e_t Wo
(rows of the embedding table) plus (sum_t a_t (h1_t, h2_t)) Wo, one product at the end.

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

Layout of a level's head row (``head_width`` entries, offsets from :func:`_layout`), V = C
- 1 characters, SW = 4u + C + 2: ``[0, V)`` the listed log-probabilities in rank order,
``[V, 2V)`` their classes; at S = 2V the state (h1, h2, c1, c2, G, M, D: SW entries); a flag
(1 once the row's recurrent products are computed) and the products p1, p2 (8u); the
first rank and the number of the children in the batch, and the batch size for this
row's children (3); the children's states (BATCH x SW); scratch: the pre-activations
(BATCH rows of 4u + 8, a stride off multiples of 4 KiB), the inputs of the output layer
(BATCH x 2u) and the listing's (2C); the node's last classes (W of ``HIST`` slots) and g,
the characters carried beyond them (last slot).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from brwsim.kernels import dense_kernel, kernel, njit_cached
from brwsim.kernels.kinds import LSTM, lowered_cut

HDR = 14            # block header entries
EPS = 1e-7          # Keras' backend epsilon in the attention denominator
BATCH = 8           # children whose states are computed together
HIST = 64           # the row's last classes (window <= HIST - 1) and, last, g
# Parameter slots of an LSTM component (the family writes them by these names)
LSTM_BETA = 0       # fpar: 1 / temperature
LSTM_CARRY = 1      # fpar: classes carried past the window
#: the slots the kind owns (tests/unit/test_kind_table.py checks the family writes these)
LAYOUT = {LSTM: ((LSTM_BETA, LSTM_CARRY), ())}

# exp(x) = 2**k exp(r), k = round(x / ln 2), |r| <= ln(2) / 2 (Cody-Waite), exp(r) by its
# Taylor polynomial of degree 12 (truncation below 2e-16 relative): branch-free, so that
# LLVM vectorises the loops that call it (numba has no vector libm here).
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01    # ln 2 to 32 bits: k ln2_hi is exact
_LN2_LO = 1.90821492927058770002e-10
_SHIFT = 6755399441055744.0             # 1.5 * 2**52: x / ln2 + _SHIFT rounds to an integer
_SHIFT_BITS = 0x4338000000000000        # its bits; bits(x / ln2 + _SHIFT) - _SHIFT_BITS = k
_EXP_MAX = 708.0                        # |x| clamped: 2**k stays a normal number
_T2, _T3, _T4, _T5, _T6, _T7 = (1.0 / math.factorial(i) for i in range(2, 8))
_T8, _T9, _T10, _T11, _T12 = (1.0 / math.factorial(i) for i in range(8, 13))


@intrinsic
def _bits(typingctx, x):
    """The IEEE bits of a float64 as an int64 (a bit cast)."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


@intrinsic
def _from_bits(typingctx, i):
    """The float64 whose IEEE bits are the int64 ``i`` (a bit cast)."""
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@dense_kernel
def _exp(x):
    """exp(x) within 4e-16 relative for |x| <= 708 (x clamped there), branch-free."""
    x = min(_EXP_MAX, x)
    x = max(-_EXP_MAX, x)
    t = x * _LOG2E + _SHIFT
    kf = t - _SHIFT
    r = x - kf * _LN2_HI
    r = r - kf * _LN2_LO
    p = _T12
    p = p * r + _T11
    p = p * r + _T10
    p = p * r + _T9
    p = p * r + _T8
    p = p * r + _T7
    p = p * r + _T6
    p = p * r + _T5
    p = p * r + _T4
    p = p * r + _T3
    p = p * r + _T2
    p = p * r + 1.0
    p = p * r + 1.0
    return p * _from_bits((_bits(t) - _SHIFT_BITS + 1023) << 52)


@dense_kernel
def _tanh(x):
    """tanh(x) = 1 - 2 / (1 + exp(2x)), within 1e-16 absolute."""
    return 1.0 - 2.0 / (1.0 + _exp(2.0 * x))


@kernel
def _state_width(nc, u):
    return 4 * u + nc + 2


@kernel
def _zrow(u):
    """Stride of the pre-activation scratch rows: 4u padded by 8, off multiples of 4 KiB."""
    return 4 * u + 8


@kernel
def _layout(nc, u):
    """Offsets in a head row (see the module docstring).

    (s, sw, f, cb, z0, zr, x0, l0): the state and its width, the products flag (the
    products follow it, then r0, nb and the batch size), the children's states, the
    pre-activation scratch and its row stride, the scratch of the output layer's inputs
    and that of the listing (2C).
    """
    s = 2 * (nc - 1)
    sw = _state_width(nc, u)
    f = s + sw
    cb = f + 4 + 8 * u
    z0 = cb + BATCH * sw
    zr = _zrow(u)
    x0 = z0 + BATCH * zr
    return s, sw, f, cb, z0, zr, x0, x0 + BATCH * 2 * u


@kernel
def head_width(n_classes, emb, units):
    """Entries of one level's head row (see the module docstring)."""
    l0 = _layout(n_classes, units)[7]
    return l0 + 2 * n_classes + HIST


@kernel
def _w32(data, o, k, n):
    """Slot range [a, b) of the packed float32 matrix of ``n`` entries at header entry ``k``."""
    a = o + int(data[o + k])
    return a, a + (n + 1) // 2


@dense_kernel
def _mm(x, xs, xst, m, k, w, n, out, os, ost):
    """out[os + r ost + j] += sum_i x[xs + r xst + i] w[i n + j] for r < m, i < k, j < n.

    The dense product of ``m`` input rows and a row-major k x n float32 matrix, added to
    ``m`` output rows. Register-blocked: blocks of up to 4 rows (then one block of the
    remaining 3, 2 or 1) and 4 inputs per pass over the outputs, so each weight is loaded
    once per block of rows and each output once per 4 inputs; the inner loop over j
    vectorises, with fused multiply-adds.

    Parameters
    ----------
    x : numpy.ndarray
        float64, 1-d: input row r is ``x[xs + r xst:xs + r xst + k]``.
    xs, xst, m, k : int
        Offset and stride of the input rows, their number and length.
    w : numpy.ndarray
        float32, 1-d view of the matrix (widened exactly to float64; every sum in float64).
    n : int
        Columns of ``w``: the length of the output rows.
    out : numpy.ndarray
        float64, 1-d: output row r is ``out[os + r ost:os + r ost + n]``, added to in place.
        May be the same array as ``x``; the input rows must not overlap the output rows.
    os, ost : int
        Offset and stride of the output rows.
    """
    r = 0
    k4 = k - k % 4
    while r + 4 <= m:
        a = os + r * ost
        o0 = out[a:a + n]
        o1 = out[a + ost:a + ost + n]
        o2 = out[a + 2 * ost:a + 2 * ost + n]
        o3 = out[a + 3 * ost:a + 3 * ost + n]
        b0 = xs + r * xst
        b1 = b0 + xst
        b2 = b1 + xst
        b3 = b2 + xst
        for i in range(0, k4, 4):
            q = i * n
            w0 = w[q:q + n]
            w1 = w[q + n:q + 2 * n]
            w2 = w[q + 2 * n:q + 3 * n]
            w3 = w[q + 3 * n:q + 4 * n]
            a00, a01, a02, a03 = x[b0 + i], x[b0 + i + 1], x[b0 + i + 2], x[b0 + i + 3]
            a10, a11, a12, a13 = x[b1 + i], x[b1 + i + 1], x[b1 + i + 2], x[b1 + i + 3]
            a20, a21, a22, a23 = x[b2 + i], x[b2 + i + 1], x[b2 + i + 2], x[b2 + i + 3]
            a30, a31, a32, a33 = x[b3 + i], x[b3 + i + 1], x[b3 + i + 2], x[b3 + i + 3]
            for j in range(n):
                y0 = np.float64(w0[j])
                y1 = np.float64(w1[j])
                y2 = np.float64(w2[j])
                y3 = np.float64(w3[j])
                o0[j] += a00 * y0 + a01 * y1 + a02 * y2 + a03 * y3
                o1[j] += a10 * y0 + a11 * y1 + a12 * y2 + a13 * y3
                o2[j] += a20 * y0 + a21 * y1 + a22 * y2 + a23 * y3
                o3[j] += a30 * y0 + a31 * y1 + a32 * y2 + a33 * y3
        for i in range(k4, k):
            w0 = w[i * n:(i + 1) * n]
            a00, a10, a20, a30 = x[b0 + i], x[b1 + i], x[b2 + i], x[b3 + i]
            for j in range(n):
                y0 = np.float64(w0[j])
                o0[j] += a00 * y0
                o1[j] += a10 * y0
                o2[j] += a20 * y0
                o3[j] += a30 * y0
        r += 4
    if m - r == 3:
        a = os + r * ost
        o0 = out[a:a + n]
        o1 = out[a + ost:a + ost + n]
        o2 = out[a + 2 * ost:a + 2 * ost + n]
        b0 = xs + r * xst
        b1 = b0 + xst
        b2 = b1 + xst
        for i in range(0, k4, 4):
            q = i * n
            w0 = w[q:q + n]
            w1 = w[q + n:q + 2 * n]
            w2 = w[q + 2 * n:q + 3 * n]
            w3 = w[q + 3 * n:q + 4 * n]
            a00, a01, a02, a03 = x[b0 + i], x[b0 + i + 1], x[b0 + i + 2], x[b0 + i + 3]
            a10, a11, a12, a13 = x[b1 + i], x[b1 + i + 1], x[b1 + i + 2], x[b1 + i + 3]
            a20, a21, a22, a23 = x[b2 + i], x[b2 + i + 1], x[b2 + i + 2], x[b2 + i + 3]
            for j in range(n):
                y0 = np.float64(w0[j])
                y1 = np.float64(w1[j])
                y2 = np.float64(w2[j])
                y3 = np.float64(w3[j])
                o0[j] += a00 * y0 + a01 * y1 + a02 * y2 + a03 * y3
                o1[j] += a10 * y0 + a11 * y1 + a12 * y2 + a13 * y3
                o2[j] += a20 * y0 + a21 * y1 + a22 * y2 + a23 * y3
        for i in range(k4, k):
            w0 = w[i * n:(i + 1) * n]
            a00, a10, a20 = x[b0 + i], x[b1 + i], x[b2 + i]
            for j in range(n):
                y0 = np.float64(w0[j])
                o0[j] += a00 * y0
                o1[j] += a10 * y0
                o2[j] += a20 * y0
        r += 3
    if r + 2 <= m:
        a = os + r * ost
        o0 = out[a:a + n]
        o1 = out[a + ost:a + ost + n]
        b0 = xs + r * xst
        b1 = b0 + xst
        for i in range(0, k4, 4):
            q = i * n
            w0 = w[q:q + n]
            w1 = w[q + n:q + 2 * n]
            w2 = w[q + 2 * n:q + 3 * n]
            w3 = w[q + 3 * n:q + 4 * n]
            a00, a01, a02, a03 = x[b0 + i], x[b0 + i + 1], x[b0 + i + 2], x[b0 + i + 3]
            a10, a11, a12, a13 = x[b1 + i], x[b1 + i + 1], x[b1 + i + 2], x[b1 + i + 3]
            for j in range(n):
                y0 = np.float64(w0[j])
                y1 = np.float64(w1[j])
                y2 = np.float64(w2[j])
                y3 = np.float64(w3[j])
                o0[j] += a00 * y0 + a01 * y1 + a02 * y2 + a03 * y3
                o1[j] += a10 * y0 + a11 * y1 + a12 * y2 + a13 * y3
        for i in range(k4, k):
            w0 = w[i * n:(i + 1) * n]
            a00, a10 = x[b0 + i], x[b1 + i]
            for j in range(n):
                y0 = np.float64(w0[j])
                o0[j] += a00 * y0
                o1[j] += a10 * y0
        r += 2
    if r < m:
        a = os + r * ost
        o0 = out[a:a + n]
        b0 = xs + r * xst
        for i in range(0, k4, 4):
            q = i * n
            w0 = w[q:q + n]
            w1 = w[q + n:q + 2 * n]
            w2 = w[q + 2 * n:q + 3 * n]
            w3 = w[q + 3 * n:q + 4 * n]
            a00, a01, a02, a03 = x[b0 + i], x[b0 + i + 1], x[b0 + i + 2], x[b0 + i + 3]
            for j in range(n):
                o0[j] += (a00 * np.float64(w0[j]) + a01 * np.float64(w1[j])
                          + a02 * np.float64(w2[j]) + a03 * np.float64(w3[j]))
        for i in range(k4, k):
            w0 = w[i * n:(i + 1) * n]
            a00 = x[b0 + i]
            for j in range(n):
                o0[j] += a00 * np.float64(w0[j])


@dense_kernel
def _cell(z, c, h, u):
    """LSTM cell update from the pre-activations ``z`` (4u; gate order i, f, c, o).

    In place on c and h (u each); z is overwritten by the gates.
    """
    for j in range(2 * u):
        z[j] = 1.0 / (1.0 + _exp(-z[j]))
    for j in range(2 * u, 3 * u):
        z[j] = _tanh(z[j])
    for j in range(3 * u, 4 * u):
        z[j] = 1.0 / (1.0 + _exp(-z[j]))
    for j in range(u):
        cn = z[u + j] * c[j] + z[j] * z[2 * u + j]
        c[j] = cn
        h[j] = z[3 * u + j] * _tanh(cn)


@kernel
def _dot(a, b, n):
    """sum_j a[j] b[j] over j < n (four partial sums)."""
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    j = 0
    while j + 4 <= n:
        s0 += a[j] * b[j]
        s1 += a[j + 1] * b[j + 1]
        s2 += a[j + 2] * b[j + 2]
        s3 += a[j + 3] * b[j + 3]
        j += 4
    while j < n:
        s0 += a[j] * b[j]
        j += 1
    return (s0 + s1) + (s2 + s3)


@kernel
def _fresh(data, o, row, head):
    """Mark the row's products and child batch as not computed (its state just changed)."""
    _s, _sw, f, _cb, _z0, _zr, _x0, _l0 = _layout(int(data[o]), int(data[o + 2]))
    u = int(data[o + 2])
    head[row, f] = 0.0
    head[row, f + 1 + 8 * u] = 0.0
    head[row, f + 2 + 8 * u] = 0.0


@kernel
def _products(data, o, row, head):
    """h1 R1 and h2 R2 + b2 of the state in ``head[row]`` (once per state)."""
    u = int(data[o + 2])
    u4 = 4 * u
    s, _sw, f, _cb, _z0, _zr, _x0, _l0 = _layout(int(data[o]), u)
    if head[row, f] == 1.0:
        return
    hr = head[row]
    p = f + 1
    b2 = o + int(data[o + 9])
    for j in range(u4):
        hr[p + j] = 0.0
        hr[p + u4 + j] = data[b2 + j]
    a, b = _w32(data, o, 6, u * u4)
    _mm(hr, s, 0, 1, u, data[a:b].view(np.float32), u4, hr, p, 0)
    a, b = _w32(data, o, 8, u * u4)
    _mm(hr, s + u, 0, 1, u, data[a:b].view(np.float32), u4, hr, p + u4, 0)
    hr[f] = 1.0


@dense_kernel
def _lse(data, o, beta, hr, g0, zz, ex):
    """(max_c z_c, log sum_c exp(beta z_c)) over the characters c >= 1 of the state whose G
    starts at ``hr[g0]`` (z_c = G_c / (D + eps) + bo_c, into ``zz``; ``ex`` is scratch)."""
    nc = int(data[o])
    v = nc - 1
    inv = 1.0 / (hr[g0 + nc + 1] + EPS)
    bo = o + int(data[o + 13])
    g = hr[g0 + 1:g0 + nc]
    b = data[bo + 1:bo + nc]
    for c in range(v):
        zz[c] = g[c] * inv + b[c]
    m0 = zz[0]
    m1 = m0
    m2 = m0
    m3 = m0
    c = 0
    while c + 4 <= v:
        m0 = max(m0, zz[c])
        m1 = max(m1, zz[c + 1])
        m2 = max(m2, zz[c + 2])
        m3 = max(m3, zz[c + 3])
        c += 4
    while c < v:
        m0 = max(m0, zz[c])
        c += 1
    zmax = max(max(m0, m1), max(m2, m3))
    for c in range(v):
        ex[c] = _exp(beta * (zz[c] - zmax))
    t0 = 0.0
    t1 = 0.0
    t2 = 0.0
    t3 = 0.0
    c = 0
    while c + 4 <= v:
        t0 += ex[c]
        t1 += ex[c + 1]
        t2 += ex[c + 2]
        t3 += ex[c + 3]
        c += 4
    while c < v:
        t0 += ex[c]
        c += 1
    return zmax, beta * zmax + math.log((t0 + t1) + (t2 + t3))


@kernel
def _batch(data, o, pd, head, r0, nb):
    """States of the children of ranks r0 .. r0 + nb - 1 of the state in ``head[pd]``.

    Into the row's batch area: layer 1 from the parent's h1 R1 and the class's row, then
    the nb children's h1 K2 in one dense product, layer 2, the attention update and the
    nb children's (h1, h2) Wo in one dense product.
    """
    nc = int(data[o])
    u = int(data[o + 2])
    u4 = 4 * u
    v = nc - 1
    s, sw, f, cb, z0, zr, x0, _l0 = _layout(nc, u)
    _products(data, o, pd, head)
    hr = head[pd]
    p = f + 1
    ek = o + int(data[o + 3])
    for k in range(nb):                 # layer 1: the parent's h1 R1 plus the class's row
        e = ek + int(hr[v + r0 + k]) * u4
        st = cb + k * sw
        z = hr[z0 + k * zr:z0 + k * zr + u4]
        for j in range(u4):
            z[j] = data[e + j] + hr[p + j]
        for j in range(u):
            hr[st + 2 * u + j] = hr[s + 2 * u + j]
        _cell(z, hr[st + 2 * u:st + 3 * u], hr[st:st + u], u)
    for k in range(nb):                 # layer 2: parent's h2 R2 + b2, plus h1 K2 of each child
        for j in range(u4):
            hr[z0 + k * zr + j] = hr[p + u4 + j]
    a, b = _w32(data, o, 7, u * u4)
    _mm(hr, cb, sw, nb, u, data[a:b].view(np.float32), u4, hr, z0, zr)
    for k in range(nb):
        st = cb + k * sw
        for j in range(u):
            hr[st + 3 * u + j] = hr[s + 3 * u + j]
        _cell(hr[z0 + k * zr:z0 + k * zr + u4], hr[st + 3 * u:st + 4 * u],
              hr[st + u:st + 2 * u], u)
    wa1 = o + int(data[o + 10])
    wa2 = o + int(data[o + 11])
    ea = o + int(data[o + 4])
    ew = o + int(data[o + 5])
    m = hr[s + u4 + nc]
    dd = hr[s + u4 + nc + 1]
    for k in range(nb):                 # attention: G, D rescaled to the new maximum
        cls = int(hr[v + r0 + k])
        st = cb + k * sw
        lg = (data[ea + cls] + _dot(hr[st:st + u], data[wa1:wa1 + u], u)
              + _dot(hr[st + u:st + 2 * u], data[wa2:wa2 + u], u))
        if lg > m:
            sc = math.exp(m - lg) if m > -np.inf else 0.0
            at = 1.0
            hr[st + u4 + nc] = lg
        else:
            sc = 1.0
            at = math.exp(lg - m)
            hr[st + u4 + nc] = m
        hr[st + u4 + nc + 1] = dd * sc + at
        g = hr[st + u4:st + u4 + nc]
        gp = hr[s + u4:s + u4 + nc]
        y = data[ew + cls * nc:ew + (cls + 1) * nc]
        for j in range(nc):             # G: the parent's, plus the embedding's output row
            g[j] = sc * gp[j] + at * y[j]
        xk = hr[x0 + k * 2 * u:x0 + (k + 1) * 2 * u]
        for j in range(2 * u):
            xk[j] = at * hr[st + j]
    # ... plus a (h1, h2) Wo of every child
    a, b = _w32(data, o, 12, 2 * u * nc)
    _mm(hr, x0, 2 * u, nb, 2 * u, data[a:b].view(np.float32), nc, hr, cb + u4, sw)
    hr[f + 1 + 8 * u] = r0
    hr[f + 2 + 8 * u] = nb


@kernel
def _take(data, o, pd, d, head, k):
    """Copy child k of the batch of ``head[pd]`` into the state of ``head[d]``."""
    s, sw, _f, cb, _z0, _zr, _x0, _l0 = _layout(int(data[o]), int(data[o + 2]))
    dst = head[d, s:s + sw]
    src = head[pd, cb + k * sw:cb + (k + 1) * sw]
    for j in range(sw):
        dst[j] = src[j]
    _fresh(data, o, d, head)


@kernel
def _rerun(data, o, d, head, cls, c0, w):
    """The zero state advanced over the ``w`` classes ``cls[c0:c0 + w]``, into ``head[d]``.

    Layer 1 runs step by step, then layer 2 over chunks of ``BATCH`` steps with their h1 K2
    in one dense product; the attention keeps the sums of a_t e_t Wo (rows of the
    embedding table) and of a_t (h1_t, h2_t), the latter times Wo once at the end.
    """
    nc = int(data[o])
    u = int(data[o + 2])
    u4 = 4 * u
    s, sw, _f, cb, z0, zr, x0, _l0 = _layout(nc, u)
    hr = head[d]
    for j in range(s, s + sw - 2):
        hr[j] = 0.0
    for j in range(2 * u):
        hr[x0 + j] = 0.0
    m = -np.inf
    dd = 0.0
    ek = o + int(data[o + 3])
    ea = o + int(data[o + 4])
    ew = o + int(data[o + 5])
    b2 = o + int(data[o + 9])
    wa1 = o + int(data[o + 10])
    wa2 = o + int(data[o + 11])
    a, b = _w32(data, o, 6, u * u4)
    r1 = data[a:b].view(np.float32)
    a, b = _w32(data, o, 7, u * u4)
    k2 = data[a:b].view(np.float32)
    a, b = _w32(data, o, 8, u * u4)
    r2 = data[a:b].view(np.float32)
    t = 0
    while t < w:
        nb = min(BATCH, w - t)
        for k in range(nb):             # layer 1
            e = ek + int(cls[c0 + t + k]) * u4
            zs = z0 + k * zr
            for j in range(u4):
                hr[zs + j] = data[e + j]
            if t + k > 0:
                _mm(hr, s, 0, 1, u, r1, u4, hr, zs, 0)
            _cell(hr[zs:zs + u4], hr[s + 2 * u:s + 3 * u], hr[s:s + u], u)
            for j in range(u):
                hr[cb + k * sw + j] = hr[s + j]
        for k in range(nb):             # layer 2: b2 + h1 K2 of the chunk, then step by step
            for j in range(u4):
                hr[z0 + k * zr + j] = data[b2 + j]
        _mm(hr, cb, sw, nb, u, k2, u4, hr, z0, zr)
        for k in range(nb):
            zs = z0 + k * zr
            if t + k > 0:
                _mm(hr, s + u, 0, 1, u, r2, u4, hr, zs, 0)
            _cell(hr[zs:zs + u4], hr[s + 3 * u:s + 4 * u], hr[s + u:s + 2 * u], u)
            for j in range(u):
                hr[cb + k * sw + u + j] = hr[s + u + j]
        for k in range(nb):             # attention
            c = int(cls[c0 + t + k])
            st = cb + k * sw
            lg = (data[ea + c] + _dot(hr[st:st + u], data[wa1:wa1 + u], u)
                  + _dot(hr[st + u:st + 2 * u], data[wa2:wa2 + u], u))
            if lg > m:
                sc = math.exp(m - lg) if m > -np.inf else 0.0
                for j in range(nc):
                    hr[s + u4 + j] *= sc
                for j in range(2 * u):
                    hr[x0 + j] *= sc
                dd *= sc
                m = lg
            at = math.exp(lg - m)
            dd += at
            for j in range(nc):
                hr[s + u4 + j] += at * data[ew + c * nc + j]
            for j in range(2 * u):
                hr[x0 + j] += at * hr[st + j]
        t += nb
    a, b = _w32(data, o, 12, 2 * u * nc)
    _mm(hr, x0, 0, 1, 2 * u, data[a:b].view(np.float32), nc, hr, s + u4, 0)
    hr[s + u4 + nc] = m
    hr[s + u4 + nc + 1] = dd
    _fresh(data, o, d, head)


@kernel
def sort_listed(hr, v, n):
    """Shell sort of ``hr[:n]`` descending with their classes or tokens ``hr[v:v + n]``, ties
    by ascending class (the listings of ``charlstm`` and ``transformer``)."""
    gap = 1
    while gap * 3 + 1 < n:
        gap = gap * 3 + 1
    while gap >= 1:
        for i in range(gap, n):
            lq = hr[i]
            c = hr[v + i]
            k = i
            while k >= gap and (hr[k - gap] < lq or (hr[k - gap] == lq and hr[v + k - gap] > c)):
                hr[k] = hr[k - gap]
                hr[v + k] = hr[v + k - gap]
                k -= gap
            hr[k] = lq
            hr[v + k] = c
        gap //= 3


@kernel
def _listed(data, o, beta, row, head, min_logq):
    """Sorted tempered log-probabilities of the characters above ``min_logq`` into head[row].

    Ranks by q descending, ties by ascending class; returns the number listed.
    """
    nc = int(data[o])
    u = int(data[o + 2])
    v = nc - 1
    s, _sw, f, _cb, _z0, _zr, _x0, l0 = _layout(nc, u)
    hr = head[row]
    zz = hr[l0:l0 + v]
    _zmax, lz = _lse(data, o, beta, hr, s + 4 * u, zz, hr[l0 + v:l0 + 2 * v])
    thr = lowered_cut(min_logq)
    # batch size of the children: with a finite cut, a tree pass visits every listed rank
    # in order; without one (walks, policies) the caller may want any single rank
    hr[f + 3 + 8 * u] = BATCH if min_logq > -np.inf else 1
    n = 0
    for c in range(v):
        lq = beta * zz[c] - lz
        if lq >= thr:
            hr[n] = lq
            hr[v + n] = c + 1
            n += 1
    sort_listed(hr, v, n)
    return n


@kernel
def lstm_init(net, cprog, d, pd, draw, rank, n_list, min_logq, head, start):
    """Set up the node of level ``d``: its state, then its listed ranks; returns their number.

    ``net`` = (data, o, beta, carry): the weights' block (in ``data`` from offset ``o``),
    the inverse temperature and the characters a state carries past the window.

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
    data, o, beta, carry = net
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
            _rerun(data, o, d, head, head[d], hb, w)
            g = 0.0
        else:
            r0 = int(head[pd, f + 1 + 8 * u])
            nb = int(head[pd, f + 2 + 8 * u])
            if not r0 <= r < r0 + nb:
                r0 = r
                _batch(data, o, pd, head, r, max(min(int(head[pd, f + 3 + 8 * u]), n_list - r), 1))
            _take(data, o, pd, d, head, r - r0)
        head[d, gs] = g
    elif draw:
        for j in range(w):
            head[d, hb + j] = cprog[5 + start + j]
        _rerun(data, o, d, head, head[d], hb, w)
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
    _rerun(data, o, 0, head, classes, 0, classes.shape[0])
    n = _listed(data, o, beta, 0, head, -np.inf)
    out[0] = 0.0
    for r in range(n):
        out[int(head[0, nc - 1 + r])] = math.exp(head[0, r])
