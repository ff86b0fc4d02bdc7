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

from brwsim.families.tables import _spline_coef

__all__ = ["TOLERANCE", "MAX_INTERVALS", "SHAPE_RANGE", "side_table", "pair_block",
           "tree_block", "SIDE_HEADER", "PAIR_HEADER"]

#: Largest error of a table at its interval midpoints, absolute in log x and in r.
TOLERANCE = 1e-11
#: Most intervals of one side's splines (two splines of 4 coefficients each).
MAX_INTERVALS = 2048
#: Shapes outside this range are never tabulated (the series for F grows slowly past it).
SHAPE_RANGE = (1e-6, 100.0)
_FIRST_INTERVALS = 64
_LOG_HALF = math.log(0.5)
# layout, relative to a side's offset: (log(a B(a, b)), 1 / a, 1 / z_max, p, n_int, inv_h),
# then 4 * n_int coefficients of g, then 4 * n_int of r
SIDE_HEADER = 6
# layout of a pair: (m0, offset of the lower side, offset of the upper side), offsets
# relative to the block's start; -1 when the pair is not tabulated
PAIR_HEADER = 3


def _f_minus_one(a: float, b: float, x: np.ndarray) -> np.ndarray:
    """2F1(a + b, 1; a + 1; x) - 1 for 0 <= x <= 1/2, summed term by term (relative accuracy)."""
    term = x * ((a + b) / (a + 1.0))
    total = term.copy()
    n = 1
    while n < 100_000:
        term = term * x * ((a + b + n) / (a + 1.0 + n))
        total += term
        n += 1
        if not np.any(term > 1e-17 * total):
            break
    return total


def _log_z(a: float, b: float, s: np.ndarray):
    """(log z, x, 2F1 - 1) at log x = s: log z = s + (b / a) log(1 - x) + log(2F1) / a."""
    x = np.exp(s)
    h = _f_minus_one(a, b, x)
    return s + (b / a) * np.log1p(-x) + np.log1p(h) / a, x, h


def _solve(a: float, b: float, lz: np.ndarray, s: np.ndarray) -> np.ndarray:
    """log x with log z(log x) = lz, Newton from s (d log z / d log x = 1 / ((1 - x) 2F1))."""
    for _ in range(100):
        f, x, h = _log_z(a, b, s)
        step = (f - lz) * (1.0 - x) * (1.0 + h)
        s = np.minimum(s - step, _LOG_HALF)
        # quadratic convergence: after a step of 1e-10 the error is at rounding level
        # (a tighter test would chase the rounding noise of log z)
        if np.max(np.abs(step)) <= 1e-10:
            break
    return s


def _log_ab(a: float, b: float) -> float:
    """log(a B(a, b)) = log G(a+1) + log G(b+1) - log G(a+b+1) + log1p(a / b), no cancellation."""
    return float(special.gammaln(a + 1.0) + special.gammaln(b + 1.0)
                 - special.gammaln(a + b + 1.0) + math.log1p(a / b))


def _exact(a: float, b: float, z: np.ndarray, guess: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact (g, r) at z (Newton from log x = ``guess``); g(0) = 0 and r(0) = 1 in the limit."""
    g, r = np.zeros_like(z), np.ones_like(z)
    pos = z > 0.0
    lz = np.log(z[pos])
    s = _solve(a, b, lz, guess[pos])
    g[pos] = s - lz
    r[pos] = -np.log1p(-np.exp(s)) / z[pos]
    return g, r


def _spline_at(coef: np.ndarray, d: np.ndarray) -> np.ndarray:
    return coef[:, 0] + d * (coef[:, 1] + d * (coef[:, 2] + d * coef[:, 3]))


class _Side:
    """The splines of one side at a given grid power p: v = (1 - z / z_max)**(1 / p)."""

    def __init__(self, a, b, z_max, z_lo, power, guess):
        self.a, self.b, self.z_max, self.power = a, b, z_max, power
        self.v_hi = (1.0 - z_lo / z_max) ** (1.0 / power)
        self.n = _FIRST_INTERVALS
        self.v = np.linspace(0.0, self.v_hi, self.n + 1)
        z = self._z(self.v)
        self.g, self.r = _exact(a, b, z, guess(z))
        self._fit()

    def _z(self, v):
        return self.z_max * (1.0 - v ** self.power)

    def _fit(self):
        """Splines on the current knots, and their largest error at the midpoints."""
        self.cg, self.cr = _spline_coef(self.v, self.g), _spline_coef(self.v, self.r)
        self.vm = 0.5 * (self.v[1:] + self.v[:-1])
        d = self.vm - self.v[:-1]
        zm = self._z(self.vm)
        sg = _spline_at(self.cg, d)                     # the spline's own guess of g
        with np.errstate(divide="ignore"):
            self.gm, self.rm = _exact(self.a, self.b, zm, np.log(zm) + sg)
        self.err = max(float(np.max(np.abs(sg - self.gm))),
                       float(np.max(np.abs(_spline_at(self.cr, d) - self.rm))))

    def refine(self):
        """Double the intervals: the midpoints become knots."""
        n = self.n
        v, g, r = np.empty(2 * n + 1), np.empty(2 * n + 1), np.empty(2 * n + 1)
        v[0::2], v[1::2] = self.v, self.vm
        g[0::2], g[1::2] = self.g, self.gm
        r[0::2], r[1::2] = self.r, self.rm
        self.v, self.g, self.r, self.n = v, g, r, 2 * n
        self._fit()


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
    lo, hi = SHAPE_RANGE
    if not (lo <= a <= hi and lo <= b <= hi):
        return None
    log_ab = _log_ab(a, b)
    lz_max = float(_log_z(a, b, np.array([_LOG_HALF]))[0][0])      # x = 1/2
    lz_lo = (math.log(2.0 ** -53) + log_ab) / a                        # the smallest u
    z_max = math.exp(lz_max)
    z_lo = min(math.exp(lz_lo), z_max) if lz_lo > -700.0 else 0.0
    # starting points of Newton's iteration: log x against log z on a coarse grid
    sg = np.linspace(max(lz_lo - 5.0, -700.0), _LOG_HALF, 400)
    fz = _log_z(a, b, sg)[0]

    def guess(z):
        return np.interp(np.log(np.where(z > 0, z, 1e-300)), fz, sg)

    side = min((_Side(a, b, z_max, z_lo, p, guess) for p in (1, 2)), key=lambda t: t.err)
    while side.err > TOLERANCE:
        # cubic splines converge as h**4: give up early when even MAX_INTERVALS would not do
        if side.n >= MAX_INTERVALS or side.err * (side.n / MAX_INTERVALS) ** 4 > 4.0 * TOLERANCE:
            return None
        side.refine()
    n = side.n
    head = np.array([log_ab, 1.0 / a, 1.0 / z_max, float(side.power), float(n), n / side.v_hi])
    block = np.concatenate([head, side.cg.ravel(), side.cr.ravel()])
    block.setflags(write=False)
    return block, side.err, n


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


def tree_block(alpha: float, vocab: int) -> np.ndarray:
    """Data of the DIRICHLET aggregation sampler: ``vocab + 1`` pair offsets, then the pairs.

    Entry m (a group of m >= 2 tokens, split into m // 2 and m - m // 2) is the offset, in
    the returned block, of the pair (m // 2 alpha, (m - m // 2) alpha); -1 for m < 2 and
    for sizes that the halving tree of ``vocab`` never reaches.
    """
    sizes, todo = set(), [vocab]
    while todo:
        m = todo.pop()
        if m >= 2 and m not in sizes:
            sizes.add(m)
            todo += [m // 2, m - m // 2]
    order = sorted(sizes)
    block, where = pair_block((m // 2 * alpha, (m - m // 2) * alpha) for m in order)
    index = np.full(vocab + 1, -1.0)
    for m in order:
        index[m] = vocab + 1 + where[(float(m // 2 * alpha), float((m - m // 2) * alpha))]
    out = np.concatenate([index, block])
    # side and pair offsets inside the block are relative to it: shift them past the index
    npairs = len(where)
    for i in range(npairs):
        for k in (1, 2):
            j = vocab + 1 + PAIR_HEADER * i + k
            if out[j] >= 0:
                out[j] += vocab + 1
    return out
