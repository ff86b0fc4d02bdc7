"""brwsim.kernels' decorators: one specialisation per kernel, and the compile notice."""

from __future__ import annotations

import io
import os
from types import SimpleNamespace

import numpy as np

from brwsim.kernels import CACHE_DIR, PackageCacheLocator, _CompileNotice, kernel
from brwsim.kernels.dist import (CLOSED_KINDS, CONTEXTUAL_KINDS, DIRICHLET, ENTROPY, LSTM,
                                 MIXED_KINDS, NEURAL_KINDS, NGRAM, ORDERSTAT, PLAIN_KINDS,
                                 TRANSFORMER, ZIPF, kinds_dtype)
from brwsim.kernels.spec import Component, compile_spec


@kernel
def _plus_one(x):
    return x + 1


@kernel
def _caller(n):
    return _plus_one(0) + _plus_one(n) + _plus_one(np.int64(3))


def test_a_constant_argument_does_not_add_a_literal_specialisation():
    assert _caller(5) == 1 + 6 + 4
    # type _caller in this process even when it was loaded from the cache (a second run):
    # only its type inference asks for _plus_one's specialisations
    _caller.recompile()
    sigs = [tuple(str(a) for a in s) for s in _plus_one.signatures]
    assert sigs == [("int64",)]          # not also ('Literal[int](0)',)


def test_kinds_dtype_selects_the_kind_group():
    assert kinds_dtype([ZIPF]) is CLOSED_KINDS and kinds_dtype([ZIPF, NGRAM]) is CONTEXTUAL_KINDS
    assert kinds_dtype([ZIPF, DIRICHLET]) is PLAIN_KINDS and kinds_dtype([ENTROPY]) is PLAIN_KINDS
    assert kinds_dtype([LSTM]) is NEURAL_KINDS and kinds_dtype([TRANSFORMER, ZIPF]) is NEURAL_KINDS
    assert kinds_dtype([NGRAM, LSTM]) is NEURAL_KINDS
    assert kinds_dtype([DIRICHLET, NGRAM]) is MIXED_KINDS and kinds_dtype([LSTM, ORDERSTAT]) is MIXED_KINDS
    assert kinds_dtype([ZIPF, 63]) is PLAIN_KINDS          # a code outside the table: lazy
    groups = (PLAIN_KINDS, CONTEXTUAL_KINDS, NEURAL_KINDS, MIXED_KINDS, CLOSED_KINDS)
    assert len({np.dtype(t) for t in groups}) == 5
    # the neural set-up is registered before exactly the kernels that may call it
    from brwsim.kernels import _may_be_neural
    from numba import typeof
    assert [_may_be_neural((typeof(np.zeros(1, t)),)) for t in groups] == [False, False, True, True, False]
    spec = compile_spec([Component(kind=ZIPF)])
    assert spec.kinds.dtype == CLOSED_KINDS
    assert compile_spec([Component(kind=ZIPF), Component(kind=NGRAM)]).kinds.dtype == CONTEXTUAL_KINDS


def test_the_cache_is_filed_by_package_path_not_by_install_folder(tmp_path):
    """Two installs of the same code (a checkout and its wheel) share one cache folder."""
    def fn():
        return 0

    paths = []
    for install in ("checkout", "site-packages"):
        source = tmp_path / install / "brwsim" / "kernels" / "tree.py"
        source.parent.mkdir(parents=True)
        source.write_text("x = 1\n")
        fn.__module__ = "brwsim.kernels.tree"
        paths.append(PackageCacheLocator.from_function(fn, str(source)).get_cache_path())
    assert paths[0] == paths[1] == os.path.join(CACHE_DIR, "brwsim", "kernels")
    fn.__module__ = "numpy.linalg"               # another package keeps numba's locators
    assert PackageCacheLocator.from_function(fn, str(source)) is None
    from brwsim.kernels.tree import simulate_chunk
    assert simulate_chunk._cache._cache_path == os.path.join(CACHE_DIR, "brwsim", "kernels")


def _event(module: str, name: str):
    fn = SimpleNamespace(__module__=module, __name__=name)
    return SimpleNamespace(data={"dispatcher": SimpleNamespace(py_func=fn)})


def test_the_compile_notice_says_once_where_and_one_line_per_group():
    out = io.StringIO()
    notice = _CompileNotice(out)
    top, inner, other = (_event("brwsim.kernels.tree", "simulate_chunk"),
                         _event("brwsim.kernels.dist", "dist_init"),
                         _event("numba.cpython.unicode", "impl"))
    for group in range(2):
        notice.on_start(top)
        notice.on_start(inner)
        notice.on_start(other)
        notice.on_end(other)
        notice.on_end(inner)
        notice.on_end(top)
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 + 2 * 2                        # the notice once, start/end per group
    assert "once" in lines[0] and CACHE_DIR in lines[0]
    assert lines[1] == "brwsim: compiling tree.simulate_chunk ..."
    assert lines[2].startswith("brwsim: compiled tree.simulate_chunk in ")
    assert not any("dist_init" in line or "unicode" in line for line in lines)
