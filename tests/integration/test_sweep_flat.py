"""A sweep's ``results.nc`` read as a plain dataset, and ``inspect`` of every file brwsim
writes (netCDF, JSON, figures), with the paired fraction of the optimum."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

from brwsim.cli import main
from brwsim.simulate import policy_gap
from brwsim.sweep import sweep

CONFIG = {"sweep": {
    "seed": 5, "iterations": 60, "chunk": 30, "budgets": [2, 8],
    "family": [{"name": "dirichlet", "alpha": [0.1, 0.5], "vocab": 30},
               {"name": "uniform", "k": 3}],
    "policy": [{"name": "optimal"}, {"name": "chain"}, {"name": "kary", "k": 2}],
}}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("flat") / "s"
    sweep(CONFIG, out, quiet=True)
    return out


def test_plain_open_dataset_shows_every_point(folder):
    with xr.open_dataset(folder / "results.nc") as root:
        assert root.sizes["point"] == 2 * 3 + 3 and list(root["budget"].values) == [2, 8]
        assert "flat_view" in root.attrs
        groups = [str(g) for g in root["group"].values]
        assert groups.count("dirichlet") == 6 and groups.count("uniform") == 3
        for label in ("dirichlet", "uniform"):
            with xr.open_dataset(folder / "results.nc", group=label) as grp:
                gap = policy_gap(grp)           # the Python API's paired fraction, per group
                flat = grp["expected_mean"].stack(cell=[d for d in grp["expected_mean"].dims
                                                        if d != "budget"]).transpose("cell", "budget")
                pts = grp["point"].stack(cell=list(grp["point"].dims)).values if grp["point"].dims else [int(grp["point"])]
                np.testing.assert_array_equal(root["expected_mean"].values[pts], flat.values)
                g = gap.stack(cell=[d for d in gap["fraction_of_optimal"].dims if d != "budget"])
                g = g.transpose("cell", "budget")
                np.testing.assert_allclose(root["fraction_of_optimal"].values[pts],
                                           g["fraction_of_optimal"].values, rtol=1e-12)
                np.testing.assert_allclose(root["fraction_se"].values[pts], g["fraction_se"].values,
                                           rtol=1e-9)
        opt = root["policy"].values == "optimal()"
        assert np.all(root["fraction_of_optimal"].values[opt] == 1.0)
        chain = root["policy"].values == "chain()"
        assert np.all(root["fraction_of_optimal"].values[chain] < 1.0)
        random = chain & (root["group"].values == "dirichlet")     # uniform(k=3): no variance
        assert np.all(root["fraction_se"].values[random] > 0)


def test_inspect_a_sweep_shows_the_paired_fraction(folder, capsys):
    assert main(["inspect", str(folder / "results.nc")]) == 0
    out = capsys.readouterr().out
    assert "root group: every point's summary" in out
    assert out.count("of optimal ± SE (paired)") == 9
    assert main(["inspect", str(folder / "results.nc"), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "sweep" and len(doc["rows"]) == 9 * 2
    with xr.open_dataset(folder / "results.nc") as root:
        want = sorted(root["fraction_se"].values[root["policy"].values == "chain()"].ravel())
    got = sorted(r["fraction_se"] for r in doc["rows"] if r["policy"] == "chain()")
    np.testing.assert_allclose(got, want, rtol=1e-9)


def test_inspect_describes_brwsim_json_files(folder, tmp_path, capsys):
    assert main(["inspect", str(folder / "config.json")]) == 0
    out = capsys.readouterr().out
    assert "sweep state" in out and "iterations: 60" in out and "dirichlet" in out
    exp = tmp_path / "accept.json"
    assert main(["export-acceptance", "--family", "uniform(k=3)", "--budget", "3",
                 "--iterations", "200", "--out", str(exp)]) == 0
    capsys.readouterr()
    assert main(["inspect", str(exp)]) == 0
    out = capsys.readouterr().out
    assert "export-acceptance" in out and "uniform(k=3)" in out and "acceptance length" in out
    assert main(["inspect", str(exp), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["kind"] == "export-acceptance"
    bad = tmp_path / "other.json"
    bad.write_text('{"a": 1}')
    assert main(["inspect", str(bad)]) == 2
    assert "did not write" in capsys.readouterr().err
