"""brwsim plot / inspect: labelled lines, the paper's bound off the autoscale, tau, titles
that fit, and every file brwsim writes opens (run, policy run, plan, bank)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from brwsim.cli.inspect import TITLE_WIDTH, describe, figure, plot  # noqa: E402
from brwsim.errors import UserError  # noqa: E402
from brwsim.families import DEFAULT_FAMILY  # noqa: E402
from brwsim.io import file_sha256  # noqa: E402
from brwsim.lazy import xarray as xr  # noqa: E402

BUDGETS = np.array([1, 2, 4, 8, 16])
POLICIES = ["optimal()", "dynamic(depth=6, topk=10)", "chain()"]


def _run_file(tmp_path, policies=True):
    """A file shaped as ``brwsim run --policy ... --policy ...`` writes (synthetic numbers)."""
    rng = np.random.default_rng(1)
    n = 50
    growth = np.log2(BUDGETS) * 0.4 + 0.6
    shape = (len(POLICIES), BUDGETS.size, n) if policies else (BUDGETS.size, n)
    dims = ("policy", "budget", "iteration") if policies else ("budget", "iteration")
    scale = np.array([1.0, 0.8, 0.6])[:, None, None] if policies else 1.0
    exp = scale * growth[:, None] + 0.05 * rng.standard_normal(shape)
    data = {"accepted": (dims, np.rint(exp).astype(np.int32)), "expected_accepted": (dims, exp),
            "depth": (dims, np.ones(shape, np.int32)),
            "paper_bound": ("budget", 25.0 * np.log2(BUDGETS) / 4),      # far above the curves
            "prediction": ("budget", growth), "mu": ((), 2.3), "mu2": ((), 19.2)}
    coords = {"budget": BUDGETS}
    if policies:
        coords["policy"] = POLICIES
    ds = xr.Dataset(data, coords, {"family": DEFAULT_FAMILY, "source": "brwsim test",
                                   "title": f"brwsim optimal draft trees: {DEFAULT_FAMILY}",
                                   "input_sha256": json.dumps({"bank.nc": "ab" * 32})})
    path = tmp_path / "run.nc"
    ds.to_netcdf(path)
    return path, exp


def test_policy_lines_are_labelled_and_the_bound_does_not_set_the_axis(tmp_path):
    path, exp = _run_file(tmp_path)
    fig = figure(path, paper_bound=True)
    ax = fig.axes[0]
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    for pol in POLICIES:                        # one entry per policy, not the family thrice
        assert sum(pol == t for t in texts) == 1, texts
    assert "paper's bound (O(1) dropped)" in texts
    lo, hi = ax.get_ylim()
    means = exp.mean(axis=-1)
    assert means.max() <= hi < 2 * means.max() < 25.0   # the data, not the bound (up to 25)
    assert lo <= means.min() and ax.get_xlim()[0] <= 1 and ax.get_xlim()[1] >= 16
    dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--" and len(ln.get_xdata())]
    assert len(dashed) == 1                     # the bound drawn once, not once per policy
    dotted = [ln for ln in ax.get_lines() if ln.get_linestyle() == ":" and len(ln.get_xdata())]
    assert len(dotted) == 1                     # so is the (optimal tree's) prediction
    # the title (the default mixture, 130 characters) is wrapped to lines that fit
    title = ax.get_title()
    assert all(len(line) <= TITLE_WIDTH for line in title.splitlines())
    assert "mixture" in title and len(title.splitlines()) >= 2


def test_bound_off_by_default_and_tau_on_request(tmp_path):
    path, exp = _run_file(tmp_path, policies=False)
    ax = figure(path).axes[0]
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert not any("bound" in t for t in texts)
    assert ax.get_ylabel().startswith("E[X]")
    ax_tau = figure(path, tau=True).axes[0]
    assert "1 + E[X]" in ax_tau.get_ylabel()
    line = next(ln for ln in ax_tau.get_lines() if ln.get_linestyle() == "-")
    np.testing.assert_allclose(line.get_ydata(), 1.0 + exp.mean(axis=-1))
    out = plot(path, tmp_path / "fig")
    assert out.name == "fig.png" and out.stat().st_size > 0


def test_inspect_prints_nats_squared_the_bound_column_and_input_hashes(tmp_path):
    path, _ = _run_file(tmp_path, policies=False)
    text = describe(path)
    assert "nats^2" in text and "upper bound" not in text.splitlines()[0]
    assert f"input sha256: {'ab' * 32}  bank.nc" in text
    assert "paper bound" in text


def _plan_file(tmp_path):
    batch = np.array([1, 8])
    sp = np.array([[1.2, 1.6, 1.9, 1.8, 1.5], [1.1, 1.3, 1.4, 1.3, 1.1]])
    d, b = ("batch", "budget"), ("batch",)
    ds = xr.Dataset({"speedup": (d, sp), "speedup_se": (d, 0.01 + 0 * sp), "tokens_per_call": (d, 1 + sp),
                     "best_budget": (b, np.array([4, 4])), "best_speedup": (b, sp.max(1)),
                     "best_speedup_se": (b, np.array([0.01, 0.01])),
                     "best_tokens_per_call": (b, 1 + sp.max(1))},
                    {"batch": batch, "budget": BUDGETS},
                    {"family": DEFAULT_FAMILY, "cost": "roofline h100", "source": "brwsim test"})
    path = tmp_path / "plan.nc"
    ds.to_netcdf(path)
    return path


def test_a_plan_file_opens_in_inspect_and_plot(tmp_path):
    path = _plan_file(tmp_path)
    text = describe(path)
    assert f"plan: family {DEFAULT_FAMILY}" in text and "P*" in text
    ax = figure(path).axes[0]
    assert sorted(t.get_text() for t in ax.get_legend().get_texts()) == ["B = 1", "B = 8", "P* (best budget)"]
    assert ax.get_ylabel() == "speedup over plain decoding"


def test_a_bank_opens_in_inspect_and_plot_says_why_not(tmp_path):
    from brwsim.bank.store import BANK_VARIABLES, bank_dataset

    k, rows = 4, 3
    arrays = {}
    for name, (dims, _, _) in BANK_VARIABLES.items():
        arrays[name] = np.zeros(tuple(k if i else rows for i, _ in enumerate(dims)))
    arrays["probs"][:] = 0.2
    ds = bank_dataset(arrays, files=["a.jsonl"], formats=["openai"], top_k=k, vocab=32000,
                      skip_bad=False, skipped_positions=0, skipped_lines=0, command="test")
    path = tmp_path / "bank.nc"
    ds.to_netcdf(path)
    text = describe(path)
    assert "brwsim logprob bank" in text and "vocab: 32000" in text
    with pytest.raises(UserError, match="without curves"):
        figure(path)


def test_file_sha256_is_the_hash_of_the_bytes(tmp_path):
    import hashlib

    f = tmp_path / "x.bin"
    f.write_bytes(b"brwsim" * 1000)
    assert file_sha256(f) == hashlib.sha256(b"brwsim" * 1000).hexdigest()


# --- the figure rules of brwsim.plotting ------------------------------------------------------

from brwsim import plotting  # noqa: E402


def _check_rules(fig, max_width: int = 1700) -> None:
    """Every visible panel: at most MAX_SERIES labelled series, distinct colour-and-style
    pairs among them, a legend (somewhere in its row) in LEGEND_SIZE points or more, a title."""
    width, height = fig.get_size_inches() * 100
    assert width <= max_width and height <= 1400, (width, height)
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert legends
    for leg in legends:
        assert all(t.get_fontsize() >= plotting.LEGEND_SIZE for t in leg.get_texts())
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        assert plotting.series_count(ax) <= plotting.MAX_SERIES, ax.get_title()
        looks = [(ln.get_color(), ln.get_linestyle(), ln.get_marker()) for ln in ax.get_lines()
                 if not ln.get_label().startswith("_") and len(ln.get_xdata())]
        assert len(looks) == len(set(looks)), ax.get_title()       # no two series look alike
        assert ax.get_title()


def test_policy_run_draws_the_fraction_with_its_paired_band(tmp_path):
    from brwsim.simulate import policy_gap

    path, _ = _run_file(tmp_path)
    fig = figure(path)
    _check_rules(fig)
    frac_ax = fig.axes[1]
    assert "paired" in frac_ax.get_title() and frac_ax.get_ylabel().startswith("fraction")
    with xr.open_dataset(path) as ds:
        gap = policy_gap(ds.load())
    lines = {ln.get_label(): ln for ln in frac_ax.get_lines() if not ln.get_label().startswith("_")}
    assert set(lines) == set(POLICIES[1:])                 # the reference is 1 by construction
    bands = frac_ax.collections
    assert len(bands) == 2
    for k, pol in enumerate(POLICIES[1:], start=1):
        np.testing.assert_allclose(lines[pol].get_ydata(), gap.fraction_of_optimal.values[k])
        ys = bands[k - 1].get_paths()[0].vertices[:, 1]   # the band spans ± 2 paired SE
        np.testing.assert_allclose(ys.max() - ys.min(),
                                   np.max(gap.fraction_of_optimal.values[k] + 2 * gap.fraction_se.values[k])
                                   - np.min(gap.fraction_of_optimal.values[k] - 2 * gap.fraction_se.values[k]))


def _sweep_file(tmp_path, n_policies=10):
    """A sweep group over alpha x policy (synthetic summaries), as ``brwsim sweep`` writes."""
    alphas = [0.05, 0.3]
    pols = ["optimal()"] + [f"noisy(sigma={0.1 * k:.1f})" for k in range(1, n_policies)]
    shape = (len(alphas), len(pols), BUDGETS.size)
    dims = ("alpha", "policy", "budget")
    base = np.log2(BUDGETS) * 0.4 + 0.6
    mean = base * np.linspace(1.0, 0.5, len(pols))[None, :, None] * np.ones(shape)
    data = {name: (dims, mean + 0.0) for name in ("accepted_mean", "expected_mean", "depth_mean")}
    data.update({name: (dims, 0.01 + 0 * mean) for name in ("accepted_se", "expected_se")})
    data["tokens_per_call"] = (dims, mean + 1)
    data["family_string"] = (("alpha",), np.array([f"dirichlet(alpha={a}, vocab=200)" for a in alphas], object))
    ds = xr.Dataset(data, {"alpha": alphas, "policy": pols, "budget": BUDGETS})
    path = tmp_path / "results.nc"
    xr.Dataset(attrs={"source": "brwsim test", "title": "sweep"}).to_netcdf(path)
    ds.to_netcdf(path, group="dirichlet", mode="a")
    return path, pols


def test_a_policy_sweep_is_faceted_eight_series_a_panel(tmp_path):
    path, pols = _sweep_file(tmp_path)
    fig = figure(path)
    _check_rules(fig)
    top = [ax for ax in fig.axes if ax.get_visible() and ax.get_ylabel().startswith("E[X]")]
    assert len(top) == 4                 # 2 alphas x 10 policies in runs of at most 8
    labels = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    for pol in pols:
        assert pol in labels
    for ax in top:
        assert "drafting policies" in ax.get_title() and "dirichlet(alpha=" in ax.get_title()
    fractions = [ax for ax in fig.axes if ax.get_visible() and ax.get_ylabel().startswith("fraction")]
    assert len(fractions) == 4
    assert all(np.isnan(ln.get_ydata()).sum() == 0 for ax in fractions for ln in ax.get_lines()
               if not ln.get_label().startswith("_"))


def _experiment(name: str):
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location(f"_exp_{name}", root / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    import sys

    sys.modules[spec.name] = module          # dataclasses look their module up
    spec.loader.exec_module(module)
    return module, root / "data" / f"{name}.nc"


@pytest.mark.parametrize("name,draw,panels", [("drafter_gap", "plot", 8), ("goodput", "figure", 9),
                                              ("budget_curves", "plot", 5)])
def test_the_shipped_figures_follow_the_rules(tmp_path, name, draw, panels):
    pytest.importorskip("joblib")
    pytest.importorskip("scipy")
    module, data = _experiment(name)
    with xr.open_dataset(data) as ds:
        fig = getattr(module, draw)(ds.load(), tmp_path / f"{name}.png")
    _check_rules(fig)
    assert sum(ax.get_visible() for ax in fig.axes) == panels
    from PIL import Image

    with Image.open(tmp_path / f"{name}.png") as im:
        assert im.width <= 1700 and im.height <= 1400
    assert fig.get_suptitle()
