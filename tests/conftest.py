"""Shared test helpers: the family table the suite is parametrised over."""

from __future__ import annotations

import numpy as np
import pytest

from brwsim import Dirichlet, EntropyTarget, parse_family
from brwsim.families.base import REGISTRY

#: One instance of every registered i.i.d. family (its declared ``example``), plus variants
#: that exercise other code paths (lazy large vocabularies, a geometric entropy target).
FAMILY_TABLE = {
    **{name: parse_family(cls.example) for name, cls in sorted(REGISTRY.items())
       if cls.iid and cls.example and cls.__module__.startswith("brwsim.")},
    "dirichlet_lazy": Dirichlet(0.3, 2000),
    "entropytarget_geometric": EntropyTarget([0.3, 1.0, 2.0]),
}


@pytest.fixture(params=sorted(FAMILY_TABLE), ids=sorted(FAMILY_TABLE))
def family(request):
    """Each family of :data:`FAMILY_TABLE` in turn."""
    return FAMILY_TABLE[request.param]


def mean_se(x: np.ndarray) -> tuple[float, float]:
    """Sample mean and its standard error."""
    x = np.asarray(x, dtype=np.float64)
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(x.size))


#: Tests that run whole experiments or documents in fresh processes: they run last, so that
#: the numba kernels they need are already in the cache the unit tests filled (a cold cache
#: makes each worker process of an experiment compile the same kernels side by side).
RUN_LAST = ("tests/integration/test_notebooks.py::test_notebook_runs_top_to_bottom",
            "tests/integration/test_readme.py")


def pytest_collection_modifyitems(config, items):
    """Move the :data:`RUN_LAST` tests to the end, keeping the order within each group."""
    last = [it for it in items if it.nodeid.startswith(RUN_LAST)]
    if last:
        first = [it for it in items if not it.nodeid.startswith(RUN_LAST)]
        items[:] = first + last
