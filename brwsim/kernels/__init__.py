"""Private numba kernels: pure functions, arrays in and arrays out.

Nothing here is public API; :mod:`brwsim.simulate` and the family classes wrap them.

* :data:`kernel` (``_nrt=False``) compiles kernels that never allocate: without the numba
  runtime they carry no reference counting, which otherwise costs two atomic operations
  per array argument and call (measured: 200 -> 36 ns per tree node on Uniform(3)).
* :data:`inline_kernel` is :data:`kernel` inlined into its callers by numba itself (LLVM
  does not inline a cached callee with many array arguments): for the few small
  functions on a tree pass's hot path.
* :data:`njit_cached` compiles functions that allocate (workspaces, drivers).
* :data:`dense_kernel` is :data:`kernel` for dense float arithmetic (the LSTM's products
  and gates): ``a * b + c`` may fuse into one FMA (``fastmath={"contract"}``, no other
  fast-math licence) and float division follows numpy's error model (no zero-divisor
  check), so that LLVM vectorises the loops; results may differ from :data:`kernel`'s in
  the last bits.

Both cache compiled code in a folder keyed by a hash of brwsim's sources. numba's own
cache only notices changes to a function's file, so a caller in another module would keep
stale machine code of a changed callee; keying on every source avoids that.
``NUMBA_CACHE_DIR`` (if set) is the parent of that folder, else ``~/.cache``.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numba as nb


def _cache_dir() -> str:
    digest = hashlib.sha1()
    for path in sorted(Path(__file__).resolve().parents[1].rglob("*.py")):
        digest.update(path.read_bytes())
    base = os.environ.get("NUMBA_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "brwsim-numba", digest.hexdigest()[:16])


CACHE_DIR = _cache_dir()


def _jit(**options):
    """``numba.njit(cache=True, **options)`` caching into :data:`CACHE_DIR` only."""

    def decorate(fn):
        previous = nb.config.CACHE_DIR
        nb.config.CACHE_DIR = CACHE_DIR
        try:
            return nb.njit(cache=True, **options)(fn)
        finally:
            nb.config.CACHE_DIR = previous

    return decorate


kernel = _jit(_nrt=False)
inline_kernel = _jit(_nrt=False, inline="always")
njit_cached = _jit()
dense_kernel = _jit(_nrt=False, fastmath={"contract"}, error_model="numpy")
