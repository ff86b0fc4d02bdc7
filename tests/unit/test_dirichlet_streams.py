"""Which random numbers a lazy Dirichlet node uses (``brwsim.kernels.dirichlet.dirichlet_init``).

Group g of the binary aggregation (the root is 1, the halves of g are 2g and 2g + 1)
splits by the tabulated Beta quantile at the first uniform of its own stream
``mix(dk + g * key)``; a group of at most ``picked_size`` tokens is drawn instead by
size-biased picks, pick j from uniforms 2j and 2j + 1 of that stream
(``_pick_fraction``). A plain-Python walk of the whole aggregation tree, group by group
with that assignment, must give every token's log-probability bit for bit as the kernel
lists them, at no cut-off and above cut-offs (where the kernel skips light groups, reads
only the heavier part of some splits and stops picking once a group's rest is below the
cut-off). The law itself is tested in
``tests/statistical/test_lazy_dirichlet.py``; this pins the streams, which the law
cannot see (swapping two groups' uniforms keeps it).
"""

from __future__ import annotations

import numpy as np
import pytest

from brwsim.families.dirichlet import aggregation_component, picked_size
from brwsim.kernels import dist as K
from brwsim.kernels import dirichlet as KD
from brwsim.kernels.betaquantile import beta_log_pair
from brwsim.kernels.rng import DIST, mix, purpose_key, unit
from brwsim.kernels.spec import compile_spec


def _python_tokens(data, base, n, dk, alpha, picked):
    """Every token's log-probability, the aggregation tree walked whole in Python."""
    out = []
    todo = [(0.0, n, 1)]
    while todo:
        lm, m, g = todo.pop()
        if m == 1:
            out.append(lm)
            continue
        with np.errstate(over="ignore"):        # uint64 arithmetic wraps, as in the kernel
            gk = np.uint64(mix(dk + np.uint64(g) * KD._GROUP_KEY))
        if m <= picked:
            for j in range(m - 1):
                lv, l1v = KD._pick_fraction(alpha, (m - 1 - j) * alpha, gk, j)
                out.append(lm + lv)
                lm += l1v
            out.append(lm)
            continue
        u = unit(gk, 0)
        pair = int(data[base + m])
        assert pair >= 0 and data[base + pair + 1] >= 0.0, "every pair tabulated here"
        lb1, lb2 = beta_log_pair(data, base, pair, u)
        todo += [(lm + lb1, m // 2, 2 * g), (lm + lb2, m - m // 2, 2 * g + 1)]
    return np.sort(np.array(out))[::-1]


def _kernel_ranks(spec, key, min_logq):
    li = np.zeros((2, K.LEVEL_I), np.int64)
    lf = np.zeros((2, K.LEVEL_F))
    head = np.zeros((2, spec.head_cap))
    K.dist_init(spec.law, key, 1, lf,
                li, head, min_logq, 0, 0)
    return head[1, :li[1, 3]].copy()


@pytest.mark.parametrize("alpha, vocab", [(0.05, 200), (0.05, 100), (0.3, 37), (0.01, 1024)])
def test_each_group_splits_by_its_own_stream(alpha, vocab):
    spec = compile_spec([aggregation_component(alpha, vocab)])
    base, picked = int(spec.ipar[0, K.DATA_OFF]), int(spec.ipar[0, KD.DIR_PICKED])
    assert picked == picked_size(alpha, vocab) and 2 <= picked < vocab    # both draws are used
    for i in range(30):
        key = np.uint64(mix(np.uint64(1000 + i)))
        dk = np.uint64(purpose_key(key, DIST))
        ref = _python_tokens(spec.data, base, vocab, dk, alpha, picked)
        np.testing.assert_array_equal(_kernel_ranks(spec, key, -np.inf), ref)
        for cut in (ref[0] - 1e-6, ref[min(3, vocab - 1)], np.log(0.01), np.log(0.3)):
            np.testing.assert_array_equal(_kernel_ranks(spec, key, cut), ref[ref >= cut])
