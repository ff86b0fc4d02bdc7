"""Spine-step laws on a grid: exact Zipf cells and sampled distributions of any family.

A spine-step law F (the law of ``-log q_I`` with ``I ~ q``) enters the renewal equation
through its masses on the grid ``j * h``. Two discretisations are used
(:mod:`brwsim.spinelaw`):

* ``split`` (mode 0): an atom at x in ``[j h, (j + 1) h)`` is split between j and j + 1 so
  that both its mass w and its count mass ``w e^x`` are preserved (the prediction);
* ``floor`` (mode 1): the atom goes to j whole. Every position then only decreases, which
  is what makes :func:`brwsim.theory.upper_bound` a proven bound.

Both kernels here deposit onto caller-allocated arrays and allocate nothing else.
"""

from __future__ import annotations

import math

import numpy as np

from brwsim.kernels import kernel
from brwsim.kernels.dist import (
    _GAIN_FAR,
    _GAIN_POW,
    _TAIL_GAIN,
    OS_LOGM1,
    OS_LOGW,
    ORDERSTAT,
    ROOT_DRAW,
    dist_init,
    dist_next,
)
from brwsim.kernels.rng import root_key
from brwsim.kernels.special import spline_eval, zipf_sum

SPLIT = 0
FLOOR = 1
_DIRECT = 1 << 14     # Zipf partial sums up to this rank are accumulated term by term


@kernel
def _deposit(out, row, x, w, h, expm1_h, mode):
    """Add an atom (x, w) to ``out[row, :]`` in the given discretisation mode."""
    size = out.shape[1]
    j = math.floor(x / h)
    if j >= size or j < 0:
        return
    if mode == FLOOR:
        out[row, j] += w
        return
    upper = math.expm1((x / h - j) * h) / expm1_h
    out[row, j] += w * (1.0 - upper)
    if j + 1 < size:
        out[row, j + 1] += w * upper


@kernel
def _zipf_cdfs(s, vocab, log_z, skip, h, mass, count):
    """Cumulative mass and token count of a fixed-exponent Zipf law below each grid point.

    Ranks 1..``skip`` are left out (they are handled as atoms by the caller). With
    ``x_i = s log i + log Z`` the step of rank i, ``count[j] = #{i > skip: x_i < j h}`` and
    ``mass[j] = sum of i**-s / Z over those ranks``; ``mass`` and ``count`` have one entry
    per grid point (``size + 1`` for ``size`` cells).
    """
    n_pts = mass.shape[0]
    h_skip = zipf_sum(skip, s, 0) if skip > 0 else 0.0
    z = math.exp(log_z)
    n_run = 0           # ranks summed directly so far (the counts grow with j)
    s_run = 0.0
    for j in range(n_pts):
        x = j * h
        if s == 0.0:
            n = vocab if x > log_z else 0
        else:
            e = (x - log_z) / s
            if e >= math.log(vocab + 1.0):
                n = vocab
            elif e < 0.0:
                n = 0
            else:
                n = int(math.floor(math.exp(e)))
                # strict inequality: an atom exactly on the grid point is not below it
                if n >= 1 and s * math.log(n) + log_z >= x:
                    n -= 1
                if n > vocab:
                    n = vocab
        if n <= skip:
            mass[j] = 0.0
            count[j] = 0.0
            continue
        if n <= _DIRECT:
            while n_run < n:
                n_run += 1
                s_run += float(n_run) ** (-s)
            total = s_run
        else:
            total = zipf_sum(n, s, 0)
        mass[j] = (total - h_skip) / z
        count[j] = n - skip


#: Default switch of a lazy order-statistic tail from rank-by-rank generation to the
#: mean-field cell walk (:func:`_orderstat_walk`): the last rank's probability is below this
#: fraction of the expected remaining tail mass ...
SWITCH_RATIO = 1e-3
#: ... and the drawn tail's relative discrepancy ``|M / mu - 1|`` is below this.
SWITCH_RHO = 0.25
#: Spacing (in log weight) of the tabulated cumulative functions of an order-statistic law.
TABLE_STEP = 1e-3


@kernel
def _spline_val_der(coef, off, n_int, x0, inv_h, x):
    """A cubic spline of :func:`brwsim.kernels.special.spline_eval` and its derivative at x."""
    f = (x - x0) * inv_h
    i = int(f)
    if f < 0.0:
        i = 0
    elif i >= n_int:
        i = n_int - 1
    d = x - (x0 + i / inv_h)
    j = off + 4 * i
    val = coef[j] + d * (coef[j + 1] + d * (coef[j + 2] + d * coef[j + 3]))
    der = coef[j + 1] + d * (2.0 * coef[j + 2] + 3.0 * d * coef[j + 3])
    return val, der


@kernel
def _os_tables(data, fpar, ipar, c, t_lo, t_hi, y0, tau, logu, logp):
    """Tabulate the weight law of ORDERSTAT component ``c`` on a uniform grid of log weight.

    At ``y_i = y0 + i tau`` (weight ``w = e^{-y_i}``), ``logu[i] = log P(W < w)`` and
    ``logp[i] = log E[W 1{W < w}]``, with W the (tempered) weight of the kernels' splines:
    the spline of log W in ``t = log A`` (A = -log CDF) is inverted by safeguarded Newton
    on ``[t_lo, t_hi]`` (to 1e-14), so the tables are the kernels' own law. Returns the
    number of valid entries (the grid stops where the spline's domain ends).
    """
    n_int = ipar[c, 3]
    off_w = ipar[c, 0] + OS_LOGW * n_int * 4
    off_m = ipar[c, 0] + OS_LOGM1 * n_int * 4
    x0, inv_h = fpar[c, 0], fpar[c, 1]
    w_hi, _ = _spline_val_der(data, off_w, n_int, x0, inv_h, t_hi)
    t = t_lo
    n = logu.shape[0]
    for i in range(n):
        target = -(y0 + i * tau)
        if target < w_hi:
            return i
        lo = t
        hi = t_hi
        for _ in range(100):
            val, der = _spline_val_der(data, off_w, n_int, x0, inv_h, t)
            g = val - target
            if g > 0.0:
                lo = t
            else:
                hi = t
            if abs(g) <= 1e-14 * max(1.0, abs(target)) or hi - lo <= 1e-15 * max(1.0, abs(t)):
                break
            tn = t - g / der if der < 0.0 else 0.5 * (lo + hi)
            if not (lo < tn < hi):
                tn = 0.5 * (lo + hi)
            t = tn
        logu[i] = -math.exp(t)
        logp[i] = spline_eval(data, off_m, n_int, x0, inv_h, t)
    return n


@kernel
def _table_at(logu, logp, row, y0, tau, n_valid, y):
    """Log-linear interpolation of the two tables of row ``row`` at y (NaN beyond them)."""
    f = (y - y0) / tau
    if f < 0.0:
        f = 0.0
    i = int(f)
    if i >= n_valid - 1:
        return np.nan, np.nan
    fr = f - i
    return (logu[row, i] + fr * (logu[row, i + 1] - logu[row, i]),
            logp[row, i] + fr * (logp[row, i + 1] - logp[row, i]))


@kernel
def _deposit_cell(split, floor, row, j, mass, count, h, expm1_h):
    """Deposit ranks lying in cell j (total probability ``mass``, ``count`` ranks).

    Exact for any atoms inside ``[j h, (j + 1) h)``: their count mass ``sum q e^x`` is the
    count, and the split that keeps mass and count mass depends only on the two totals.
    """
    size = split.shape[1]
    if j < 0 or j >= size or not mass > 0.0:
        return
    up = (count * math.exp(-j * h) - mass) / expm1_h
    if up < 0.0:
        up = 0.0
    elif up > mass:
        up = mass
    split[row, j] += mass - up
    if j + 1 < size:
        split[row, j + 1] += up
    floor[row, j] += mass


@kernel
def _orderstat_walk(data, fpar, ipar, c, d, lf, li, logu, logp, tab_y0, tab_n, tau, h,
                    expm1_h, eps, split, floor, row):
    """Deposit the rest of a lazy order-statistic tail by a mean-field walk over the cells.

    Level ``d`` holds a lazy ORDERSTAT tail (:func:`brwsim.kernels.dist._orderstat_tail`)
    after some rank r: the remaining ``m = n - 1 - r`` weights are i.i.d. W given
    W < w_r, and rank j takes ``q_j = f_j w_j / Z`` with ``f_j = 1 + g (M - mu) / mu``
    (M the mass not yet emitted, mu its conditional mean). Instead of drawing them, the
    walk steps through the grid cells ``[x, (j + 1) h)`` in x = -log q: with f fixed
    within a cell, the ranks in it are those with ``-log W`` up to
    ``y_end = (j + 1) h + log f - log Z``, and their expected number and mass follow from
    the tabulated ``P(W < w)`` and ``E[W 1{W < w}]`` (:func:`_os_tables`). Each cell is
    deposited by its two totals (:func:`_deposit_cell`, exact within a cell), then M, m,
    mu and f are updated by the expected values (the same recursion as the kernels, with
    the clip ``q >= M / (m + 1)``). This is the conditional expectation of the cells given
    the state at rank r, except that f follows the mean of M rather than its path; that
    path's remaining noise has relative variance below ``q_r / mu_r``, which the caller
    keeps small (``SWITCH_RATIO``). What is left when M < eps, no rank remains or the
    table ends goes to the last position (a lower position: conservative for the floor
    grid); mass beyond the grid is dropped, as the rank-by-rank sampler drops it.

    Returns
    -------
    (e1, e2, cells) : tuple of float, float, int
        ``sum q x`` and ``sum q x^2`` of the deposited mass, and the cells walked.
    """
    n = ipar[c, 2]
    size = split.shape[1]
    log_z = lf[d, 0]
    left = lf[d, 2]
    prev = lf[d, 3]
    mu = lf[d, 4]
    mu0 = lf[d, 5]
    m_rem = float(n - li[d, 1])
    y0 = tab_y0[c]
    nv = tab_n[c]
    n_int = ipar[c, 3]
    y = -spline_eval(data, ipar[c, 0] + OS_LOGW * n_int * 4, n_int, fpar[c, 0], fpar[c, 1],
                     math.log(lf[d, 1]))
    lu, lp = _table_at(logu, logp, c, y0, tau, nv, y)
    x = -math.log(prev)
    j = int(math.floor(x / h))
    e1 = 0.0
    e2 = 0.0
    cells = 0
    dropped = False
    while lu == lu and left >= eps and m_rem >= 0.5:
        if j >= size:
            dropped = True
            break
        wq = math.exp(-y - log_z)
        f = 1.0
        if mu > 0.0:
            frac = mu / mu0 if mu0 > mu else 1.0
            gain = _GAIN_FAR - (_GAIN_FAR - _TAIL_GAIN) * frac ** _GAIN_POW
            f = 1.0 + gain * (left - mu) / mu
        lo_f = left / (m_rem * wq)
        if f < lo_f:
            f = lo_f
        x_end = (j + 1) * h
        y_end = x_end + math.log(f) - log_z
        if y_end > y:
            lu_end, lp_end = _table_at(logu, logp, c, y0, tau, nv, y_end)
            if lu_end != lu_end:
                break
            k = m_rem * -math.expm1(lu_end - lu)
            am = f * m_rem * math.exp(lp - lu - log_z) * -math.expm1(lp_end - lp)
            if am > left:
                am = left
            if k > 0.0 and am > 0.0:
                _deposit_cell(split, floor, row, j, am, k, h, expm1_h)
                xe = math.log(k / am)
                xe = min(max(xe, x), x_end)
                e1 += am * xe
                e2 += am * xe * xe
                left -= am
                m_rem -= k
            y, lu, lp = y_end, lu_end, lp_end
            wq = math.exp(-y - log_z)
            mu = m_rem * min(math.exp(lp - lu - log_z), wq) if m_rem > 0.0 else 0.0
        x = x_end
        j += 1
        cells += 1
    if left > 0.0 and not dropped:
        # the last rank takes what is left (exact); below eps it is where generation stopped
        xr = -math.log(left) if m_rem < 0.5 and left >= eps else x
        xr = max(xr, x)
        _deposit(split, row, xr, left, h, expm1_h, SPLIT)
        _deposit(floor, row, xr, left, h, expm1_h, FLOOR)
        if left >= eps:
            e1 += left * xr
            e2 += left * xr * xr
    return e1, e2, cells


@kernel
def _sample_cells(kinds, cw, fpar, ipar, data, cprog, key, n_dist, h, eps, lf, li, head,
                  logu, logp, tab_y0, tab_n, tau, switch_ratio, switch_rho,
                  split, floor, ranks, cells, ent, ent2):
    """Deposit the whole distributions of ``n_dist`` i.i.d. nodes onto ``split`` and ``floor``.

    Node k's distribution (a root drawn with key ``root_key(key, k)``) is generated rank
    by rank with the family's own kernels; each rank (x = -log q, weight q) goes to batch
    row ``k % split.shape[0]`` of both grids (split and floor discretisation). Generation
    stops when the remaining mass is below ``eps``; that remainder is put at the last
    rank's position (a lower position: conservative for the floor grid).

    A lazy order-statistic tail (ORDERSTAT component c with ``tab_n[c] > 0``, tables from
    :func:`_os_tables`) switches to the mean-field cell walk :func:`_orderstat_walk` once
    the last rank's probability is below ``switch_ratio`` times the expected remaining
    mass mu and ``|M / mu - 1| < switch_rho``; ``switch_ratio = 0`` keeps every rank exact.

    Per node, ``ranks[k]`` is the number of ranks generated, ``cells[k]`` the cells
    walked, ``ent[k]`` its entropy and ``ent2[k]`` its ``sum q (log q)^2``.
    """
    n_batch = split.shape[0]
    expm1_h = math.expm1(h)
    for k in range(n_dist):
        row = k % n_batch
        dkey = root_key(key, np.uint64(k))
        dist_init(kinds, cw, fpar, ipar, data, cprog, dkey, 0, lf, li, head, -np.inf,
                  ROOT_DRAW, 0)
        c = li[0, 2]
        walk = li[0, 0] == ORDERSTAT and tab_n[c] > 0 and switch_ratio > 0.0
        cum = 0.0
        x_last = 0.0
        e1 = 0.0
        e2 = 0.0
        r = 0
        lq = 0.0
        n_cells = 0
        walked = False
        while True:
            lq = dist_next(fpar, ipar, data, dkey, 0, lf, li, head)
            if lq == -np.inf:
                break
            q = math.exp(lq)
            x_last = -lq if lq < 0.0 else 0.0
            _deposit(split, row, x_last, q, h, expm1_h, SPLIT)
            _deposit(floor, row, x_last, q, h, expm1_h, FLOOR)
            cum += q
            e1 += q * x_last
            e2 += q * x_last * x_last
            r += 1
            if 1.0 - cum < eps:
                break
            if walk and r > ipar[c, 4] and r < ipar[c, 2]:
                mu = lf[0, 4]
                if (mu > 0.0 and lf[0, 3] < switch_ratio * mu
                        and abs(lf[0, 2] / mu - 1.0) < switch_rho):
                    w1, w2, n_cells = _orderstat_walk(data, fpar, ipar, c, 0, lf, li, logu,
                                                      logp, tab_y0, tab_n, tau, h, expm1_h,
                                                      eps, split, floor, row)
                    e1 += w1
                    e2 += w2
                    walked = True
                    break
        rem = 1.0 - cum
        if not walked and rem > 0.0 and r > 0 and lq != -np.inf:
            _deposit(split, row, x_last, rem, h, expm1_h, SPLIT)
            _deposit(floor, row, x_last, rem, h, expm1_h, FLOOR)
        ranks[k] = r
        cells[k] = n_cells
        ent[k] = e1
        ent2[k] = e2
