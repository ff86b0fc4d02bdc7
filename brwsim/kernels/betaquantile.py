"""Beta variates by a tabulated inverse CDF in log space (tables: :mod:`brwsim.families.betaquantile`).

One uniform u gives X ~ Beta(a, b) as the pair (log X, log(1 - X)), both accurate when X
or 1 - X is tiny: u <= m0 = I_{1/2}(a, b) takes the lower-half table of (a, b) at level u,
and u > m0 the lower-half table of (b, a) at level 1 - u (exact in floating point) for
1 - X. A side computes z = (u a B(a, b))**(1 / a) in logs, then log x = log z + g(z) and
log(1 - x) = -z r(z) from two cubic splines on a grid uniform in v = (1 - z / z_max)**(1/p)
(evaluated as :func:`brwsim.kernels.special.spline_eval`, with the intervals' starts read
from the side's table instead of divided: the same bits).
The splines' error is at most 1e-11 in log x (absolute) and in r (measured at every
interval midpoint when the table is built); the rounding of log u adds about 1e-16 / a
to log x, as for any inversion of a 53-bit uniform.
"""

from __future__ import annotations

import math

from brwsim.kernels import inline_kernel
from brwsim.kernels.special import spline_index, spline_poly

#: Length of a side's header; the side's layout is documented with its builder,
#: :mod:`brwsim.families.betaquantile`.
SIDE_HEADER = 6


@inline_kernel
def _side_point(data, off, y):
    """(log z, z, grid abscissa v) of the lower-half side at ``data[off]``, y = log u."""
    lz = (y + data[off]) * data[off + 1]
    z = math.exp(lz)
    w = max(1.0 - z * data[off + 2], 0.0)
    return lz, z, (math.sqrt(w) if data[off + 3] == 2.0 else w)


@inline_kernel
def _side_cell(data, off, v):
    """Where the side at ``data[off]`` evaluates its splines at v: the offsets of the g and
    r coefficients of v's interval and v's offset in it. The interval's start is read from
    the table after the coefficients, not divided: :func:`spline_eval`'s bits."""
    n_int = int(data[off + 4])
    i = spline_index(n_int, 0.0, data[off + 5], v)
    j = off + SIDE_HEADER + 4 * i
    return j, j + 4 * n_int, v - data[off + SIDE_HEADER + 8 * n_int + i]


@inline_kernel
def _side_log1m(data, off, z, v):
    """log(1 - x) = -z r(v) of the side at ``data[off]``."""
    _, jr, d = _side_cell(data, off, v)
    return -z * spline_poly(data, jr, d)


@inline_kernel
def _lower_side(data, off, y):
    """(log x, log(1 - x)) of the lower-half quantile of the side at ``data[off]``, y = log u."""
    lz, z, v = _side_point(data, off, y)
    jg, jr, d = _side_cell(data, off, v)
    return lz + spline_poly(data, jg, d), -z * spline_poly(data, jr, d)


@inline_kernel
def beta_log_pair(data, base, pair, u):
    """(log X, log(1 - X)) for X ~ Beta(a, b) at the uniform u in (0, 1].

    ``data[base + pair]`` is the pair's header (m0, lower side, upper side), side offsets
    relative to ``base``; the caller checks that the pair is tabulated (side >= 0).
    """
    p = base + pair
    if u <= data[p]:
        return _lower_side(data, base + int(data[p + 1]), math.log(u))
    l1x, lx = _lower_side(data, base + int(data[p + 2]), math.log(1.0 - u))
    return lx, l1x


@inline_kernel
def beta_log_heavy(data, base, pair, u):
    """The larger of log X and log(1 - X) for X ~ Beta(a, b) at the uniform u, and True
    when it is log X: the same numbers as :func:`beta_log_pair`'s for that part, without
    the other part's spline (X <= 1/2 exactly when u <= m0 = I_{1/2}(a, b); the other
    part's computed value is at most log(1/2) plus the tables' error)."""
    p = base + pair
    if u <= data[p]:
        off = base + int(data[p + 1])
        lz, z, v = _side_point(data, off, math.log(u))
        return False, _side_log1m(data, off, z, v)
    off = base + int(data[p + 2])
    lz, z, v = _side_point(data, off, math.log(1.0 - u))
    return True, _side_log1m(data, off, z, v)
