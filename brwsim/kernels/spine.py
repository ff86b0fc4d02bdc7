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
from brwsim.kernels.dist import ROOT_DRAW, dist_init, dist_next
from brwsim.kernels.rng import root_key
from brwsim.kernels.special import zipf_sum

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


@kernel
def _sample_cells(kinds, cw, fpar, ipar, data, cprog, key, n_dist, h, eps, lf, li, head,
                  split, floor, ranks, ent, ent2):
    """Deposit the whole distributions of ``n_dist`` i.i.d. nodes onto ``split`` and ``floor``.

    Node k's distribution (a root drawn with key ``root_key(key, k)``) is generated rank
    by rank with the family's own kernels; each rank (x = -log q, weight q) goes to batch
    row ``k % split.shape[0]`` of both grids (split and floor discretisation). Generation
    stops when the remaining mass is below ``eps``; that remainder is put at the last
    rank's position (a lower position: conservative for the floor grid). Per node,
    ``ranks[k]`` is the number of ranks generated, ``ent[k]`` its entropy and ``ent2[k]``
    its ``sum q (log q)^2``.
    """
    n_batch = split.shape[0]
    expm1_h = math.expm1(h)
    for k in range(n_dist):
        row = k % n_batch
        dkey = root_key(key, np.uint64(k))
        dist_init(kinds, cw, fpar, ipar, data, cprog, dkey, 0, lf, li, head, -np.inf,
                  ROOT_DRAW, 0)
        cum = 0.0
        x_last = 0.0
        e1 = 0.0
        e2 = 0.0
        r = 0
        lq = 0.0
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
        rem = 1.0 - cum
        if rem > 0.0 and r > 0 and lq != -np.inf:
            _deposit(split, row, x_last, rem, h, expm1_h, SPLIT)
            _deposit(floor, row, x_last, rem, h, expm1_h, FLOOR)
        ranks[k] = r
        ent[k] = e1
        ent2[k] = e2
