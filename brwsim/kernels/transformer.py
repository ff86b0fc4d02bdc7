"""One token's forward pass of a decoder-only transformer over a per-node KV cache.

Two architectures, as Hugging Face ``transformers`` implements them:

* GPT-2 (``GPT2LMHeadModel``): x = wte[t] + wpe[pos]; per layer x += attn(LN1(x)),
  x += W2 act(W1 LN2(x) + b1) + b2 with LayerNorm (weight, bias, eps), ``gelu_new`` (the
  tanh approximation; exact-erf ``gelu`` and ``relu`` too); final LN, logits = x wte^T.
* Llama (``LlamaForCausalLM``, also Qwen2 and Mistral): x = E[t]; per layer
  x += attn(RMS1(x)), x += Wd (silu(Wg h) * (Wu h)), h = RMS2(x), with RMSNorm
  (x / sqrt(mean x^2 + eps) times its weight), rotary position embedding (HF's
  ``rotate_half`` convention, inv_freq_i = theta**(-2i/hd)), grouped-query attention
  (head h reads key/value head h // (nh / nkv)) and optional q/k/v biases (Qwen2).

Attention is causal softmax(q k^T / sqrt(hd)) v over the node's context. Every weight
matrix is the checkpoint's float32 values packed two per float64 slot (see
:func:`brwsim.kernels.lstm._mm`, whose register-blocked product is used here), widened
exactly to float64; every activation, K/V entry and sum is float64. So logits agree with
a float64 recomputation from the same float32 weights to about 1e-12 relative.

A node's level row (``head[d]``) holds its whole state, so any caller's row discipline
works (the tree pass's level stack, a policy's row per node, a walk's two alternating
rows, a generation run's copied root row):

=========  ==========================================================================
offset     contents
=========  ==========================================================================
0          listed log-probabilities in rank order (V)
V          their tokens (V)
M = 2V     m (context tokens), g (tokens carried past the window), r0 and nb (the
           children in the row's batch), the batch size for the row's children
TK         the context's tokens, oldest first (S = window + carry slots)
LG         the node's logits (V)
KO, VO     keys and values of the context: layer-major, L x S x kvd each
BA         the batch: up to BATCH children, each 2 L kvd new keys/values, then V logits
XS ...     scratch of one block of up to BATCH rows
=========  ==========================================================================

A root (drawn window or preset row) is run over its tokens in chunks of ``BATCH`` (each
chunk's rows attend causally to the cache and to each other). A child of a parent
carrying g tokens past the window appends its token (one row over the parent's cache)
when g + 1 <= carry, else is rerun from scratch over its last ``window`` tokens (so the
context is the last window + (depth mod (carry + 1)) tokens below a drawn root, as
``charlstm``). In a tree pass (finite cut-off) the children of a parent that the pass will
visit, up to ``BATCH`` consecutive ranks, are computed as one block of rows (each row
attends to the parent's cache and to itself), so each weight is read once per block.

The weight block at offset ``o`` of the spec's ``data`` has a header of named slots
(relative to ``o``; :func:`brwsim.families.checkpoint` writes it by the same names):
``H_ARCH`` (0 GPT-2, 1 Llama), ``H_V``, ``H_D``, ``H_NL`` (layers), ``H_NH``, ``H_NKV``,
``H_HD``, ``H_FF``, ``H_NPOS`` (max positions), ``H_EPS``, ``H_THETA`` (rope theta),
``H_ACT`` (0 gelu_new, 1 gelu, 2 relu, 3 silu), then the offsets of ``H_EMB``
(embedding^T, d x V, packed), ``H_HEAD`` (lm head^T, d x V, packed), ``H_WPE`` (positions,
npos x d, packed, GPT-2), ``H_NFW`` and ``H_NFB`` (final norm weight and bias, GPT-2);
then from ``HDR`` a row of ``PER_LAYER`` offsets per layer: ``L_N1W``, ``L_N1B`` (norm 1),
``L_WQKV`` (d x (nh hd + 2 kvd), packed), ``L_BQKV``, ``L_WO`` (nh hd x d, packed),
``L_BO``, ``L_N2W``, ``L_N2B`` (norm 2), ``L_W1`` (d x ff1, packed; Llama: [gate | up],
ff1 = 2 ff), ``L_B1``, ``L_W2`` (ff x d, packed), ``L_B2``. Vectors are float64.
"""

from __future__ import annotations

import math

import numpy as np

from brwsim.kernels import dense_kernel, kernel, njit_cached
from brwsim.kernels.kinds import TRANSFORMER, lowered_cut
from brwsim.kernels.lstm import _dot, _exp, _mm, _tanh, sort_listed

HDR = 24            # block header entries before the per-layer table
PER_LAYER = 12      # per-layer offsets
# the block header's slots (relative to the block's offset o): dimensions, then offsets
H_ARCH, H_V, H_D, H_NL, H_NH, H_NKV, H_HD, H_FF, H_NPOS, H_EPS, H_THETA, H_ACT = range(12)
H_EMB, H_HEAD, H_WPE, H_NFW, H_NFB = range(12, 17)
# a layer's slots in its row of the per-layer table (at o + HDR + PER_LAYER * layer)
(L_N1W, L_N1B, L_WQKV, L_BQKV, L_WO, L_BO, L_N2W, L_N2B, L_W1, L_B1, L_W2,
 L_B2) = range(PER_LAYER)
#: The per-layer slots holding matrices (packed float32); the others are float64 vectors.
L_MATRICES = (L_WQKV, L_WO, L_W1, L_W2)
BATCH = 8           # rows of one block (children of a parent, or a chunk of a root)
META = 8
GPT2, LLAMA = 0, 1
GELU_NEW, GELU, RELU, SILU = 0, 1, 2, 3
# Parameter slots of a TRANSFORMER component (the family writes them by these names)
TF_BETA = 0         # fpar: 1 / temperature
TF_CARRY = 1        # fpar: tokens carried past the window
TF_WINDOW = 2       # fpar: the window's length
TF_SLOTS = 2        # ipar: context slots of a level's cache (window + carry)
#: the slots the kind owns (tests/unit/test_kind_table.py checks the family writes these)
LAYOUT = {TRANSFORMER: ((TF_BETA, TF_CARRY, TF_WINDOW), (TF_SLOTS,))}
_SQRT_2_PI = math.sqrt(2.0 / math.pi)


@kernel
def _dims(data, o):
    """(V, d, L, nh, nkv, hd, ff, kvd, qw, qkvw, ff1) of the block at ``o``."""
    v = int(data[o + H_V])
    d = int(data[o + H_D])
    nl = int(data[o + H_NL])
    nh = int(data[o + H_NH])
    nkv = int(data[o + H_NKV])
    hd = int(data[o + H_HD])
    ff = int(data[o + H_FF])
    kvd = nkv * hd
    qw = nh * hd
    ff1 = 2 * ff if int(data[o + H_ARCH]) == LLAMA else ff
    return v, d, nl, nh, nkv, hd, ff, kvd, qw, qw + 2 * kvd, ff1


@kernel
def layout(data, o, slots):
    """Row offsets (M, TK, LG, KO, VO, BA, bw, XS, HS, QS, AS, FS, SC, EX, width)."""
    v, d, nl, _nh, _nkv, _hd, _ff, kvd, qw, qkvw, ff1 = _dims(data, o)
    m = 2 * v
    tk = m + META
    lg = tk + slots
    ko = lg + v
    vo = ko + nl * slots * kvd
    ba = vo + nl * slots * kvd
    bw = 2 * nl * kvd + v
    xs = ba + BATCH * bw
    hs = xs + BATCH * d
    qs = hs + BATCH * d
    as_ = qs + BATCH * qkvw
    fs = as_ + BATCH * qw
    sc = fs + BATCH * ff1
    ex = sc + slots + 1
    return m, tk, lg, ko, vo, ba, bw, xs, hs, qs, as_, fs, sc, ex, ex + v


@kernel
def head_width(data, o, slots):
    """Entries of one level row for a context of at most ``slots`` tokens."""
    return layout(data, o, slots)[14]


@kernel
def _s32(data, o, at, n):
    """Slot range [a, b) of the packed float32 matrix of ``n`` entries whose offset is at
    header entry ``at`` (absolute index)."""
    a = o + int(data[at])
    return a, a + (n + 1) // 2


@kernel
def _s64(data, o, at, n):
    """Range [a, b) of the float64 vector of ``n`` entries whose offset is at entry ``at``."""
    a = o + int(data[at])
    return a, a + n


@dense_kernel
def _norm(arch, w, b, eps, x, out, d):
    """LayerNorm (GPT-2: weight and bias) or RMSNorm (Llama: weight) of ``x`` into ``out``."""
    if arch == GPT2:
        mu = 0.0
        for j in range(d):
            mu += x[j]
        mu /= d
        var = 0.0
        for j in range(d):
            var += (x[j] - mu) * (x[j] - mu)
        inv = 1.0 / math.sqrt(var / d + eps)
        for j in range(d):
            out[j] = (x[j] - mu) * inv * w[j] + b[j]
    else:
        ms = 0.0
        for j in range(d):
            ms += x[j] * x[j]
        inv = 1.0 / math.sqrt(ms / d + eps)
        for j in range(d):
            out[j] = w[j] * (x[j] * inv)


@dense_kernel
def _act(kind, f, n):
    """The MLP activation in place on ``f[:n]`` (GPT-2 kinds)."""
    if kind == GELU_NEW:
        for j in range(n):
            x = f[j]
            f[j] = 0.5 * x * (1.0 + _tanh(_SQRT_2_PI * (x + 0.044715 * x * x * x)))
    elif kind == GELU:
        for j in range(n):
            f[j] = 0.5 * f[j] * (1.0 + math.erf(f[j] / math.sqrt(2.0)))
    elif kind == RELU:
        for j in range(n):
            f[j] = max(f[j], 0.0)


@dense_kernel
def _swiglu(f, ff):
    """f[:ff] = silu(gate) * up for f = [gate | up] (Llama's MLP)."""
    for j in range(ff):
        g = f[j]
        f[j] = g / (1.0 + _exp(-g)) * f[ff + j]


@kernel
def _rope(x, x0, nheads, hd, pos, theta):
    """Rotary embedding of ``nheads`` heads of ``hd`` at ``x[x0:]`` (HF's rotate_half)."""
    half = hd // 2
    for i in range(half):
        ang = pos * theta ** (-2.0 * i / hd)
        c = math.cos(ang)
        s = math.sin(ang)
        for h in range(nheads):
            a = x0 + h * hd + i
            x1 = x[a]
            x2 = x[a + half]
            x[a] = x1 * c - x2 * s
            x[a + half] = x2 * c + x1 * s


@kernel
def _attend(q, q0, heads, ctx, extra, sc, out, o0):
    """Causal attention of one row's heads: context slots then ``n_extra`` own slots.

    ``heads`` = (nh, nkv, hd): query heads, key/value heads and head width; ``ctx`` = (cr,
    kc, vc, cstride, n_ctx) and ``extra`` = (er, ke, ve, n_extra): where the context's and
    the row's own keys and values lie. Head h of the query ``q[q0 + h hd:]`` reads
    key/value head h // (nh / nkv): context slot j at ``cr[kc + j cstride + kvh hd:]``
    (values at ``vc``), the extra slot at ``er[ke + kvh hd:]`` (values at ``ve``); ``sc``
    is scratch for the scores. Output into ``out[o0 + h hd:]``.
    """
    nh, nkv, hd = heads
    cr, kc, vc, cstride, n_ctx = ctx
    er, ke, ve, n_extra = extra
    scale = 1.0 / math.sqrt(hd)
    grp = nh // nkv
    n = n_ctx + n_extra
    for h in range(nh):
        kvh = h // grp
        qh = q[q0 + h * hd:q0 + (h + 1) * hd]
        mx = -np.inf
        for j in range(n_ctx):
            a = kc + j * cstride + kvh * hd
            s = _dot(qh, cr[a:a + hd], hd) * scale
            sc[j] = s
            mx = max(mx, s)
        for j in range(n_extra):
            a = ke + kvh * hd
            s = _dot(qh, er[a:a + hd], hd) * scale
            sc[n_ctx + j] = s
            mx = max(mx, s)
        tot = 0.0
        for j in range(n):
            e = math.exp(sc[j] - mx)
            sc[j] = e
            tot += e
        oh = out[o0 + h * hd:o0 + (h + 1) * hd]
        for i in range(hd):
            oh[i] = 0.0
        for j in range(n_ctx):
            a = vc + j * cstride + kvh * hd
            w = sc[j] / tot
            vv = cr[a:a + hd]
            for i in range(hd):
                oh[i] += w * vv[i]
        for j in range(n_extra):
            a = ve + kvh * hd
            w = sc[n_ctx + j] / tot
            vv = er[a:a + hd]
            for i in range(hd):
                oh[i] += w * vv[i]


@kernel
def _block(data, o, slots, hr, toks, t0, nb, pos0, seq, cr, m):
    """Forward ``nb`` tokens ``toks[t0:t0 + nb]`` over the cache of ``cr`` (m slots).

    ``seq`` True: a chunk of consecutive tokens at positions pos0 .., whose keys and values
    go into ``hr``'s own slots m .. m + nb - 1 (``cr`` is ``hr``); row k attends to slots
    0 .. m + k. ``seq`` False: siblings, all at position pos0 = m, each attending to the m
    slots of ``cr`` and to itself; their keys, values and logits go into ``hr``'s batch.
    Logits: every sibling's; of a chunk only the last row's, into ``hr``'s LG.
    """
    arch = int(data[o + H_ARCH])
    v, d, nl, nh, nkv, hd, _ff, kvd, qw, qkvw, ff1 = _dims(data, o)
    ff = int(data[o + H_FF])
    eps = data[o + H_EPS]
    theta = data[o + H_THETA]
    act = int(data[o + H_ACT])
    _m, _tk, lg, ko, vo, ba, bw, xs, hs, qs, as_, fs, sc, _ex, _w = layout(data, o, slots)
    sa, sb = _s32(data, o, o + H_EMB, d * v)
    emb = data[sa:sb].view(np.float32)
    for k in range(nb):                       # embeddings (columns of E^T), positions
        t = int(toks[t0 + k])
        x = hr[xs + k * d:xs + (k + 1) * d]
        for j in range(d):
            x[j] = np.float64(emb[j * v + t])
        if arch == GPT2:
            p = pos0 + k if seq else pos0
            sa, sb = _s32(data, o, o + H_WPE, int(data[o + H_NPOS]) * d)
            wpe = data[sa:sb].view(np.float32)
            for j in range(d):
                x[j] += np.float64(wpe[p * d + j])
    for layer in range(nl):
        lt = o + HDR + PER_LAYER * layer
        sa, sb = _s64(data, o, lt + L_N1W, d)
        n1w = data[sa:sb]
        sa, sb = _s64(data, o, lt + L_N1B, d)
        n1b = data[sa:sb]
        for k in range(nb):
            _norm(arch, n1w, n1b, eps, hr[xs + k * d:xs + (k + 1) * d],
                  hr[hs + k * d:hs + (k + 1) * d], d)
        sa, sb = _s64(data, o, lt + L_BQKV, qkvw)
        bq = data[sa:sb]
        for k in range(nb):
            for j in range(qkvw):
                hr[qs + k * qkvw + j] = bq[j]
        sa, sb = _s32(data, o, lt + L_WQKV, d * qkvw)
        _mm(hr, hs, d, nb, d, data[sa:sb].view(np.float32), qkvw, hr, qs, qkvw)
        for k in range(nb):
            q0 = qs + k * qkvw
            p = pos0 + k if seq else pos0
            if arch == LLAMA:
                _rope(hr, q0, nh, hd, p, theta)
                _rope(hr, q0 + qw, nkv, hd, p, theta)
            if seq:
                kd = ko + (layer * slots + m + k) * kvd
                vd = vo + (layer * slots + m + k) * kvd
            else:
                kd = ba + k * bw + layer * kvd
                vd = ba + k * bw + (nl + layer) * kvd
            for j in range(kvd):
                hr[kd + j] = hr[q0 + qw + j]
                hr[vd + j] = hr[q0 + qw + kvd + j]
        for k in range(nb):
            if seq:
                _attend(hr, qs + k * qkvw, (nh, nkv, hd),
                        (hr, ko + layer * slots * kvd, vo + layer * slots * kvd, kvd, m + k + 1),
                        (hr, 0, 0, 0), hr[sc:], hr, as_ + k * qw)
            else:
                _attend(hr, qs + k * qkvw, (nh, nkv, hd),
                        (cr, ko + layer * slots * kvd, vo + layer * slots * kvd, kvd, m),
                        (hr, ba + k * bw + layer * kvd, ba + k * bw + (nl + layer) * kvd, 1),
                        hr[sc:], hr, as_ + k * qw)
        sa, sb = _s32(data, o, lt + L_WO, qw * d)
        _mm(hr, as_, qw, nb, qw, data[sa:sb].view(np.float32), d, hr, xs, d)
        sa, sb = _s64(data, o, lt + L_BO, d)
        bo = data[sa:sb]
        sa, sb = _s64(data, o, lt + L_N2W, d)
        n2w = data[sa:sb]
        sa, sb = _s64(data, o, lt + L_N2B, d)
        n2b = data[sa:sb]
        sa, sb = _s64(data, o, lt + L_B1, ff1)
        b1 = data[sa:sb]
        for k in range(nb):
            x = hr[xs + k * d:xs + (k + 1) * d]
            for j in range(d):
                x[j] += bo[j]
            _norm(arch, n2w, n2b, eps, x, hr[hs + k * d:hs + (k + 1) * d], d)
            for j in range(ff1):
                hr[fs + k * ff1 + j] = b1[j]
        sa, sb = _s32(data, o, lt + L_W1, d * ff1)
        _mm(hr, hs, d, nb, d, data[sa:sb].view(np.float32), ff1, hr, fs, ff1)
        for k in range(nb):
            f = hr[fs + k * ff1:fs + (k + 1) * ff1]
            if arch == LLAMA:
                _swiglu(f, ff)
            else:
                _act(act, f, ff)
        sa, sb = _s32(data, o, lt + L_W2, ff * d)
        _mm(hr, fs, ff1, nb, ff, data[sa:sb].view(np.float32), d, hr, xs, d)
        sa, sb = _s64(data, o, lt + L_B2, d)
        b2 = data[sa:sb]
        for k in range(nb):
            for j in range(d):
                hr[xs + k * d + j] += b2[j]
    sa, sb = _s64(data, o, o + H_NFW, d)
    nfw = data[sa:sb]
    sa, sb = _s64(data, o, o + H_NFB, d)
    nfb = data[sa:sb]
    first = 0 if not seq else nb - 1
    for k in range(first, nb):
        _norm(arch, nfw, nfb, eps, hr[xs + k * d:xs + (k + 1) * d],
              hr[hs + k * d:hs + (k + 1) * d], d)
    sa, sb = _s32(data, o, o + H_HEAD, d * v)
    wh = data[sa:sb].view(np.float32)
    if seq:
        for j in range(v):
            hr[lg + j] = 0.0
        _mm(hr, hs + (nb - 1) * d, d, 1, d, wh, v, hr, lg, v)
    else:
        for k in range(nb):
            for j in range(v):
                hr[ba + k * bw + 2 * nl * kvd + j] = 0.0
        _mm(hr, hs, d, nb, d, wh, v, hr, ba + 2 * nl * kvd, bw)


@kernel
def _prefill(data, o, slots, hr, n):
    """Run the row's first ``n`` context tokens (at ``hr[TK:]``) from an empty cache."""
    _m, tk, _lg, _ko, _vo, _ba, _bw, _xs, _hs, _qs, _as, _fs, _sc, _ex, _w = layout(data, o, slots)
    t = 0
    while t < n:
        nb = min(BATCH, n - t)
        _block(data, o, slots, hr, hr, tk + t, nb, t, True, hr, t)
        t += nb


@kernel
def _fresh(data, o, slots, hr):
    """Mark the row's child batch as empty (its state just changed)."""
    m = 2 * int(data[o + H_V])
    hr[m + 2] = 0.0
    hr[m + 3] = 0.0


@kernel
def _batch(data, o, slots, pr, r0, nb):
    """Keys, values and logits of the parent's children of ranks r0 .. r0 + nb - 1."""
    v = int(data[o + H_V])
    m = 2 * v
    _block(data, o, slots, pr, pr, v + r0, nb, int(pr[m]), False, pr, int(pr[m]))
    pr[m + 2] = r0
    pr[m + 3] = nb


@kernel
def _take(data, o, slots, pr, k, cr):
    """Child k of the parent's batch into row ``cr``: the parent's cache plus its own slot."""
    v, _d, nl, _nh, _nkv, _hd, _ff, kvd, _qw, _qkvw, _ff1 = _dims(data, o)
    mm, tk, lg, ko, vo, ba, bw, _xs, _hs, _qs, _as, _fs, _sc, _ex, _w = layout(data, o, slots)
    n = int(pr[mm])
    r = int(pr[mm + 2]) + k
    for layer in range(nl):
        a = layer * slots * kvd
        for j in range(n * kvd):
            cr[ko + a + j] = pr[ko + a + j]
            cr[vo + a + j] = pr[vo + a + j]
        for j in range(kvd):
            cr[ko + a + n * kvd + j] = pr[ba + k * bw + layer * kvd + j]
            cr[vo + a + n * kvd + j] = pr[ba + k * bw + (nl + layer) * kvd + j]
    for j in range(n):
        cr[tk + j] = pr[tk + j]
    cr[tk + n] = pr[v + r]
    for j in range(v):
        cr[lg + j] = pr[ba + k * bw + 2 * nl * kvd + j]
    cr[mm] = n + 1


@kernel
def _listed(data, o, slots, beta, hr, min_logq):
    """Tempered log-probabilities above ``min_logq``, sorted, into the row; their number."""
    v = int(data[o + H_V])
    mm, _tk, lg, _ko, _vo, _ba, _bw, _xs, _hs, _qs, _as, _fs, _sc, ex, _w = layout(data, o, slots)
    zmax = -np.inf
    for j in range(v):
        zmax = max(zmax, hr[lg + j])
    tot = 0.0
    for j in range(v):
        e = math.exp(beta * (hr[lg + j] - zmax))
        hr[ex + j] = e
        tot += e
    lz = math.log(tot)
    thr = lowered_cut(min_logq)
    hr[mm + 4] = BATCH if min_logq > -np.inf else 1
    n = 0
    for j in range(v):
        lq = beta * (hr[lg + j] - zmax) - lz
        if lq >= thr:
            hr[n] = lq
            hr[v + n] = j
            n += 1
    sort_listed(hr, v, n)
    return n


@kernel
def _rerun(data, o, slots, pr, hr, tok, window):
    """Row ``hr`` restarts its context: the last ``window - 1`` tokens of ``pr``'s context
    and then ``tok``, run from an empty cache (``pr`` may be ``hr`` itself: the copy moves
    tokens towards the front)."""
    mm = 2 * int(data[o + H_V])
    tk = mm + META
    n = int(pr[mm])
    w = min(int(window), n + 1)
    for j in range(w - 1):
        hr[tk + j] = pr[tk + n - (w - 1) + j]
    hr[tk + w - 1] = tok
    _prefill(data, o, slots, hr, w)
    hr[mm] = w


@kernel
def transformer_init(net, cprog, d, pd, draw, rank, n_list, min_logq, head, start):
    """Set up the node of level ``d``: its cache and logits, then its listed ranks.

    ``net`` = (data, o, beta, carry, window, slots): the weights' block (in ``data`` from
    offset ``o``), the inverse temperature, the tokens a cache carries past the window,
    the window and the cache's slots.

    ``pd >= 0``: the child of rank ``rank`` of the parent at level ``pd`` (``n_list``
    listed ranks). If the parent carries g tokens past the window and g + 1 <= carry, the
    child appends its token to the parent's cache (from the parent's batch, computed here
    if the rank is not in it); otherwise it is rerun over its last ``window`` tokens.
    ``draw``: a drawn root, the ``cprog[2]`` tokens of the context program from ``start``.
    Otherwise (a preset root) the row already holds its state. Returns the listed count.
    """
    data, o, beta, carry, window, slots = net
    v = int(data[o + H_V])
    mm = 2 * v
    tk = mm + META
    hr = head[d]
    if pd >= 0:
        pr = head[pd]
        r = max(min(rank, n_list - 1), 0)
        g = pr[mm + 1] + 1.0
        if g > carry:
            _rerun(data, o, slots, pr, hr, pr[v + r], window)
            g = 0.0
        else:
            r0 = int(pr[mm + 2])
            nb = int(pr[mm + 3])
            if not r0 <= r < r0 + nb:
                r0 = r
                _batch(data, o, slots, pr, r, max(min(int(pr[mm + 4]), n_list - r, BATCH), 1))
            _take(data, o, slots, pr, r - r0, hr)
        hr[mm + 1] = g
    elif draw:
        w = int(cprog[2])
        for j in range(w):
            hr[tk + j] = cprog[5 + start + j]
        _prefill(data, o, slots, hr, w)
        hr[mm] = w
        hr[mm + 1] = 0.0
    _fresh(data, o, slots, hr)
    return _listed(data, o, slots, beta, hr, min_logq)


@njit_cached
def transformer_logits(data, o, tokens, out):
    """Logits after ``tokens`` (at most the row's slots), from an empty cache, into ``out``.

    The plain Python-facing form: one row, the tokens run in chunks.
    """
    slots = tokens.shape[0]
    hr = np.zeros(head_width(data, o, slots))
    v = int(data[o + H_V])
    tk = 2 * v + META
    for j in range(slots):
        hr[tk + j] = tokens[j]
    _prefill(data, o, slots, hr, slots)
    lg = layout(data, o, slots)[2]
    for j in range(v):
        out[j] = hr[lg + j]


@njit_cached
def transformer_start(data, o, slots, window, prompt):
    """A generation's row: the last ``min(len(prompt), window)`` prompt tokens run from an
    empty cache (their logits in the row's LG), carrying nothing past the window."""
    hr = np.zeros(head_width(data, o, slots))
    v = int(data[o + H_V])
    mm = 2 * v
    tk = mm + META
    w = min(prompt.shape[0], int(window))
    for j in range(w):
        hr[tk + j] = prompt[prompt.shape[0] - w + j]
    _prefill(data, o, slots, hr, w)
    hr[mm] = w
    hr[mm + 1] = 0.0
    return hr


@njit_cached
def transformer_sample(data, o, slots, window, carry, beta, hr, uniforms, k, out_lp, out_rank,
                       out_tok):
    """Sample ``len(uniforms)`` tokens from the row ``hr`` (of :func:`transformer_start`).

    At each step the distribution is softmax(beta logits); its ``k`` largest
    log-probabilities (descending) go to ``out_lp[step]``, the token drawn by inverse CDF
    over token ids with ``uniforms[step]`` to ``out_tok[step]`` and its rank (the number of
    tokens of larger probability) to ``out_rank[step]``. The token is then appended as the
    tree's children are (:func:`transformer_init`): one row over the cache while the
    tokens carried past the window stay at most ``carry``, else the context restarts from
    its last ``window`` tokens. The row keeps the state between calls.
    """
    v = int(data[o + H_V])
    mm = 2 * v
    tk = mm + META
    lg = layout(data, o, slots)[2]
    lq = np.empty(v)
    for step in range(uniforms.shape[0]):
        zmax = -np.inf
        for j in range(v):
            zmax = max(zmax, hr[lg + j])
        tot = 0.0
        for j in range(v):
            tot += math.exp(beta * (hr[lg + j] - zmax))
        lz = math.log(tot)
        for j in range(v):
            lq[j] = beta * (hr[lg + j] - zmax) - lz
        target = uniforms[step] * tot
        acc = 0.0
        tok = -1
        for j in range(v):
            e = math.exp(beta * (hr[lg + j] - zmax))
            if e > 0.0:
                tok = j                  # the last token of positive mass, if rounding runs out
                acc += e
                if acc > target:
                    break
        rank = 0
        for j in range(v):
            if lq[j] > lq[tok]:
                rank += 1
        top = np.sort(lq)
        for j in range(k):
            out_lp[step, j] = top[v - 1 - j]
        out_rank[step] = rank
        out_tok[step] = tok
        n = int(hr[mm])
        g = hr[mm + 1] + 1.0
        if g > carry:
            _rerun(data, o, slots, hr, hr, tok, window)
            g = 0.0
        else:
            hr[tk + n] = tok
            _block(data, o, slots, hr, hr, tk + n, 1, n, True, hr, n)
            hr[mm] = n + 1
        hr[mm + 1] = g
