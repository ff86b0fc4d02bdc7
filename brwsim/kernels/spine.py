"""Spine-step laws on a grid: exact Zipf cells and sampled distributions of any family.

A spine-step law F (the law of ``-log q_I`` with ``I ~ q``) enters the renewal equation
through its masses on the grid ``j * h``. Two discretisations are used
(:mod:`brwsim.theory.laws`):

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
from brwsim.kernels.closed import PEAKED_VOCAB
from brwsim.kernels.dist import (DATA_OFF, GEOMETRIC, ORDERSTAT, PEAKED, ROOT_DRAW, ZIPF, dist_init,
                                 dist_next)
from brwsim.kernels.orderstat import (GAIN_FAR, GAIN_POW, OS_INV_H, OS_LOGM1, OS_LOGW, OS_N_HEAD,
                                      OS_N_INT, OS_VOCAB, OS_X0, TAIL_GAIN)
from brwsim.kernels.rng import mix, normal, root_key, unit
from brwsim.kernels.special import spline_eval, spline_val_der, zipf_sum

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
                n = int(math.exp(e) // 1.0)
                # strict inequality: an atom exactly on the grid point is not below it
                if n >= 1 and s * math.log(n) + log_z >= x:
                    n -= 1
                n = min(n, vocab)
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
#: Deterministic tails (Zipf, geometric) are walked from this rank on, at the earliest.
_WALK_FROM = 1000
#: Mean displacement allowed per span of the walk, relative to the mass left (see
#: :func:`_orderstat_walk`).
_SPAN_ERR = 1e-8


@kernel
def _os_tables(data, fpar, ipar, c, t_lo, t_hi, y0, tau, logu, logp):
    """Tabulate the weight law of ORDERSTAT component ``c`` on a uniform grid of log weight.

    At ``y_i = y0 + i tau`` (weight ``w = e^{-y_i}``), ``logu[i] = log P(W < w)`` and
    ``logp[i] = log E[W 1{W < w}]``, with W the (tempered) weight of the kernels' splines:
    the spline of log W in ``t = log A`` (A = -log CDF) is inverted by safeguarded Newton
    on ``[t_lo, t_hi]`` (to 1e-14), so the tables are the kernels' own law. Returns the
    number of valid entries (the grid stops where the spline's domain ends).
    """
    n_int = ipar[c, OS_N_INT]
    off_w = ipar[c, DATA_OFF] + OS_LOGW * n_int * 4
    off_m = ipar[c, DATA_OFF] + OS_LOGM1 * n_int * 4
    x0, inv_h = fpar[c, OS_X0], fpar[c, OS_INV_H]
    w_hi, _ = spline_val_der(data, off_w, n_int, x0, inv_h, t_hi)
    t = t_lo
    n = logu.shape[0]
    for i in range(n):
        target = -(y0 + i * tau)
        if target < w_hi:
            return i
        lo = t
        hi = t_hi
        for _ in range(100):
            val, der = spline_val_der(data, off_w, n_int, x0, inv_h, t)
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
    f = max(f, 0.0)
    i = int(f)
    if i >= n_valid - 1:
        return np.nan, np.nan
    fr = f - i
    return (logu[row, i] + fr * (logu[row, i + 1] - logu[row, i]),
            logp[row, i] + fr * (logp[row, i + 1] - logp[row, i]))


@kernel
def _deposit_span(split, floor, row, j, s, mass, count, h):
    """Deposit ranks lying in ``[j h, (j + s) h)`` (total probability ``mass``, ``count`` ranks).

    Split mode puts them on the grid points j and j + s so that both the mass and the count
    mass ``sum q e^x`` (= the count) are kept: for ``s = 1`` this is exactly what splitting
    each rank between its two neighbours gives (both constraints are linear), for a wider
    span it moves mass by less than the span. Floor mode puts everything on j (a lower
    position). Returns the upper part (at j + s).
    """
    size = split.shape[1]
    if j < 0 or j >= size or not mass > 0.0:
        return 0.0
    up = (count * math.exp(-j * h) - mass) / math.expm1(s * h)
    if up < 0.0:
        up = 0.0
    elif up > mass:
        up = mass
    split[row, j] += mass - up
    if j + s < size:
        split[row, j + s] += up
    floor[row, j] += mass
    return up


@kernel
def _orderstat_walk(law, c, d, lf, li, tables, grid, grids, row, wkey):
    """Deposit the rest of a lazy order-statistic tail by a mean-field walk over the cells.

    ``tables`` = (logu, logp, tab_y0, tab_n, tau) as :func:`_sample_cells` takes them,
    ``grid`` = (h, eps) the cell width and the mass left undeposited, ``grids`` = (split,
    floor) the batch rows deposited into (row ``row``); ``wkey`` keys the walk's noise.

    Level ``d`` holds a lazy ORDERSTAT tail (:func:`brwsim.kernels.orderstat.orderstat_tail`)
    after some rank r: the remaining ``m = n - 1 - r`` weights are i.i.d. W given
    W < w_r, and rank j takes ``q_j = f_j w_j / Z`` with ``f_j = 1 + g (M - mu) / mu``
    (M the mass not yet emitted, mu its conditional mean, clipped to ``q >= M / (m + 1)``).
    Instead of drawing them, the walk steps through the grid in x = -log q: with f fixed
    over a step ``[x, (j + s) h)``, the ranks in it are those with ``-log W`` up to
    ``y_end = (j + s) h + log f - log Z``; their expected number and mass follow from the
    tabulated ``P(W < w)`` and ``E[W 1{W < w}]`` (:func:`_os_tables`), and the step is
    deposited by these two totals (:func:`_deposit_span`: exact within one cell). M, m and
    mu then follow their expected values, and f is recomputed whenever the mass emitted
    since it was last computed exceeds ``1e-3 mu`` (f moves by about g |f - 1| times that).

    The step is one cell while much mass remains; it widens to s cells while
    ``M (s h)^2 / 8 < _SPAN_ERR`` (a split over s cells displaces the mean of the mass it
    moves by at most ``(s h)^2 / 8``) and the step is expected to emit under 5% of M, so
    the spans add at most ``_SPAN_ERR * log(M_0 / eps)`` (< 3e-7) to the law's mean,
    against the grid's own ``h^2 / 8`` (1.25e-7 at h = 1e-3).

    Given the state at rank r this is the conditional expectation of the cells, except
    that f follows the mean of M rather than its random path, whose remaining relative
    variance is below ``q_r / mu_r`` (the caller switches once that is below
    ``SWITCH_RATIO``). What is left when M < eps, no rank remains or the table ends goes
    to the last position (a lower position: conservative for the floor grid); mass beyond
    the grid is dropped, as the rank-by-rank sampler drops it.

    Returns
    -------
    (e1, e2, steps) : tuple of float, float, int
        ``sum q x`` and ``sum q x^2`` of the deposited mass (each step's at the log of its
        mean ``e^x``, within ``(s h)^2 / 8`` of its mean x), and the number of steps.
    """
    fpar, ipar, data = law.fpar, law.ipar, law.data
    logu, logp, tab_y0, tab_n, tau = tables
    h, eps = grid
    split, floor = grids
    n = ipar[c, OS_VOCAB]
    size = split.shape[1]
    log_z = lf[d, 0]
    left = lf[d, 2]
    prev = lf[d, 3]
    mu0 = lf[d, 5]
    m_rem = float(n - li[d, 1])
    y0 = tab_y0[c]
    nv = tab_n[c]
    n_int = ipar[c, OS_N_INT]
    y = -spline_eval(data, ipar[c, DATA_OFF] + OS_LOGW * n_int * 4, n_int, fpar[c, OS_X0],
                     fpar[c, OS_INV_H], math.log(lf[d, 1]))
    lu, lp = _table_at(logu, logp, c, y0, tau, nv, y)
    # m E[W | W < w] / Z, updated by the ratio of the partial moments
    mu_raw = m_rem * math.exp(lp - lu - log_z)
    x = -math.log(prev)
    j = int(x // h)
    e1 = 0.0
    e2 = 0.0
    steps = 0
    dropped = False
    f = 1.0
    log_f = 0.0
    since = np.inf                # mass emitted since f was computed
    per_cell = 0.0                # mass per cell of the last step
    while not math.isnan(lu) and left >= eps and m_rem >= 0.5:
        if j >= size:
            dropped = True
            break
        if since > 1e-3 * mu_raw:
            wq = math.exp(-y - log_z)
            mu = min(mu_raw, m_rem * wq)
            f = 1.0
            if mu > 0.0:
                frac = mu / mu0 if mu0 > mu else 1.0
                gain = GAIN_FAR - (GAIN_FAR - TAIL_GAIN) * frac ** GAIN_POW
                f = 1.0 + gain * (left - mu) / mu
            lo_f = left / (m_rem * wq)
            f = max(f, lo_f)
            log_f = math.log(f)
            since = 0.0
        s = _span(left, per_cell, h, size - j)
        x_end = (j + s) * h
        y_end = x_end + log_f - log_z
        if y_end > y:
            lu_end, lp_end = _table_at(logu, logp, c, y0, tau, nv, y_end)
            if math.isnan(lu_end):
                break
            du = math.expm1(lu_end - lu)
            dp = math.expm1(lp_end - lp)
            k_mean = -m_rem * du
            am_mean = -f * mu_raw * dp
            k = k_mean
            if wkey != 0 and k_mean > 0.0:
                # the number of the m remaining weights in the step: Poisson below 30
                # (inversion), else normal, with the binomial's mean and variance
                if k_mean < 30.0:
                    u = unit(wkey, 2 * steps)
                    p = math.exp(-k_mean)
                    cdf = p
                    k = 0.0
                    while u > cdf and k < 200.0:
                        k += 1.0
                        p *= k_mean / k
                        cdf += p
                else:
                    k = k_mean + math.sqrt(k_mean * (1.0 + du)) * normal(wkey, 2 * steps + 1)
                k = min(max(k, 0.0), m_rem)
            am = am_mean * (k / k_mean) if k_mean > 0.0 else 0.0
            am = min(am, left)
            if k > 0.0 and am > 0.0:
                _deposit_span(split, floor, row, j, s, am, k, h)
                # mean position of the step's mass: log of its mean e^x (within (s h)^2 / 8)
                xe = min(max(math.log(k / am), x), (j + s) * h)
                e1 += am * xe
                e2 += am * xe * xe
                left -= am
                since += am
                per_cell = am / s
            if wkey != 0:
                m_rem -= k
                mu_raw = m_rem * math.exp(lp_end - lu_end - log_z)
            else:
                m_rem += m_rem * du
                mu_raw += mu_raw * dp
            y, lu, lp = y_end, lu_end, lp_end
        x = x_end
        j += s
        steps += 1
    if left > 0.0 and not dropped:
        # the last rank takes what is left (exact); below eps it is where generation stopped
        xr = -math.log(left) if m_rem < 0.5 and left >= eps else x
        xr = max(xr, x)
        _deposit_rest(split, floor, row, xr, left, h)
        if left >= eps:
            e1 += left * xr
            e2 += left * xr * xr
    return e1, e2, steps


@kernel
def _span(left, per_cell, h, room):
    """Cells per step of a walk: 1 while much mass is left, then wider (see _SPAN_ERR)."""
    s = 1
    if left * h * h < 8.0 * _SPAN_ERR:
        s = int(math.sqrt(8.0 * _SPAN_ERR / left) / h)
        if per_cell > 0.0:
            s = min(s, int(0.05 * left / per_cell) + 1)
        s = max(1, min(s, 4096, room))
    return s


@kernel
def _power_sum(log_c, s, a, b):
    """``sum_{i=a..b} exp(log_c) i**-s`` for 1 <= a <= b (a >= 1000: Euler-Maclaurin).

    Midpoint form: the integral over ``[a - 1/2, b + 1/2]`` minus ``(f'(b + 1/2) -
    f'(a - 1/2)) / 24``; the next term is below ``1e-14`` of the sum for ``a >= 1000`` and
    s <= 60. Below 1000 the terms are summed.
    """
    if a < 1000:
        tot = 0.0
        for i in range(a, b + 1):
            tot += math.exp(log_c - s * math.log(i))
        return tot
    la = math.log(a - 0.5)
    lb = math.log(b + 0.5)
    ln = lb - la
    z = (1.0 - s) * ln
    rel = math.expm1(z) / z if abs(z) > 1e-10 else 1.0 + 0.5 * z
    integral = math.exp(log_c + (1.0 - s) * la) * ln * rel
    corr = s / 24.0 * (math.exp(log_c - (s + 1.0) * lb) - math.exp(log_c - (s + 1.0) * la))
    return integral + corr


@kernel
def _walk_block(am, k, x, j, sp, h, left, e1, e2, split, floor, row):
    """Deposit a walk step's ``k`` ranks of mass ``am`` (at most ``left``) over cells j..j+sp.

    The ranks' mean position enters the moments, kept within the span; returns
    (e1, e2, left, per_cell) updated.
    """
    am = min(am, left)
    _deposit_span(split, floor, row, j, sp, am, k, h)
    xe = min(max(math.log(k / am), x), (j + sp) * h)
    return e1 + am * xe, e2 + am * xe * xe, left - am, am / sp


@kernel
def _deposit_rest(split, floor, row, x, mass, h):
    """The mass a walk leaves at one position ``x``, on both grids."""
    _deposit(split, row, x, mass, h, math.expm1(h), SPLIT)
    _deposit(floor, row, x, mass, h, math.expm1(h), FLOOR)


@kernel
def _power_walk(log_c, s, i_next, i_max, x, left, h, eps, split, floor, row):
    """Deposit ranks ``i_next..i_max`` of ``q_i = exp(log_c) i**-s`` by a walk over the cells.

    The ranks below a cell end ``x_e`` are ``i < exp((x_e + log_c) / s)``; a step's
    mass is an Euler-Maclaurin sum (:func:`_power_sum`, relative error < 1e-14) and its
    count the number of ranks, deposited by :func:`_deposit_span` (exact within one
    cell). Exact given the node's parameters: no Monte Carlo, and no error beyond the
    spans' (see :data:`_SPAN_ERR`). ``left`` is the mass not yet emitted; the walk stops
    when it is below eps (the rest goes to the last position) or after rank ``i_max``.

    Returns
    -------
    (e1, e2, steps, left)
    """
    size = split.shape[1]
    j = int(x // h)
    e1 = 0.0
    e2 = 0.0
    steps = 0
    per_cell = 0.0
    i = i_next
    while i <= i_max and left >= eps:
        if j >= size:
            return e1, e2, steps, 0.0
        x_i = s * math.log(i) - log_c
        if x_i >= (j + 1) * h:            # sparse ranks: jump to the next one's cell
            x = x_i
            j = int(x_i // h)
            continue
        sp = _span(left, per_cell, h, size - j)
        x_end = (j + sp) * h
        t = (x_end + log_c) / s
        i_b = i_max
        if t < math.log(i_max + 1.0):
            i_b = int(math.exp(t))
            if i_b >= 1 and s * math.log(i_b) - log_c >= x_end:
                i_b -= 1
            i_b = min(i_b, i_max)
        if i_b >= i:
            e1, e2, left, per_cell = _walk_block(_power_sum(log_c, s, i, i_b),
                                                 float(i_b - i + 1), x, j, sp, h, left, e1,
                                                 e2, split, floor, row)
            i = i_b + 1
        x = x_end
        j += sp
        steps += 1
    if i <= i_max and left > 0.0:
        _deposit_rest(split, floor, row, x, left, h)
        left = 0.0
    return e1, e2, steps, left


@kernel
def _geometric_walk(log_r, log_1mr, i_next, x, left, h, eps, split, floor, row):
    """Deposit ranks ``i >= i_next`` of ``q_i = (1 - r) r**i`` by a walk over the cells.

    Exact given r (the ranks below ``x_e`` are ``i < (x_e + log(1 - r)) / -log r`` and
    their mass is a geometric sum), deposited as :func:`_power_walk` does.
    """
    size = split.shape[1]
    j = int(x // h)
    e1 = 0.0
    e2 = 0.0
    steps = 0
    per_cell = 0.0
    i = i_next
    d = -log_r
    while left >= eps:
        if j >= size:
            return e1, e2, steps, 0.0
        x_i = i * d - log_1mr
        if x_i >= (j + 1) * h:            # sparse ranks: jump to the next one's cell
            x = x_i
            j = int(x_i // h)
            continue
        sp = _span(left, per_cell, h, size - j)
        x_end = (j + sp) * h
        t = (x_end + log_1mr) / d
        i_b = int(t // 1.0)
        if i_b >= t:
            i_b -= 1
        if i_b >= i:
            # sum_{i..i_b} (1 - r) r^m = r^i - r^(i_b + 1)
            am = math.exp(i * log_r) * -math.expm1((i_b + 1 - i) * log_r)
            e1, e2, left, per_cell = _walk_block(am, float(i_b - i + 1), x, j, sp, h, left,
                                                 e1, e2, split, floor, row)
            i = i_b + 1
        x = x_end
        j += sp
        steps += 1
    if left > 0.0:
        _deposit_rest(split, floor, row, x, left, h)
        left = 0.0
    return e1, e2, steps, left


@kernel
def _sample_cells(law, key, n_dist, n_min, work_cap, grid, scratch, tables, switch, grids, stats):
    """Deposit the whole distributions of up to ``n_dist`` i.i.d. nodes onto ``grids`` =
    (split, floor); returns how many were deposited.

    ``grid`` = (h, eps): the cells' width and the mass left undeposited; ``scratch`` = (lf,
    li, head): one level; ``tables`` = (logu, logp, tab_y0, tab_n, tau): the order-statistic
    tables of :func:`_os_tables` and their step; ``switch`` = (switch_ratio, switch_rho,
    noisy): when a lazy tail switches to the cell walk, and whether it adds noise;
    ``stats`` = (ranks, cells, ent, ent2): per-node outputs.

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
    walked, ``ent[k]`` its entropy and ``ent2[k]`` its ``sum q (log q)^2``. Once the work
    so far (ranks plus cells) reaches ``work_cap`` and at least ``n_min`` nodes are done,
    the sampler stops at the end of the current round of ``split.shape[0]`` nodes, so
    every batch row holds as many nodes.
    """
    fpar, ipar, data = law.fpar, law.ipar, law.data
    h, eps = grid
    lf, li, head = scratch
    tab_n = tables[3]
    switch_ratio, switch_rho, noisy = switch
    split, floor = grids
    ranks, cells, ent, ent2 = stats
    n_batch = split.shape[0]
    expm1_h = math.expm1(h)
    work = 0
    for k in range(n_dist):
        row = k % n_batch
        dkey = root_key(key, np.uint64(k))
        dist_init(law, dkey, 0, lf, li, head, -np.inf, ROOT_DRAW, 0)
        c = li[0, 2]
        kind = li[0, 0]
        wkey = mix(dkey ^ np.uint64(0x3A1C5)) if noisy else np.uint64(0)
        walk = kind == ORDERSTAT and tab_n[c] > 0 and switch_ratio > 0.0
        # deterministic tails (Zipf, Peaked's Zipf part, geometric): walk from rank r_walk
        r_walk = -1
        if switch_ratio > 0.0:
            if kind == ZIPF or kind == PEAKED:
                expo = lf[0, 0] if kind == ZIPF else lf[0, 2]
                n_last = li[0, 3] if kind == ZIPF else ipar[c, PEAKED_VOCAB] - 1
                if expo > 0.0 and 2 * _WALK_FROM < n_last:
                    r_walk = _WALK_FROM
            elif kind == GEOMETRIC and -lf[0, 0] < 0.5 * h:
                r_walk = _WALK_FROM
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
            if walk and r > ipar[c, OS_N_HEAD] and r < ipar[c, OS_VOCAB]:
                mu = lf[0, 4]
                if (mu > 0.0 and lf[0, 3] < switch_ratio * mu
                        and abs(lf[0, 2] / mu - 1.0) < switch_rho):
                    w1, w2, n_cells = _orderstat_walk(law, c, 0, lf, li, tables, grid, grids,
                                                      row, wkey)
                    e1 += w1
                    e2 += w2
                    walked = True
                    break
            if r_walk >= 0 and r >= r_walk:
                if kind == ZIPF:
                    w1, w2, n_cells, _ = _power_walk(-lf[0, 1], lf[0, 0], r + 1, li[0, 3],
                                                     x_last, 1.0 - cum, h, eps, split,
                                                     floor, row)
                    walked = True
                elif kind == PEAKED and li[0, 3] == 1:
                    n_zipf = ipar[c, PEAKED_VOCAB] - 1
                    w1, w2, n_cells, _ = _power_walk(lf[0, 1], lf[0, 2], r, n_zipf, x_last,
                                                     1.0 - cum, h, eps, split, floor, row)
                    walked = True
                elif kind == GEOMETRIC:
                    w1, w2, n_cells, _ = _geometric_walk(lf[0, 0], lf[0, 1], r, x_last,
                                                         1.0 - cum, h, eps, split, floor,
                                                         row)
                    walked = True
                if walked:
                    e1 += w1
                    e2 += w2
                    break
        rem = 1.0 - cum
        if not walked and rem > 0.0 and r > 0 and lq != -np.inf:
            _deposit(split, row, x_last, rem, h, expm1_h, SPLIT)
            _deposit(floor, row, x_last, rem, h, expm1_h, FLOOR)
        ranks[k] = r
        cells[k] = n_cells
        ent[k] = e1
        ent2[k] = e2
        work += r + n_cells
        if work >= work_cap and row == n_batch - 1 and k + 1 >= n_min:
            return k + 1
    return n_dist
