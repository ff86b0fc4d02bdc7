"""Private numba kernels: pure functions, arrays in and arrays out.

Nothing here is public API; :mod:`brwsim.simulate` and the family classes wrap them.

* :data:`kernel` (``_nrt=False``) compiles kernels that never allocate: without the numba
  runtime they carry no reference counting, which otherwise costs two atomic operations
  per array argument and call (``benchmarks/README.md`` has the cost).
* :data:`inline_kernel` is :data:`kernel` inlined into its callers by numba itself (LLVM
  does not inline a cached callee with many array arguments): for the few small
  functions on a tree pass's hot path.
* :data:`njit_cached` compiles functions that allocate (workspaces, drivers).
* :data:`inline_njit` is :data:`njit_cached` inlined by numba into its callers, and
  :data:`inline_kernel` serves the same end for a kernel that one driver calls once per
  pass (``grow_tree``, ``collect``, ``resume``): numba optimises and compiles a callee's
  code once for the callee and again, linked, in every caller, so a callee that is only
  ever reached through one driver is compiled once, in it. (Called from Python, such a
  kernel compiles as any other.)
* :data:`dense_kernel` is :data:`kernel` for dense float arithmetic (the LSTM's products
  and gates): ``a * b + c`` may fuse into one FMA (``fastmath={"contract"}``, no other
  fast-math licence) and float division follows numpy's error model (no zero-divisor
  check), so that LLVM vectorises the loops; results may differ from :data:`kernel`'s in
  the last bits.

All four cache compiled code in a folder keyed by a hash of the sources of compiled code
(brwsim.kernels and any other module that defines a kernel). numba's own cache only
notices changes to a function's file, so a caller in another module would keep stale
machine code of a changed callee; keying on every such source avoids that.
``NUMBA_CACHE_DIR`` (if set) is the parent of that folder, else ``~/.cache``. Inside it a
module's machine code lies under its package path (``brwsim/kernels``), not under numba's
hash of the module's absolute folder (:class:`PackageCacheLocator`), so that every install
of the same code (a checkout, its wheel, a second virtual environment) shares one cache.

Three things keep a cold start short and visible:

* **One specialisation per kernel.** A kernel called from another kernel with a constant
  argument (``dist_init(..., 0, ...)``) would otherwise be compiled once more for numba's
  ``Literal[int](0)`` type, next to its ``int64`` version, doubling the largest kernels'
  compile time; the decorators type such calls with plain ``int64`` (:func:`_unliteral_calls`).
* **The neural set-up compiled once.** The LSTM and transformer node set-up is reached from
  every contextual kernel; :mod:`brwsim.kernels.netinit` compiles it once as a C function
  that kernels call by name, registered (:data:`BEFORE_NEURAL`) before a kernel with a
  contextual ``kinds`` array is compiled or loaded.
* **A notice on stderr** the first time a process compiles (not when it loads the cache):
  what is compiled, that it happens once, where it is cached, then one line per kernel
  group (a kernel compiled from Python, with everything it calls) with its time.
  ``BRWSIM_COMPILE_NOTICE=0`` silences it.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numba as nb
from numba.core import caching, event, types


#: Text that marks a module outside brwsim.kernels as defining compiled code.
_COMPILED_MARKS = (b"njit", b"@nb.", b"cfunc")


def _cache_dir() -> str:
    """The cache folder, keyed by the sources of every compiled function: the kernels
    package and any other brwsim module that defines a kernel (numba links callees into
    callers, so a change in any of them invalidates them all). Other modules do not enter
    the key, so editing the command line or a family's Python keeps the compiled code."""
    digest = hashlib.sha1()
    package = Path(__file__).resolve().parents[1]
    here = Path(__file__).resolve().parent
    for path in sorted(package.rglob("*.py")):
        text = path.read_bytes()
        if here in path.parents or any(mark in text for mark in _COMPILED_MARKS):
            digest.update(path.relative_to(package).as_posix().encode())
            digest.update(text)
    base = os.environ.get("NUMBA_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "brwsim-numba", digest.hexdigest()[:16])


CACHE_DIR = _cache_dir()


class PackageCacheLocator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
    """numba's cache locator for brwsim's own functions: ``CACHE_DIR/<module's package
    path>`` (``brwsim/kernels`` for :mod:`brwsim.kernels.tree`).

    numba's locators file a function under a hash of its module's absolute folder, so a
    wheel installed beside a checkout of the same code compiled everything again.
    :data:`CACHE_DIR` is already keyed by the compiled sources' contents, and numba still
    checks each file's SHA-256 against the index (the source stamp), so the install's
    location need not enter the key. Functions of other packages get numba's own locators.
    """

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        package = (py_func.__module__ or "").split(".")[:-1]
        self._cache_path = os.path.join(CACHE_DIR, *package)

    def get_cache_path(self) -> str:
        return self._cache_path

    @classmethod
    def from_function(cls, py_func, py_file):
        """The locator of a function of a ``brwsim.*`` module backed by a source file whose
        cache folder can be written, else None (numba then tries its own locators)."""
        if not (getattr(py_func, "__module__", None) or "").startswith("brwsim."):
            return None
        return super().from_function(py_func, py_file)


def _locked(save):
    """numba's ``IndexDataCacheFile.save`` under an exclusive lock on the function's index.

    numba reads a function's index, adds the new signature under the first free data-file
    number and writes index and data back, unlocked: two processes that compile different
    signatures of one function at once (the test command's warm-up compiles four kind
    groups side by side; a cold run compiles beside itself, :mod:`brwsim.beside`) could
    both take the same number, one index entry lost and its data file holding the other's
    machine code. The lock (``<index>.lock``, ``flock``) makes each save see the last.
    Where files cannot be locked, numba's own save runs as it is."""
    import fcntl

    def locked_save(self, key, data):
        try:
            fd = os.open(self._index_path + ".lock", os.O_CREAT | os.O_RDWR, 0o644)
        except OSError:
            return save(self, key, data)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return save(self, key, data)
        finally:
            os.close(fd)                          # (releases the lock)

    locked_save.numba_save = save
    return locked_save


#: numba's cache implementation (``CacheImpl`` in recent numba, ``_CacheImpl`` in older ones).
_IMPL = getattr(caching, "CacheImpl", None) or caching._CacheImpl
if PackageCacheLocator not in _IMPL._locator_classes:
    _IMPL._locator_classes.insert(0, PackageCacheLocator)
if os.name == "posix" and not hasattr(caching.IndexDataCacheFile.save, "numba_save"):
    caching.IndexDataCacheFile.save = _locked(caching.IndexDataCacheFile.save)


def _unliteral_calls(dispatcher):
    """Type calls from other kernels with non-literal argument types (one specialisation)."""
    template = dispatcher.get_call_template

    def get_call_template(args, kws):
        return template(tuple(types.unliteral(a) for a in args),
                        {k: types.unliteral(v) for k, v in kws.items()})

    dispatcher.get_call_template = get_call_template
    return dispatcher


#: Called before a kernel whose first parameter is a law that may hold a neural component
#: (or its ``kinds`` array, uint16 or int32) is compiled or loaded from the cache:
#: :func:`brwsim.kernels.netinit.register` adds itself here when imported (by
#: :mod:`brwsim.kernels.dist`, which every such kernel calls).
BEFORE_NEURAL: list = []


def _may_be_neural(args) -> bool:
    """Whether a signature's first argument is a law that may hold a neural component (a
    :class:`~brwsim.kernels.spec.Law` whose ``kinds`` is uint16 or int32: the neural and
    mixed kind groups of :func:`brwsim.kernels.dist.kinds_dtype`) or such a ``kinds`` array."""
    first = args[0] if args else None
    if isinstance(first, types.BaseTuple) and first.types:
        first = first.types[0]
    return isinstance(first, types.Array) and first.dtype in (types.uint16, types.int32)


def _registering_compile(dispatcher):
    """Run :data:`BEFORE_NEURAL` before a kernel whose first parameter is ``law`` or
    ``kinds`` is compiled or loaded for one that may hold a neural component."""
    if dispatcher.py_func.__code__.co_varnames[:1] not in (("law",), ("kinds",)):
        return dispatcher
    compile_ = dispatcher.compile

    def compile(sig):
        if _may_be_neural(getattr(sig, "args", sig)):
            for hook in BEFORE_NEURAL:
                hook()
        return compile_(sig)

    dispatcher.compile = compile
    return dispatcher


@contextmanager
def caching_here():
    """numba's decorators with ``cache=True`` inside this block cache into :data:`CACHE_DIR`
    (numba reads its cache folder when a function is decorated)."""
    previous = nb.config.CACHE_DIR
    nb.config.CACHE_DIR = CACHE_DIR
    try:
        yield
    finally:
        nb.config.CACHE_DIR = previous


def _jit(**options):
    """``numba.njit(cache=True, **options)`` caching into :data:`CACHE_DIR` only."""

    def decorate(fn):
        with caching_here():
            return _registering_compile(_unliteral_calls(nb.njit(cache=True, **options)(fn)))

    return decorate


# nogil: a call from Python releases the GIL, so the command's main thread can answer
# SIGINT while a long call runs in a helper thread (brwsim.interrupt.answering)
kernel = _jit(_nrt=False, nogil=True)
inline_kernel = _jit(_nrt=False, inline="always")
njit_cached = _jit(nogil=True)
inline_njit = _jit(nogil=True, inline="always")
dense_kernel = _jit(_nrt=False, fastmath={"contract"}, error_model="numpy", nogil=True)


class _CompileNotice(event.Listener):
    """Print, on stderr, when brwsim's kernels are compiled (cache misses only)."""

    def __init__(self, stream=None):
        self.stream = stream
        self.depth = 0
        self.announced = False
        self.started = 0.0

    @staticmethod
    def _ours(ev) -> str | None:
        fn = getattr(ev.data.get("dispatcher"), "py_func", None)
        module = getattr(fn, "__module__", "") or ""
        if not module.startswith("brwsim."):
            return None
        return f"{module.removeprefix('brwsim.kernels.')}.{fn.__name__}"

    def _say(self, text: str) -> None:
        stream = self.stream or sys.stderr
        try:
            print(f"brwsim: {text}", file=stream, flush=True)
        except (OSError, ValueError):        # a closed stderr must not break the run
            pass

    def on_start(self, ev) -> None:
        name = self._ours(ev)
        if name is None:
            return
        if self.depth == 0:
            if not self.announced:
                self.announced = True
                self._say("compiling numba kernels for this kind of run; this happens once, the "
                          f"machine code is cached in {CACHE_DIR} (later runs load it in seconds)")
            self.started = time.perf_counter()
            self._say(f"compiling {name} ...")
        self.depth += 1

    def on_end(self, ev) -> None:
        if self._ours(ev) is None:
            return
        self.depth = max(self.depth - 1, 0)
        if self.depth == 0:
            self._say(f"compiled {self._ours(ev)} in {time.perf_counter() - self.started:.0f} s")


#: The listener behind the compile notice (registered unless ``BRWSIM_COMPILE_NOTICE=0``).
COMPILE_NOTICE = _CompileNotice()
if os.environ.get("BRWSIM_COMPILE_NOTICE", "1") != "0":
    event.register("numba:compile", COMPILE_NOTICE)
