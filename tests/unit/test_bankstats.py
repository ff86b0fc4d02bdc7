"""Banks of real log-probabilities in use: Empirical and EntropyTarget on them, bank-stats.

Expected numbers are computed here from the probabilities written into the test's .npz
files (sums, logarithms, the bound formulas of brwsim.bank.bounds restated, a brute-force
optimal tree), never taken from the implementation.
"""

from __future__ import annotations

import heapq
import math
import re
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from brwsim import Empirical, EntropyTarget
from brwsim.bank import bank_entropies, import_logprobs
from brwsim.bankstats import bank_stats
from brwsim.cli import main
from brwsim.errors import UserError
from brwsim.families import parse_family
from brwsim.simulate import simulate

# Top-k probabilities of five positions (unsorted on purpose), each with tail mass.
ROWS = [[0.30, 0.60, 0.05], [0.50, 0.20, 0.10], [0.90, 0.04, 0.03], [0.40, 0.35, 0.20],
        [0.10, 0.50, 0.30]]
VOCAB = 50


def top(row: list[float]) -> list[float]:
    return sorted(row, reverse=True)


def tail_of(row: list[float]) -> float:
    return max(0.0, 1.0 - math.fsum(row))


def f(t: float) -> float:
    return -t * math.log(t) if t > 0 else 0.0


def h_top(row: list[float]) -> float:
    return math.fsum(f(p) for p in row)


def m2_top(row: list[float]) -> float:
    return math.fsum(p * math.log(p) ** 2 for p in row)


def entropy_lower(row: list[float]) -> float:
    """The tail as n tokens of the smallest stored probability q plus a remainder."""
    q, r = min(row), tail_of(row)
    n = math.floor(r / q)
    return h_top(row) + n * f(q) + f(r - n * q)


def entropy_upper(row: list[float], vocab: int | None) -> float:
    """The tail spread evenly over the vocab - k other tokens (inf without vocab)."""
    r = tail_of(row)
    assert r > 0.01                   # every test row has a tail
    if vocab is None:
        return math.inf
    m = vocab - len(row)
    assert r / m <= min(row)          # the even spread is feasible for these rows
    return h_top(row) + r * math.log(m / r)


def chosen_entropy(row: list[float], vocab: int | None) -> float:
    lo, hi = entropy_lower(row), entropy_upper(row, vocab)
    return lo if math.isinf(hi) else (lo + hi) / 2


def write_bank(tmp_path: Path, rows: list[list[float]], vocab: int | None = None,
               name: str = "bank") -> Path:
    width = max(len(r) for r in rows)
    lp = np.full((len(rows), width), -np.inf)
    for i, r in enumerate(rows):
        lp[i, :len(r)] = np.log(r)
    npz = tmp_path / f"{name}.npz"
    np.savez(npz, logprobs=lp)
    out = tmp_path / f"{name}.nc"
    import_logprobs(npz, out, vocab=vocab)
    return out


@pytest.fixture
def bank(tmp_path: Path) -> Path:
    return write_bank(tmp_path, ROWS)


@pytest.fixture
def bank_vocab(tmp_path: Path) -> Path:
    return write_bank(tmp_path, ROWS, vocab=VOCAB, name="bank_vocab")


def mu_rows(rows: list[list[float]]) -> tuple[float, float]:
    """Moments of the Empirical family: averages over rows of the stored entries only."""
    return (math.fsum(h_top(r) for r in rows) / len(rows),
            math.fsum(m2_top(r) for r in rows) / len(rows))


def best_first_expected(q: list[float], budget: int) -> float:
    """E[X | T_P] of the deterministic tree of one distribution q: the P largest path
    probabilities, enumerated best first (a node's children are p * q_r)."""
    heap = [(-p, (r,)) for r, p in enumerate(q)]
    heapq.heapify(heap)
    total = 0.0
    for _ in range(budget):
        neg, path = heapq.heappop(heap)
        total -= neg
        for r, p in enumerate(q):
            heapq.heappush(heap, (neg * p, path + (r,)))
    return total


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------------------------
# Empirical on a bank
# ---------------------------------------------------------------------------------------


def test_empirical_from_a_bank_path_simulates_end_to_end(bank):
    fam = Empirical(path=str(bank))
    width = max(len(r) for r in ROWS)
    expected_rows = np.array([top(r) + [0.0] * (width - len(r)) for r in ROWS])
    np.testing.assert_allclose(fam.rows, expected_rows, rtol=1e-12)
    ds = simulate(fam, [1, 4, 16], 50, seed=3)
    mu, mu2 = mu_rows(ROWS)
    assert float(ds["mu"]) == pytest.approx(mu, rel=1e-12)
    assert float(ds["mu2"]) == pytest.approx(mu2, rel=1e-12)
    exp = ds["expected_accepted"].values
    assert ((ds["accepted"].values >= 0) & (ds["accepted"].values <= ds["budget"].values[:, None])).all()
    assert (exp > 0).all() and (exp <= ds["budget"].values[:, None]).all()
    # T_1 is the root's most likely child: E[X | T_1] is that row's largest probability.
    firsts = {round(top(r)[0], 12) for r in ROWS}
    assert {round(v, 12) for v in exp[0]} <= firsts
    assert np.isfinite(ds["prediction"].values).all()
    # the same bank as a Dataset
    with xr.open_dataset(bank) as opened:
        from_ds = Empirical(opened.load())
    np.testing.assert_array_equal(from_ds.rows, fam.rows)


def test_cli_run_with_an_empirical_bank_family(bank, tmp_path, capsys):
    out = tmp_path / "run.nc"
    code, text, err = run_cli(capsys, "run", "--family", f"empirical(path='{bank}')",
                              "--iterations", "50", "--budgets", "1,4,16", "--out", str(out),
                              "--quiet")
    assert code == 0, err
    mu, mu2 = mu_rows(ROWS)
    assert f"mu = {mu:.6g} nats, mu2 = {mu2:.6g} nats^2" in text
    with xr.open_dataset(out) as ds:
        assert str(bank) in ds.attrs["family"]
        assert ds.sizes["iteration"] == 50


# ---------------------------------------------------------------------------------------
# EntropyTarget on a bank
# ---------------------------------------------------------------------------------------


def test_entropytarget_uses_lower_bounds_when_the_uppers_are_infinite(bank):
    values = [chosen_entropy(r, None) for r in ROWS]
    assert values == [entropy_lower(r) for r in ROWS]
    fam = EntropyTarget(bank)
    np.testing.assert_allclose(fam.entropies, values, rtol=1e-12)
    assert fam.moments().mu == pytest.approx(np.mean(values), rel=1e-12)


def test_entropytarget_uses_midpoints_with_a_vocabulary(bank_vocab):
    values = [chosen_entropy(r, VOCAB) for r in ROWS]
    assert values != [entropy_lower(r) for r in ROWS]
    np.testing.assert_allclose(bank_entropies(bank_vocab), values, rtol=1e-12)
    fam = EntropyTarget(str(bank_vocab), shape="geometric")
    assert fam.moments().mu == pytest.approx(np.mean(values), rel=1e-12)
    with xr.open_dataset(bank_vocab) as opened:
        from_ds = EntropyTarget(opened.load())
    np.testing.assert_array_equal(from_ds.entropies, fam.entropies)


def test_entropytarget_bank_from_the_cli_family_string(bank_vocab):
    fam = parse_family(f"entropytarget(entropies={bank_vocab}, shape=geometric)")
    values = [chosen_entropy(r, VOCAB) for r in ROWS]
    assert fam.moments().mu == pytest.approx(np.mean(values), rel=1e-12)
    assert parse_family(repr(fam)) == fam          # the repr names the file and round-trips


def test_entropytarget_bank_values_are_clipped_to_the_zipf_range(bank_vocab):
    vocab = 3
    values = [min(chosen_entropy(r, VOCAB), math.log(vocab)) for r in ROWS]
    assert max(chosen_entropy(r, VOCAB) for r in ROWS) > math.log(vocab)   # clipping matters
    fam = parse_family(f"entropytarget(entropies='{bank_vocab}', shape=zipf, vocab={vocab})")
    assert fam.moments().mu == pytest.approx(np.mean(values), rel=1e-9)


def test_entropytarget_missing_bank_is_one_clear_error(tmp_path, capsys):
    with pytest.raises(UserError, match="no such bank file"):
        EntropyTarget(tmp_path / "missing.nc")
    code, text, err = run_cli(capsys, "theory", "--family",
                              f"entropytarget(entropies='{tmp_path / 'missing.nc'}')")
    assert code == 2 and text == ""
    assert err.count("\n") == 1 and err.startswith("brwsim: error:") and "missing.nc" in err


def test_bank_entropies_rejects_inconsistent_stored_bounds(bank):
    with xr.open_dataset(bank) as opened:
        ds = opened.load()
    ds["entropy_upper"] = ds["entropy_lower"] - 0.5
    with pytest.raises(UserError, match="position 0: upper bound below the lower bound"):
        bank_entropies(ds)


# ---------------------------------------------------------------------------------------
# bank-stats
# ---------------------------------------------------------------------------------------


def table_rows(text: str) -> dict[int, list[float]]:
    """Rows of the prediction table: budget -> numbers."""
    out = {}
    for line in text.splitlines():
        cells = line.split()
        if len(cells) == 6 and cells[0].isdigit():
            out[int(cells[0])] = [float("nan") if c == "n/a" else float(c) for c in cells[1:]]
    return out


def histogram_counts(text: str) -> list[list[int]]:
    """Counts per bin line of the text histogram (one or two columns)."""
    counts = []
    for line in text.splitlines():
        if re.match(r"^\[[-0-9.e+]+, ", line):
            rest = line.split(maxsplit=2)[2]
            counts.append([int(c) for c in re.findall(r"(?:^|\s)(\d+)(?=\s|$)", rest)])
    return counts


def test_bank_stats_prints_moments_bounds_and_histogram(bank, capsys):
    code, text, err = run_cli(capsys, "bank-stats", str(bank), "--budgets", "1,16")
    assert code == 0, err
    mu, mu2 = mu_rows(ROWS)
    h2 = np.mean([h_top(r) ** 2 for r in ROWS])
    assert f"{len(ROWS)} positions, k = 3" in text
    assert f"mean tail mass {np.mean([tail_of(r) for r in ROWS]):.6g}" in text
    assert f"mu = {mu:.6g} nats, mu2 = {mu2:.6g} nats^2, E[H^2] = {h2:.6g} nats^2" in text
    lower = [entropy_lower(r) for r in ROWS]
    assert f"entropy in [{np.mean(lower):.6g}, inf] nats" in text
    assert "upper bounds are infinite at 5 positions" in text
    # histogram: 10 equal bins over [min, max] of the lower bounds
    edges = np.linspace(min(lower), max(lower), 11)
    expected = [0] * 10
    for v in lower:
        expected[min(int((v - edges[0]) / (edges[1] - edges[0])), 9)] += 1
    assert histogram_counts(text) == [[c] for c in expected]


def test_bank_stats_with_vocab_recomputes_finite_upper_bounds(bank, capsys):
    code, text, err = run_cli(capsys, "bank-stats", str(bank), "--vocab", str(VOCAB),
                              "--budgets", "4")
    assert code == 0, err
    lower = [entropy_lower(r) for r in ROWS]
    upper = [entropy_upper(r, VOCAB) for r in ROWS]
    assert f"vocab {VOCAB}." in text
    assert f"entropy in [{np.mean(lower):.6g}, {np.mean(upper):.6g}] nats" in text
    counts = histogram_counts(text)
    assert len(counts) == 10 and all(len(c) == 2 for c in counts)
    assert [sum(c[i] for c in counts) for i in range(2)] == [len(ROWS), len(ROWS)]


def test_bank_stats_predictions_of_a_one_row_bank_match_the_optimal_tree(tmp_path, capsys):
    q = [0.55, 0.25, 0.12]             # one row: a deterministic tree, the prediction is exact
    path = write_bank(tmp_path, [q], name="one")
    budgets = [1, 2, 4, 8, 32]
    code, text, err = run_cli(capsys, "bank-stats", str(path), "--budgets",
                              ",".join(map(str, budgets)))
    assert code == 0, err
    mu, mu2 = h_top(q), m2_top(q)
    rows = table_rows(text)
    assert sorted(rows) == budgets
    assert f"(E[max q] over the rows): {max(q):.4f}" in text
    for p in budgets:
        x = best_first_expected(q, p)
        upper, pred, tau, _asy, bound = rows[p]
        assert upper >= x - 1e-9              # proven for the i.i.d. model of the bank
        assert upper == pytest.approx(x, rel=0.05)
        assert pred == pytest.approx(x, abs=2e-3)
        assert tau == pytest.approx(x + 1, abs=2e-3)
        assert bound == pytest.approx((mu + mu2) * math.log(p) / mu ** 2, abs=1e-4)


def test_bank_stats_default_budgets_and_a_dataset_without_bounds(bank):
    with xr.open_dataset(bank) as opened:
        ds = opened.load().drop_vars(["entropy_lower", "entropy_upper", "mu2_lower",
                                      "mu2_upper"])
    stats = bank_stats(ds)
    assert stats.budgets.tolist() == [2 ** i for i in range(13)]
    np.testing.assert_allclose(stats.entropy_lower, [entropy_lower(r) for r in ROWS],
                               rtol=1e-12)
    assert np.isinf(stats.entropy_upper).all()
    assert (np.diff(stats.prediction) > 0).all()


@pytest.mark.parametrize("use_vocab", [False, True])
def test_bank_stats_plot_writes_a_png(bank, bank_vocab, tmp_path, capsys, use_vocab):
    fig = tmp_path / "entropy.png"
    code, text, err = run_cli(capsys, "bank-stats", str(bank_vocab if use_vocab else bank),
                              "--budgets", "1", "--plot", str(fig))
    assert code == 0, err
    assert f"wrote {fig}" in text
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _not_a_bank(tmp_path: Path) -> Path:
    path = tmp_path / "other.nc"
    xr.Dataset({"x": ("t", np.arange(3.0))}).to_netcdf(path)
    return path


def _text_file(tmp_path: Path) -> Path:
    path = tmp_path / "notes.nc"
    path.write_text("not netCDF\n")
    return path


@pytest.mark.parametrize("make, extra, pattern", [
    (lambda tmp, bank: tmp / "missing.nc", [], "missing.nc: no such file"),
    (lambda tmp, bank: _not_a_bank(tmp), [], "not a logprob bank: missing variable 'probs'"),
    (lambda tmp, bank: _text_file(tmp), [], "not a readable netCDF file"),
    (lambda tmp, bank: bank, ["--vocab", "2"], "position 0: 3 entries but --vocab is 2"),
    (lambda tmp, bank: bank, ["--vocab", "4"], "tail mass .* cannot be spread"),
    (lambda tmp, bank: bank, ["--vocab", "0"], "vocab must be a positive integer"),
    (lambda tmp, bank: bank, ["--budgets", "0"], "budgets must be"),
    (lambda tmp, bank: bank, ["--plot", "PLOT_UNDER_A_FILE"], "is a file, not a folder"),
])
def test_bank_stats_errors_exit_2_with_one_line(bank, tmp_path, capsys, make, extra, pattern):
    path = make(tmp_path, bank)
    if "PLOT_UNDER_A_FILE" in extra:      # missing folders are created: a file blocks the way
        (tmp_path / "afile").write_text("x")
        extra = [str(tmp_path / "afile" / "x.png") if a == "PLOT_UNDER_A_FILE" else a for a in extra]
    code = main(["bank-stats", str(path), "--budgets", "1", *extra])
    _out, err = capsys.readouterr()
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("brwsim: error:")
    assert re.search(pattern, err), err
