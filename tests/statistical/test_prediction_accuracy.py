"""The numerical prediction against Monte Carlo at P >= 64 (issue 11, item 5).

Tolerance: max(0.01, 3 combined SE) (Monte Carlo SE of E[X | T_P] and the prediction's
own SE). Every i.i.d. family of the test table, the default mixture of ``brwsim run`` and
an LLM-like Peaked family; the latter sampled at T = 0.7 (its exact tempered law) from
P = 1024, where mu P >= 16. Below P = 64 the prediction, an upper bound that fills the mean
measure, is far above E[X] on heterogeneous families (docs/theory.md, Section 2).
"""

from __future__ import annotations

import numpy as np
import pytest

from brwsim import parse_family, simulate, summarize
from brwsim.families import DEFAULT_FAMILY

EXTRA = {"default": DEFAULT_FAMILY, "peaked_llm": "peaked(a=8, b=0.5, s=1.2, vocab=32000)"}
#: Sampled at T = 0.7, mu = 0.046 nats: P = 64 and 256 are still "small" (mu P < 16), where
#: the prediction is 0.7 tokens (1.4%) high, 10 and 3 SE (docs/theory.md, Section 2).
TEMPERED_LLM = "tempered(family=peaked(a=8, b=0.5, s=1.2, vocab=32000), T=0.7)"


def _check(family, trees, budgets=(64, 256, 1024, 4096)):
    budgets = list(budgets)
    ds = simulate(family, budgets, trees, seed=77)
    s = summarize(ds)
    mc, se = s.expected_mean.values, s.expected_se.values
    pred, pse = ds.prediction.values, ds.prediction_se.values
    tol = np.maximum(0.01, 3 * np.hypot(se, pse))
    assert np.all(np.abs(pred - mc) <= tol), (pred - mc, tol)


@pytest.mark.slow
def test_prediction_within_tolerance_on_the_table(family):
    _check(family, 3000)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXTRA))
def test_prediction_within_tolerance_on_llm_like_families(name):
    _check(parse_family(EXTRA[name]), 3000)


@pytest.mark.slow
def test_prediction_within_tolerance_on_tempered_llm_peaked_from_mu_p_16():
    _check(parse_family(TEMPERED_LLM), 3000, budgets=(1024, 4096))


def test_prediction_within_tolerance_quick():
    _check(parse_family("mixture(families=[uniform(k=3), geometric(r=0.5)], weights=[0.5, 0.5])"),
           1500)
