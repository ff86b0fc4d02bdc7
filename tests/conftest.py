"""Shared test helpers: the family table the suite is parametrised over."""

from __future__ import annotations

import numpy as np
import pytest

from brwsim import (Dirichlet, Empirical, EntropyTarget, Fixed, Geometric, Mixture, Peaked,
                    SoftmaxNormal, Tempered, Uniform, Zipf)

#: One instance of every family (small, fast), lazy and exact variants included.
FAMILY_TABLE = {
    "uniform": Uniform(3),
    "fixed": Fixed([0.5, 0.3, 0.15]),
    "geometric": Geometric(0.6),
    "zipf": Zipf(1.2, 1000, spread=0.3),
    "dirichlet_exact": Dirichlet(0.3, 50),
    "dirichlet_lazy": Dirichlet(0.3, 2000),
    "softmaxnormal_lazy": SoftmaxNormal(1.5, 3000),
    "peaked": Peaked(2.0, 1.0, 1.1, 100),
    "mixture": Mixture([Uniform(3), Geometric(0.5)], [0.5, 0.5]),
    "entropytarget_zipf": EntropyTarget([0.5, 1.5], "zipf", 100),
    "entropytarget_geometric": EntropyTarget([0.3, 1.0, 2.0]),
    "tempered": Tempered(Dirichlet(0.3, 20), 0.7),
    "empirical": Empirical([[0.5, 0.3], [0.9, 0.05, 0.01]]),
}


@pytest.fixture(params=sorted(FAMILY_TABLE), ids=sorted(FAMILY_TABLE))
def family(request):
    """Each family of :data:`FAMILY_TABLE` in turn."""
    return FAMILY_TABLE[request.param]


def mean_se(x: np.ndarray) -> tuple[float, float]:
    """Sample mean and its standard error."""
    x = np.asarray(x, dtype=np.float64)
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(x.size))
