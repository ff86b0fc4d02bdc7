"""The neural families' node set-up (LSTM, transformer) behind one C symbol, compiled once.

numba links the code of every callee into each kernel that calls it, and optimises and
compiles each linked copy again. The set-up of an LSTM or transformer node
(:func:`~brwsim.kernels.lstm.lstm_init`, :func:`~brwsim.kernels.transformer.transformer_init`,
with their products and gates) is the largest code in brwsim, and it is reached from every
kernel that runs a contextual family (the optimal tree, forests, the policies, the drafter,
generation runs, path distributions) through every level in between: linked into each, it
would be compiled once per kernel.

Here that code sits behind one C function, :data:`SYMBOL`: a numba ``cfunc`` compiled once
per cache, and called from kernels by its name (:func:`net_init`, a
``types.ExternalFunction``), so a kernel's machine code holds only the call. Arrays pass as
their data pointers and shapes (C-contiguous, checked when a kernel is typed).

LLVM resolves the name when a kernel that calls it is compiled or loaded from the cache:
:func:`register` puts the compiled function under it. It runs from
``brwsim.kernels.BEFORE_NEURAL``: brwsim's kernel decorators call it before they compile
or load a kernel whose first parameter ``kinds`` is a neural or mixed array
(``NEURAL_KINDS``, uint16, or ``MIXED_KINDS``, int32), as it is for every kernel that can
reach this code; a plain or n-gram family never compiles it. Until then the name points
at :func:`_fallback`, which registers the compiled function and forwards the call through
ctypes (the same numbers, slower per call), so a kernel linked before :func:`register` ran
never calls an unresolved name.
Its compile times are in ``benchmarks/README.md``.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading

import numba as nb
from llvmlite import binding
from numba import types
from numba.core.errors import TypingError
from numba.extending import intrinsic
from numba.np.arrayobj import get_cfarray_intrinsic, make_array

from brwsim.kernels import BEFORE_NEURAL, caching_here, inline_kernel
from brwsim.kernels.lstm import lstm_init
from brwsim.kernels.transformer import transformer_init

#: The C name of the set-up function.
SYMBOL = "brwsim_net_init"

_P = types.CPointer(types.float64)
_I, _F = types.int64, types.float64
#: Its C signature: (lstm, data, len, cprog, len, head, rows, cols, o, beta, carry, window,
#: slots, d, pd, draw, rank, n_list, min_logq, start) -> listed count.
SIGNATURE = _I(_I, _P, _I, _P, _I, _P, _I, _I, _I, _F, _F, _F, _I, _I, _I, _I, _I, _I, _F, _I)
_EXTERNAL = types.ExternalFunction(SYMBOL, SIGNATURE)

_carray = get_cfarray_intrinsic("C", None)    # numba.carray's intrinsic (no runtime needed)
_lock = threading.RLock()
_compiled = None        # the cfunc, once register() has run
_forward = None         # a ctypes caller of it, for _fallback
#: Calls forwarded by :func:`_fallback` in this process (0 when every kernel was linked
#: after :func:`register`).
FORWARDED = [0]


@intrinsic
def _data(typingctx, arr):
    """The data pointer of a C-contiguous float64 array."""
    if not (isinstance(arr, types.Array) and arr.layout == "C" and arr.dtype == types.float64):
        raise TypingError(f"net_init takes C-contiguous float64 arrays, not {arr}")

    def codegen(context, builder, sig, args):
        return make_array(sig.args[0])(context, builder, args[0]).data
    return _P(arr), codegen


@inline_kernel
def net_init(lstm, net, cprog, d, pd, draw, rank, n_list, min_logq, head, start):
    """:func:`~brwsim.kernels.lstm.lstm_init` (``lstm``, which ignores ``window`` and
    ``slots``) or :func:`~brwsim.kernels.transformer.transformer_init`, called through
    :data:`SYMBOL`; ``net`` = (data, o, beta, carry, window, slots), the other arguments
    theirs; returns the listed count. (The C function behind the symbol takes its
    arguments one by one: a C signature holds scalars and pointers only.)"""
    data, o, beta, carry, window, slots = net
    return _EXTERNAL(1 if lstm else 0, _data(data), data.shape[0], _data(cprog), cprog.shape[0],
                     _data(head), head.shape[0], head.shape[1], o, beta, carry, window, slots,
                     d, pd, 1 if draw else 0, rank, n_list, min_logq, start)


def _compile():
    """The C function behind :data:`SYMBOL` (compiled, or loaded from brwsim's cache)."""
    def set_up(lstm, data_p, data_n, cprog_p, cprog_n, head_p, rows, cols, o, beta, carry,
               window, slots, d, pd, draw, rank, n_list, min_logq, start):
        data = _carray(data_p, (data_n,))
        cprog = _carray(cprog_p, (cprog_n,))
        head = _carray(head_p, (rows, cols))
        if lstm:
            return lstm_init((data, o, beta, carry), cprog, d, pd, draw != 0, rank, n_list,
                             min_logq, head, start)
        return transformer_init((data, o, beta, carry, window, slots), cprog, d, pd, draw != 0,
                                rank, n_list, min_logq, head, start)

    with caching_here():
        return nb.cfunc(SIGNATURE, cache=True, nopython=True, _nrt=False)(set_up)


_C_TYPE = ctypes.CFUNCTYPE(ctypes.c_int64, *[
    ctypes.c_int64 if t == _I else ctypes.c_double if t == _F else ctypes.c_void_p
    for t in SIGNATURE.args])


def register() -> None:
    """Put the compiled set-up under :data:`SYMBOL` (once per process; compiles it on a cold
    cache). Kernels compiled or loaded afterwards call it directly."""
    global _compiled, _forward
    with _lock:
        if _compiled is None:
            compiled = _compile()
            binding.add_symbol(SYMBOL, compiled.address)
            _forward = _C_TYPE(compiled.address)
            _compiled = compiled


@_C_TYPE
def _fallback(*args):
    """:data:`SYMBOL` before :func:`register` ran: registers, then forwards the call. An
    error here cannot reach the kernel (a C caller), so it ends the process with its
    message rather than let the kernel go on with a wrong count."""
    try:
        register()
        FORWARDED[0] += 1
        return _forward(*args)
    except BaseException as exc:  # noqa: BLE001 - nothing can be raised through C
        sys.stderr.write(f"brwsim: the LSTM/transformer set-up failed: {exc!r}\n")
        sys.stderr.flush()
        os._exit(70)


binding.add_symbol(SYMBOL, ctypes.cast(_fallback, ctypes.c_void_p).value)
BEFORE_NEURAL.append(register)
