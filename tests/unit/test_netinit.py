"""brwsim.kernels.netinit: the LSTM and transformer set-up behind one C symbol."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from numba import types
from numba.core.errors import TypingError

import brwsim
from brwsim.kernels import _may_be_neural, netinit
from brwsim.kernels.netinit import net_init

FAMILY = "charlstm(carry=3)"
RUN = ("import json, brwsim; from brwsim.kernels import netinit; "
       "ds = brwsim.simulate(brwsim.parse_family({family!r}), [1, 4], 3, seed=5); "
       "print(json.dumps([ds.expected_accepted.values.tolist(), netinit.FORWARDED[0]]))")


def test_only_a_neural_or_mixed_kinds_array_first_registers():
    i32, i64 = types.Array(types.int32, 1, "C"), types.Array(types.int64, 1, "C")
    u16, i8 = types.Array(types.uint16, 1, "C"), types.Array(types.int8, 1, "C")
    assert _may_be_neural((i32, types.float64)) and _may_be_neural((u16,))
    assert not _may_be_neural((i64, i32)) and not _may_be_neural((i8,))
    assert not _may_be_neural(()) and not _may_be_neural((types.int32,))


def test_only_kernels_taking_kinds_first_register():
    # select.select's first argument is an int32 array too (an order), not a kinds array: a
    # hook there once compiled the set-up inside a plain run's compile, which failed
    from brwsim.kernels import select, tree
    assert select.select.compile.__func__ is type(select.select).compile
    assert getattr(tree.simulate_chunk.compile, "__func__", None) is None


def test_a_plain_or_n_gram_family_never_compiles_the_set_up():
    code = ("import brwsim; from brwsim.kernels import netinit; "
            "brwsim.simulate(brwsim.parse_family('zipf(s=1.1, vocab=50)'), [1, 4], 2); "
            "brwsim.simulate(brwsim.parse_family('ngram(corpus=prose, order=3)'), [1, 4], 2); "
            "print(netinit._compiled is None, netinit.FORWARDED[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=600).stdout
    assert out.splitlines()[-1] == "True 0"


def test_a_kernel_linked_before_register_forwards_through_the_fallback():
    # the direct route: the decorators registered the compiled set-up before the kernel
    # was compiled or loaded, so no call went through ctypes
    direct = brwsim.simulate(brwsim.parse_family(FAMILY), [1, 4], 3, seed=5)
    assert netinit.FORWARDED[0] == 0
    # a fresh process whose decorators never register: its kernel is linked against the
    # fallback, which registers and forwards every call; the numbers are the same
    code = ("import brwsim.kernels as k; k._may_be_neural = lambda args: False; "
            + RUN.format(family=FAMILY))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=600).stdout
    values, forwarded = json.loads(out.splitlines()[-1])
    assert forwarded > 0
    assert np.array_equal(np.array(values), direct.expected_accepted.values)


def test_a_strided_array_is_refused_when_typed():
    head = np.zeros((4, 8))[:, ::2]
    data = cprog = np.zeros(4)
    with pytest.raises(TypingError, match="C-contiguous float64"):
        net_init(True, (data, 0, 1.0, 3.0, 0.0, 0), cprog, 0, -1, True, 0, 0, -np.inf, head, 0)
