"""Beta variates by a tabulated inverse CDF in log space (tables: :mod:`brwsim.families.betaquantile`).

One uniform u gives X ~ Beta(a, b) as the pair (log X, log(1 - X)), both accurate when X
or 1 - X is tiny: u <= m0 = I_{1/2}(a, b) takes the lower-half table of (a, b) at level u,
and u > m0 the lower-half table of (b, a) at level 1 - u (exact in floating point) for
1 - X. A side computes z = (u a B(a, b))**(1 / a) in logs, then log x = log z + g(z) and
log(1 - x) = -z r(z) from two cubic splines on a grid uniform in v = (1 - z / z_max)**(1/p).
The splines' error is at most 1e-11 in log x (absolute) and in r (measured at every
interval midpoint when the table is built); the rounding of log u adds about 1e-16 / a
to log x, as for any inversion of a 53-bit uniform.
"""

from __future__ import annotations

import math

from brwsim.kernels import inline_kernel
from brwsim.kernels.special import spline_eval


@inline_kernel
def _lower_side(data, off, y):
    """(log x, log(1 - x)) of the lower-half quantile of the side at ``data[off]``, y = log u."""
    lz = (y + data[off]) * data[off + 1]
    z = math.exp(lz)
    w = max(1.0 - z * data[off + 2], 0.0)
    v = math.sqrt(w) if data[off + 3] == 2.0 else w
    n_int = int(data[off + 4])
    inv_h = data[off + 5]
    g = spline_eval(data, off + 6, n_int, 0.0, inv_h, v)
    r = spline_eval(data, off + 6 + 4 * n_int, n_int, 0.0, inv_h, v)
    return lz + g, -z * r


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
