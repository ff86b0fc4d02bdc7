"""Tabulated Beta quantiles in log space, built once per shape pair with numpy and scipy.

A Beta(a, b) variate X is drawn by inversion from one uniform u (the kernels'
:func:`brwsim.kernels.betaquantile.beta_log_pair`): with m0 = I_{1/2}(a, b), u <= m0 gives
the lower half X <= 1/2 at level u, and u > m0 gives 1 - X, the lower half of Beta(b, a),
at level 1 - u (exact in floating point). Each *side* is a table of the lower-half
quantile of one ordered pair (a, b):

* Write I_x(a, b) = x**a F(x) / (a B(a, b)) with F(x) = (1 - x)**b 2F1(a + b, 1; a + 1; x),
  and z = (u a B(a, b))**(1 / a), so that z**a = x**a F(x) and x = z exp(g(z)). The map
  z -> x is analytic on [0, z_max] (z_max is z at x = 1/2) with g(0) = 0, whatever the
  shapes, so log x = log z + g(z) is exact in log space down to the smallest u, where x
  itself underflows (tiny shapes), with no asymptotic branch.
* g and r(z) = -log(1 - x) / z (so that log(1 - x) = -z r(z) keeps its relative accuracy
  when x is tiny) are cubic splines on a uniform grid in v = sqrt(1 - z / z_max), which
  puts knots closer together towards x = 1/2 (there, for large shapes, the bell of the
  density makes g curve most; on a grid uniform in z or in log u the same accuracy needs
  4-16 times the knots).
* Knot values are exact to rounding: x solves z**a = x**a F(x) by Newton steps in log x
  on a series of F(x) / (1 - x)**b - 1 summed term by term, which keeps its relative
  accuracy for tiny shapes (``scipy.special.betainc`` and ``betaincinv`` lose about
  1e-16 / a there). The number of intervals doubles from 64 until the splines' error at
  every interval midpoint, against the exact values there, is at most :data:`TOLERANCE`
  (absolute in g, i.e. in log x, and in r); a side that would need more than
  :data:`MAX_INTERVALS` is not tabulated, and its family keeps an exact rejection sampler.

Construction is batched (:func:`pair_block` builds all the new sides of a family in one
call) and vectorised over every knot of every side: the series stops per knot, Newton
stops per knot (step <= 1e-10, as before), and once the 64-interval error is known the
grid is refined at once to the level that the h**4 convergence predicts; the levels in
between are still checked in order, at their own midpoints, which are knots of the finer
grid and so need no Newton solve (the table chosen is the same smallest passing level as
when doubling one level at a time). Splines on the uniform grids are solved without
``scipy.linalg`` (its import alone costs 30 ms). Measured: a first
``Dirichlet(0.05, 200).spec()`` took about 16 ms in a fresh process with the 15 sides of
a halving tree split down to single tokens, median of 5 on a loaded 2-core machine (137
ms one side at a time before; 0.2 ms with no tables); its groups of at most 50 tokens are
now drawn by size-biased picks, which need no table, so it builds 2 sides in 7-12 ms;
the two sides of Peaked's (4, 0.5) about 11 ms (45-95 ms before; Peaked's spec()
is otherwise dominated by loading the numba ``zipf_sum``, about 0.3 s, as before).

A Dirichlet split also gets an *emptiness table* (:func:`cdf_table`): its CDF on the
cut-offs y in (1/2, 1] of the group's mass, as splines in log y with a margin, so that
the kernel can tell from the uniform alone, F(1 - y) < u < F(y), that neither part
reaches y, before (and mostly instead of) the quantile's draw.

Measured (``tests/unit/test_betaquantile.py``): every Dirichlet pair of the aggregation
sampler (shapes 1e-6 .. 41) and Peaked's default (4, 0.5) tabulate within 1e-11 in at
most 2048 intervals; a side such as (0.5, 20), whose lower half is mostly a long flat
tail, does not, and falls back.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import special

from brwsim.kernels.betaquantile import SIDE_HEADER

__all__ = ["TOLERANCE", "MAX_INTERVALS", "SHAPE_RANGE", "side_table", "pair_block",
           "tree_block", "cdf_table", "SIDE_HEADER", "PAIR_HEADER", "CDF_HEADER", "CDF_INTERVALS"]

#: Largest error of a table at its interval midpoints, absolute in log x and in r.
TOLERANCE = 1e-11
#: Most intervals of one side's splines (two splines of 4 coefficients each).
MAX_INTERVALS = 2048
#: Shapes outside this range are never tabulated (the series for F grows slowly past it).
SHAPE_RANGE = (1e-6, 100.0)
_FIRST_INTERVALS = 64
# points per side of the coarse table of log z against log x for the first Newton guesses
_GUESS_POINTS = 400
_LOG_HALF = math.log(0.5)
# layout, relative to a side's offset: (log(a B(a, b)), 1 / a, 1 / z_max, p, n_int, inv_h),
# then 4 * n_int coefficients of g, 4 * n_int of r, and the n_int intervals' starts
# (SIDE_HEADER: the header's length, defined with the kernel that reads it)
# layout of a pair: (m0, offset of the lower side, offset of the upper side), offsets
# relative to the block's start; -1 when the pair is not tabulated
PAIR_HEADER = 3


def _f_minus_one(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
    """2F1(a + b, 1; a + 1; x) - 1 for 0 <= x <= 1/2, per point, summed term by term.

    All terms are positive, so the sum keeps its relative accuracy. A point stops once its
    term is at most 1e-17 of its sum (tested every 4 terms; later terms are smaller still),
    and is dropped from the arrays then, so points at small x cost few terms.
    """
    apb, ap1 = a + b, a + 1.0
    term = x * (apb / ap1)
    total = term.copy()
    out = np.empty_like(x)
    idx = np.arange(x.size)
    n = 1
    while n < 100_000:
        term *= x * ((apb + n) / (ap1 + n))
        total += term
        n += 1
        if n % 4 == 0:
            live = term > 1e-17 * total
            if not live.all():
                dead = ~live
                out[idx[dead]] = total[dead]
                if not live.any():
                    return out
                idx, x, apb, ap1, term, total = (t[live] for t in (idx, x, apb, ap1, term, total))
    out[idx] = total
    return out


def _log_z(a: np.ndarray, b: np.ndarray, s: np.ndarray):
    """(log z, x, 2F1 - 1) at log x = s: log z = s + (b / a) log(1 - x) + log(2F1) / a."""
    x = np.exp(s)
    h = _f_minus_one(a, b, x)
    return s + (b / a) * np.log1p(-x) + np.log1p(h) / a, x, h


def _solve(a: np.ndarray, b: np.ndarray, lz: np.ndarray, s: np.ndarray) -> np.ndarray:
    """log x with log z(log x) = lz, Newton from s (d log z / d log x = 1 / ((1 - x) 2F1)).

    Each point iterates until its own step is at most 1e-10 (quadratic convergence: the
    error is then at rounding level; a tighter test would chase the rounding noise of
    log z), then leaves the arrays.
    """
    out = s.copy()
    idx = np.arange(s.size)
    for _ in range(100):
        f, x, h = _log_z(a, b, s)
        step = (f - lz) * (1.0 - x) * (1.0 + h)
        s = np.minimum(s - step, _LOG_HALF)
        out[idx] = s
        live = np.abs(step) > 1e-10
        if not live.any():
            break
        idx, a, b, lz, s = idx[live], a[live], b[live], lz[live], s[live]
    return out


def _exact(a, b, z, guess):
    """Exact (g, r) at z > 0 or z = 0 (Newton from log x = ``guess``); g(0) = 0, r(0) = 1."""
    g, r = np.zeros_like(z), np.ones_like(z)
    pos = z > 0.0
    lz = np.log(z[pos])
    s = _solve(a[pos], b[pos], lz, guess[pos])
    g[pos] = s - lz
    r[pos] = -np.log1p(-np.exp(s)) / z[pos]
    return g, r


def _log_ab(a: float, b: float) -> float:
    """log(a B(a, b)) = log G(a+1) + log G(b+1) - log G(a+b+1) + log1p(a / b), no cancellation."""
    return float(special.gammaln(a + 1.0) + special.gammaln(b + 1.0)
                 - special.gammaln(a + b + 1.0) + math.log1p(a / b))


@lru_cache(maxsize=32)
def _thomas(m: int) -> tuple[np.ndarray, np.ndarray]:
    """Multipliers of the Thomas algorithm for the m x m matrix tridiag(1, [2, 4, .., 4, 2], 1).

    Returns (1 / pivot, -1 / pivot) as columns; the pivots converge to 2 + sqrt(3) within
    about 30 rows, after which they are that constant to rounding.
    """
    diag = np.full(m, 4.0)
    diag[0] = diag[-1] = 2.0
    piv = np.empty(m)
    piv[0] = diag[0]
    for i in range(1, min(m, 64)):
        piv[i] = diag[i] - 1.0 / piv[i - 1]
    if m > 64:
        piv[64:] = piv[63]
        piv[-1] = diag[-1] - 1.0 / piv[-2]
    inv = 1.0 / piv
    return inv[:, None], -inv[:, None]


def _recurrence(mult: np.ndarray, y: np.ndarray) -> np.ndarray:
    """y_i += mult_i y_{i-1} in order along axis 0, by doubling (log2 of the rows numpy steps)."""
    mult = mult.copy()
    mult[0] = 0.0
    k = 1
    while k < y.shape[0]:
        y[k:] += mult[k:] * y[:-k]
        mult[k:] = mult[k:] * mult[:-k]
        k *= 2
    return y


def _spline_uniform(y: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Not-a-knot cubic splines through the columns of ``y`` ((n + 1, k)) on uniform grids of
    spacing ``h`` ((k,)): coefficients (n, 4, k), ascending powers.

    The system of :func:`brwsim.families.tables._spline_coef` on a uniform grid, divided by
    h, with the two not-a-knot rows eliminated: what is left is tridiag(1, [2, 4, .., 2], 1),
    diagonally dominant, solved by Thomas' algorithm whose two sweeps (linear recurrences)
    run as log2(n) vectorised doubling steps over all columns at once (no ``scipy.linalg``,
    whose import alone costs 30 ms).
    """
    n = y.shape[0] - 1
    slope = np.diff(y, axis=0) / h
    rhs = np.empty((n + 1, y.shape[1]))
    rhs[1:-1] = 3.0 * (slope[:-1] + slope[1:])
    r0 = 0.5 * (5.0 * slope[0] + slope[1])
    rn = 0.5 * (slope[-2] + 5.0 * slope[-1])
    rhs[1] -= r0                      # s0 = r0 - 2 s1 and s_n = rn - 2 s_{n-1}
    rhs[-2] -= rn
    inv, neg = _thomas(n - 1)
    d = _recurrence(neg, rhs[1:-1] * inv)          # forward: d_i = (rhs_i - d_{i-1}) / piv_i
    s = np.empty_like(rhs)
    s[1:-1] = _recurrence(neg[::-1], d[::-1])[::-1]   # back: s_i = d_i - s_{i+1} / piv_i
    s[0] = r0 - 2.0 * s[1]
    s[-1] = rn - 2.0 * s[-2]
    t = (s[:-1] + s[1:] - 2.0 * slope) / h
    return np.stack([y[:-1], s[:-1], (slope - s[:-1]) / h - t, t / h], axis=1)


def _spline_mid(coef: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Splines (n, 4, k) at offset d ((k,)) into every interval: (n, k)."""
    return coef[:, 0] + d * (coef[:, 1] + d * (coef[:, 2] + d * coef[:, 3]))


def _level_error(g: np.ndarray, r: np.ndarray, h: np.ndarray, level: int):
    """Splines of g and r ((2m + 1, k) on uniform fine grids of spacing h) on every
    (2m / level)-th knot, and their largest error at the level's midpoints (fine knots).

    Returns (coefficients (level, 4, 2k): g's then r's, error per column pair (k,)).
    """
    k = g.shape[1]
    stride = (g.shape[0] - 1) // level
    y = np.concatenate([g[::stride], r[::stride]], axis=1)
    hh = np.concatenate([h, h]) * stride
    coef = _spline_uniform(y, hh)
    exact = np.concatenate([g[stride // 2::stride], r[stride // 2::stride]], axis=1)
    dev = np.max(np.abs(_spline_mid(coef, 0.5 * hh) - exact), axis=0)
    return coef, np.maximum(dev[:k], dev[k:])


def _build(pairs: list[tuple[float, float]]) -> list:
    """:func:`side_table` of several sides at once (every step batched over the sides)."""
    res: list = [None] * len(pairs)
    lo, hi = SHAPE_RANGE
    ok = [i for i, (a, b) in enumerate(pairs) if lo <= a <= hi and lo <= b <= hi]
    if not ok:
        return res
    a = np.array([pairs[i][0] for i in ok])
    b = np.array([pairs[i][1] for i in ok])
    ns = a.size
    log_ab = (special.gammaln(a + 1.0) + special.gammaln(b + 1.0)
              - special.gammaln(a + b + 1.0) + np.log1p(a / b))
    lz_max = _log_z(a, b, np.full(ns, _LOG_HALF))[0]                   # x = 1/2
    lz_lo = (math.log(2.0 ** -53) + log_ab) / a                        # the smallest u
    if not np.all(lz_lo < lz_max):
        # I_{1/2}(a, b) below the smallest uniform (e.g. (60, 0.05)): no variate ever
        # reads this side; it is not tabulated (its pair keeps the exact sampler)
        keep = [k for k in range(ns) if lz_lo[k] < lz_max[k]]
        sub = _build([pairs[ok[k]] for k in keep]) if keep else []
        for k, r in zip(keep, sub):
            res[ok[k]] = r
        return res
    z_max = np.exp(lz_max)
    with np.errstate(under="ignore"):
        z_lo = np.where(lz_lo > -700.0, np.minimum(np.exp(np.maximum(lz_lo, -700.0)), z_max), 0.0)
    # starting points of Newton's iteration: log x against log z on a coarse grid per side
    sg = np.linspace(np.maximum(lz_lo - 5.0, -700.0), _LOG_HALF, _GUESS_POINTS, axis=1)
    fz = _log_z(np.repeat(a, _GUESS_POINTS), np.repeat(b, _GUESS_POINTS), sg.ravel())[0]
    fz = fz.reshape(ns, _GUESS_POINTS)

    def first_guess(side, z):
        return np.interp(np.log(np.where(z > 0, z, 1e-300)), fz[side], sg[side])

    # both grid powers at the first level: exact values on a grid of 2 * _FIRST_INTERVALS
    m = 2 * _FIRST_INTERVALS
    cols = [(j, p) for j in range(ns) for p in (1, 2)]
    pw = np.array([p for _, p in cols], dtype=float)
    side = np.array([j for j, _ in cols])
    v_hi = (1.0 - z_lo[side] / z_max[side]) ** (1.0 / pw)
    v = np.linspace(0.0, v_hi, m + 1)                                  # (m + 1, columns)
    z = z_max[side] * (1.0 - v ** pw)
    guess = np.stack([first_guess(j, z[:, c]) for c, j in enumerate(side)], axis=1)
    g, r = _exact(np.broadcast_to(a[side], z.shape).ravel(), np.broadcast_to(b[side], z.shape).ravel(),
                  z.ravel(), guess.ravel())
    g, r = g.reshape(z.shape), r.reshape(z.shape)
    coef, err = _level_error(g, r, v_hi / m, _FIRST_INTERVALS)
    # per side, the power with the smaller error (p = 1 on a tie)
    pick = np.where(err[1::2] < err[0::2], 1, 0) + 2 * np.arange(ns)
    st = {j: dict(p=pw[c], v_hi=v_hi[c], g=g[:, c], r=r[:, c], level=_FIRST_INTERVALS,
                  err=err[c], coef=coef[:, :, [c, c + 2 * ns]]) for j, c in enumerate(pick)}
    pending = list(range(ns))
    while pending:
        grow = []
        for j in pending:
            t = st[j]
            n, e = t["level"], t["err"]
            if e <= TOLERANCE:
                cg, cr = t["coef"][:, :, 0], t["coef"][:, :, 1]
                inv_h = n / t["v_hi"]
                head = np.array([log_ab[j], 1.0 / a[j], 1.0 / z_max[j], t["p"], float(n), inv_h])
                # each interval's start, as spline_eval computes it (0.0 + i / inv_h): the
                # kernel reads it instead of dividing, for the same bits
                block = np.concatenate([head, cg.ravel(), cr.ravel(), 0.0 + np.arange(n) / inv_h])
                block.setflags(write=False)
                res[ok[j]] = (block, float(e), n)
            # cubic splines converge as h**4: give up early when even MAX_INTERVALS would not do
            elif n >= MAX_INTERVALS or e * (n / MAX_INTERVALS) ** 4 > 4.0 * TOLERANCE:
                pass
            else:
                # the next levels to try: up to the first one that h**4 predicts to pass
                top = 2 * n
                while top < MAX_INTERVALS and e * (n / top) ** 4 > TOLERANCE:
                    top *= 2
                grow.append((j, top))
        if not grow:
            break
        # exact values on the grid of 2 * top intervals, Newton from the splines on the
        # current grid of 2 * level intervals (the midpoints of every level up to top)
        new_a, new_b, new_z, new_s, where = [], [], [], [], []
        for j, top in grow:
            t = st[j]
            old = t["g"].size - 1
            k = 2 * top // old
            vv = np.linspace(0.0, t["v_hi"], 2 * top + 1)
            fresh = np.ones(vv.size, bool)
            fresh[::k] = False
            h_old = t["v_hi"] / old
            cg = _spline_uniform(t["g"][:, None], np.array([h_old]))[:, :, 0]
            pos = np.flatnonzero(fresh)
            cell, d = pos // k, (pos % k) * (h_old / k)
            sg_new = cg[cell, 0] + d * (cg[cell, 1] + d * (cg[cell, 2] + d * cg[cell, 3]))
            zz = z_max[j] * (1.0 - vv[pos] ** t["p"])
            with np.errstate(divide="ignore"):
                new_s.append(np.log(zz) + sg_new)
            new_z.append(zz)
            new_a.append(np.full(pos.size, a[j]))
            new_b.append(np.full(pos.size, b[j]))
            where.append((j, k, pos, vv.size))
        gs, rs = _exact(np.concatenate(new_a), np.concatenate(new_b), np.concatenate(new_z),
                        np.concatenate(new_s))
        at = 0
        for j, k, pos, size in where:
            t = st[j]
            g_full, r_full = np.empty(size), np.empty(size)
            g_full[::k], r_full[::k] = t["g"], t["r"]
            g_full[pos], r_full[pos] = gs[at:at + pos.size], rs[at:at + pos.size]
            at += pos.size
            t["g"], t["r"] = g_full, r_full
        # the levels 2 level, 4 level, .., top in turn, each batched over the sides at it
        tops = dict(grow)
        live = [j for j, _ in grow]
        level = min(st[j]["level"] for j in live) * 2
        while live:
            at_level = [j for j in live if st[j]["level"] * 2 == level]
            groups: dict = {}
            for j in at_level:
                groups.setdefault(st[j]["g"].size, []).append(j)
            for size, js in groups.items():
                gg = np.stack([st[j]["g"] for j in js], axis=1)
                rr = np.stack([st[j]["r"] for j in js], axis=1)
                hh = np.array([st[j]["v_hi"] for j in js]) / (size - 1)
                coef, err = _level_error(gg, rr, hh, level)
                for c, j in enumerate(js):
                    st[j].update(level=level, err=err[c], coef=coef[:, :, [c, c + len(js)]])
            done = []
            for j in at_level:
                t = st[j]
                e, n = t["err"], t["level"]
                if (e <= TOLERANCE or n >= tops[j] or n >= MAX_INTERVALS
                        or e * (n / MAX_INTERVALS) ** 4 > 4.0 * TOLERANCE):
                    done.append(j)
            live = [j for j in live if j not in done]
            level *= 2
        pending = [j for j, _ in grow]
    return res


# sides built by a batched call of pair_block, handed over to side_table's cache
_batched: dict = {}
# sides side_table has computed (its cache may since have dropped some: they are rebuilt)
_tabled: set = set()


@lru_cache(maxsize=256)
def side_table(a: float, b: float) -> tuple[np.ndarray, float, int] | None:
    """One side: the lower half of Beta(a, b), or None when it cannot be tabulated.

    The grid is uniform in v = (1 - z / z_max)**(1 / p), p = 1 or 2, whichever gives the
    smaller error at 64 intervals (p = 1, uniform in z, suits small shapes; p = 2 packs
    knots towards x = 1/2, which large shapes and unequal ones need).

    Returns
    -------
    tuple or None
        (flat block in the layout of ``SIDE_HEADER`` plus coefficients, the measured
        largest midpoint error, number of intervals), or None when a shape lies outside
        :data:`SHAPE_RANGE` or the splines would need more than :data:`MAX_INTERVALS`.
    """
    _tabled.add((a, b))
    key = (a, b)
    if key in _batched:
        return _batched.pop(key)
    return _build([key])[0]


def _m0(a: float, b: float) -> float:
    """I_{1/2}(a, b), exactly 1/2 for equal shapes."""
    return 0.5 if a == b else float(special.betainc(a, b, 0.5))


def pair_block(pairs) -> tuple[np.ndarray, dict]:
    """Data of several shape pairs: per pair (m0, lower side, upper side), then the sides.

    Parameters
    ----------
    pairs : iterable of (float, float)
        Shape pairs (a, b); equal shapes share one side.

    Returns
    -------
    (numpy.ndarray, dict)
        The flat block and, per pair, the offset of its header in the block. A pair with
        a side that cannot be tabulated has both side offsets -1 (the kernels then use an
        exact sampler).
    """
    pairs = list(dict.fromkeys((float(a), float(b)) for a, b in pairs))
    where: dict = {}
    heads = np.empty(PAIR_HEADER * len(pairs))
    sides: list[np.ndarray] = []
    side_at: dict = {}
    off = PAIR_HEADER * len(pairs)
    # every side not yet tabulated, built in one batched call
    todo = list(dict.fromkeys(s for a, b in pairs for s in ((a, b), (b, a))
                              if s not in _tabled))
    if len(todo) > 1:
        _batched.update(zip(todo, _build(todo)))
    for i, (a, b) in enumerate(pairs):
        where[(a, b)] = PAIR_HEADER * i
        offs = []
        for p, q in ((a, b), (b, a)):
            if (p, q) not in side_at:
                t = side_table(p, q)
                if t is None:
                    side_at[(p, q)] = -1
                else:
                    side_at[(p, q)] = off
                    sides.append(t[0])
                    off += t[0].size
            offs.append(side_at[(p, q)])
        if min(offs) < 0:
            offs = [-1, -1]
        heads[PAIR_HEADER * i:PAIR_HEADER * (i + 1)] = [_m0(a, b), offs[0], offs[1]]
    return np.concatenate([heads] + sides), where


#: Intervals of a split's emptiness table (:func:`cdf_table`) on x in [log(1/2), 0].
CDF_INTERVALS = 64
#: Length of an emptiness table's header: (n_int, x0, inv_h, h, margin, equal shapes).
CDF_HEADER = 6
# the quantile tables' error in log x and in r, which the emptiness margin covers in u
_QUANTILE_ERR = 1e-11


def cdf_table(a: float, b: float, n_int: int = CDF_INTERVALS) -> np.ndarray:
    """When a split of Beta(a, b) leaves both parts below a cut-off, read from its uniform.

    With the quantile's inversion X = F^-1(u) (F the CDF of Beta(a, b)), both X and 1 - X
    are below y in (1/2, 1] exactly when F(1 - y) < u < F(y). The table holds cubic
    splines of F(e^x) and (unequal shapes only; else it is 1 - F(e^x)) F(1 - e^x) on a
    uniform grid of ``n_int`` intervals over x = log y in [log(1/2), 0], knots from
    ``scipy.special.betainc``, and a margin in u: twice the splines' largest error at 16
    points per interval, plus the quantile tables' error (1e-11 in log X) times twice the
    largest density on the grid, plus 1e-14. A uniform inside the interval by that margin
    gives parts that the quantile tables, too, put below y (see
    ``brwsim.kernels.dirichlet._split_empty``).

    Returns
    -------
    numpy.ndarray
        (n_int, x0, inv_h, h, margin, equal) then 4 * n_int coefficients of F(e^x), then,
        for unequal shapes, 4 * n_int of F(1 - e^x).
    """
    x0 = math.log(0.5)
    h = -x0 / n_int
    xk = x0 + h * np.arange(n_int + 1)
    xk[-1] = 0.0
    equal = a == b
    cols = [special.betainc(a, b, np.exp(xk))]
    if not equal:
        cols.append(special.betainc(a, b, -np.expm1(xk)))
    coef = _spline_uniform(np.stack(cols, axis=1), np.full(len(cols), h))   # (n, 4, k)
    d = h * (np.arange(16) + 0.5) / 16
    xs = (x0 + h * np.arange(n_int))[:, None] + d[None, :]                 # (n, 16)
    err = 0.0
    for k, exact in enumerate([np.exp(xs), -np.expm1(xs)][:len(cols)]):
        c = coef[:, :, k]
        fit = c[:, 0:1] + d * (c[:, 1:2] + d * (c[:, 2:3] + d * c[:, 3:4]))
        err = max(err, float(np.max(np.abs(fit - special.betainc(a, b, exact)))))
    grid = np.linspace(1e-6, 1.0 - 1e-6, 2001)
    dens = float(np.max(np.exp((a - 1.0) * np.log(grid) + (b - 1.0) * np.log1p(-grid)
                               - special.betaln(a, b))))
    margin = 2.0 * err + 2.0 * dens * _QUANTILE_ERR + 1e-14
    head = np.array([n_int, x0, 1.0 / h, h, margin, 1.0 if equal else 0.0])
    return np.concatenate([head] + [coef[:, :, k].ravel() for k in range(len(cols))])


def tree_block(alpha: float, vocab: int, picked: int = 1) -> np.ndarray:
    """Data of the DIRICHLET aggregation sampler: two indexes of ``vocab + 1`` entries, the
    pairs, then the emptiness tables.

    Entry m of the first index (a group of m >= 2 tokens, split into m // 2 and
    m - m // 2) is the offset, in the returned block, of the pair (m // 2 alpha,
    (m - m // 2) alpha); entry m of the second that of the pair's :func:`cdf_table`; both
    -1 for m < 2, for groups of at most ``picked`` tokens (drawn by size-biased picks, no
    table), for sizes that the halving tree of ``vocab`` never reaches and (the second)
    for pairs that are not tabulated.
    """
    sizes, todo = set(), [vocab]
    while todo:
        m = todo.pop()
        if m >= 2 and m > picked and m not in sizes:
            sizes.add(m)
            todo += [m // 2, m - m // 2]
    order = sorted(sizes)
    shape = {m: (float(m // 2 * alpha), float((m - m // 2) * alpha)) for m in order}
    block, where = pair_block(shape[m] for m in order)
    start = 2 * (vocab + 1)
    index = np.full(2 * (vocab + 1), -1.0)
    cdfs, off = [], start + block.size
    for m in order:
        index[m] = start + where[shape[m]]
        if block[where[shape[m]] + 1] >= 0:
            t = cdf_table(*shape[m])
            index[vocab + 1 + m] = off
            cdfs.append(t)
            off += t.size
    out = np.concatenate([index, block] + cdfs)
    # side offsets inside the pair block are relative to it: shift them past the indexes
    for i in range(len(where)):
        for k in (1, 2):
            j = start + PAIR_HEADER * i + k
            if out[j] >= 0:
                out[j] += start
    return out
