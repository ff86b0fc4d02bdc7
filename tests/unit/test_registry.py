"""The family registry: a family is one class, reachable everywhere once it is defined.

A new family is defined in this module alone and used through parse_family, a sweep
configuration (and a sweep run) and theory.prediction; sweep blocks of every parameter
kind are read as a user writes them.
"""

from __future__ import annotations

import tomllib

import numpy as np
import pytest

from brwsim import parse_family, sweep
from brwsim.sweep.config import load_config
from brwsim.errors import UserError
from brwsim.families import Family, Fixed
from brwsim.families.base import REGISTRY, check_positive
from brwsim.theory import prediction, spine_steps


class TwoLevel(Family):
    """q = [p, 1 - p] at every node: defined here, in the test module, and nowhere else."""

    name = "twolevel"
    example = "twolevel(p=0.7)"

    def __init__(self, p: float) -> None:
        self.p = check_positive("p", p)
        if self.p >= 1:
            raise UserError(f"p must be < 1, got {p!r}")

    def params(self):
        return {"p": self.p}

    def components(self, beta: float = 1.0):
        return Fixed([self.p, 1 - self.p]).components(beta)

    def sample_full(self, rng, beta: float = 1.0):
        return Fixed([self.p, 1 - self.p]).sample_full(rng, beta)

    def spine_law(self):
        return Fixed([self.p, 1 - self.p]).spine_law()


def test_a_family_defined_here_is_registered_and_parsed():
    assert REGISTRY["twolevel"] is TwoLevel
    fam = parse_family("twolevel(p=0.6)")
    assert isinstance(fam, TwoLevel) and repr(fam) == "twolevel(p=0.6)"
    np.testing.assert_allclose(prediction(fam, [1, 2, 64]), prediction(Fixed([0.6, 0.4]), [1, 2, 64]))
    with pytest.raises(UserError, match="p must be"):
        parse_family("twolevel(p=1.5)")


def test_a_family_defined_here_runs_in_a_sweep(tmp_path):
    text = """
[sweep]
seed = 1
iterations = 20
chunk = 10
budgets = [1, 4]
[[sweep.family]]
name = "twolevel"
p = [0.6, 0.8]
"""
    report = sweep(tomllib.loads(text), tmp_path / "sw", jobs=1)
    import xarray as xr

    with xr.open_dataset(report.path, group="twolevel") as ds:
        np.testing.assert_allclose(ds.p.values, [0.6, 0.8])
        np.testing.assert_allclose(ds.prediction.values, [prediction(Fixed([0.6, 0.4]), [1, 4]),
                                                          prediction(Fixed([0.8, 0.2]), [1, 4])])


def test_declared_kinds_must_name_parameters():
    with pytest.raises(TypeError, match="param_kinds"):
        type("Broken", (Family,), {"name": "broken", "param_kinds": {"nope": "list"},
                                   "__init__": lambda self, x: None})
    assert "broken" not in REGISTRY


BLOCKS = """
[sweep]
seed = 0
iterations = 10
budgets = [1, 4]
prediction = "none"
"""


def _blocks(block: str):
    return load_config(tomllib.loads(BLOCKS + block)).blocks[0]


def test_list_parameters_are_one_value_and_lists_of_lists_a_grid():
    b = _blocks('[[sweep.family]]\nname = "correlatedentropy"\nentropies = [0.5, 1, 2]\nrho = 0.9\n')
    assert b.shape == () and list(b.families[0].entropies) == [0.5, 1, 2]
    b = _blocks('[[sweep.family]]\nname = "correlatedentropy"\n'
                'entropies = [[0.5, 1], [1, 2, 3]]\nrho = [0.5, 0.9]\n')
    assert b.shape == (2, 2) and list(b.families[1].entropies) == [0.5, 1]
    b = _blocks('[[sweep.family]]\nname = "markovregime"\n'
                'families = ["geometric(r=0.05)", "dirichlet(alpha=0.3, vocab=100)"]\n'
                'weights = [0.6, 0.4]\npersistence = [0.5, 0.9]\n')
    assert b.shape == (2,) and b.families[1].params()["persistence"] == 0.9
    b = _blocks('[[sweep.family]]\nname = "markovregime"\n'
                'families = ["geometric(r=0.05)", "dirichlet(alpha=0.3, vocab=100)"]\n'
                'transition = [[0.9, 0.1], [0.2, 0.8]]\n')
    assert b.shape == () and np.allclose(b.families[0].transition, [[0.9, 0.1], [0.2, 0.8]])
    b = _blocks('[[sweep.family]]\nname = "depthdrift"\n'
                'families = ["geometric(r=0.3)", "dirichlet(alpha=0.3, vocab=50)"]\n')
    assert b.shape == () and len(b.families[0].families) == 2
    b = _blocks('[[sweep.family]]\nname = "mixture"\n'
                'families = [["geometric(r=0.3)", "uniform(k=3)"], ["uniform(k=2)", "uniform(k=4)"]]\n'
                'weights = [0.5, 0.5]\n')
    assert b.shape == (2,)


def test_grid_values_of_the_wrong_kind_are_refused():
    with pytest.raises(UserError, match=r"entropies\[1\].*a list"):
        _blocks('[[sweep.family]]\nname = "correlatedentropy"\nentropies = [[0.5, 1], 2]\nrho = 0.9\n')
    with pytest.raises(UserError, match="duplicate grid value"):
        _blocks('[[sweep.family]]\nname = "fixed"\nprobs = [[0.5, 0.3], [0.5, 0.3]]\n')
