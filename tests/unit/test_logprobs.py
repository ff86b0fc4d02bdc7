"""Tests of brwsim.bank: importing top-k log-probabilities into a bank.

Expected numbers are computed here from the log-probabilities written in the fixture files
(exponentials, sorting, sums), never taken from the implementation.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from brwsim.bank import BadInputWarning, entropy_bounds, import_logprobs, load_bank
from brwsim.bank import npz as npz_reader
from brwsim.cli.bank import register
from brwsim.errors import UserError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logprobs"

# Log-probabilities of the fixture files, position by position, as written in them.
# chat.jsonl: the last position lists its sampled token " x" (-6.0) as the least likely
# entry, the way vLLM appends a sampled token from outside the top-k: it joins the tail.
CHAT_ROWS = [[-0.2, -2.5, -3.0], [-0.5, -1.2, -3.0], [-0.3, -2.2, -2.9],
             [-0.08, -3.2, -4.1], [-1.0, -0.7, -2.1], [-0.3, -1.6]]
CHAT_RANKS = [0, 1, -1, 0, 0, -1]
CHAT_SEQUENCES = [0, 0, 0, 1, 1, 1]
# legacy.jsonl: the third position lists the sampled "ok" (-5.0) last: it joins the tail.
LEGACY_ROWS = [[-0.4, -1.4, -3.0], [-0.9, -1.5, -2.0], [-0.6, -1.1], [-0.01]]
LEGACY_RANKS = [0, 1, -1, 0]
LEGACY_SEQUENCES = [0, 0, 1, 2]
STREAM_ROWS = [[-0.3, -1.5], [-0.8, -0.9]]
# varying_k.jsonl: 3, 1 and 3 entries, one of them -9999 (probability 0, dropped).
VARYING_ROWS = [[-0.4, -1.5, -2.6], [-0.05], [-0.7, -0.9]]

BANK_VARIABLES = ("probs", "tail_mass", "sampled_rank", "sequence", "entropy_lower",
                  "entropy_upper", "mu2_lower", "mu2_upper")


# ---------------------------------------------------------------------------------------
# helpers computing expectations from first principles
# ---------------------------------------------------------------------------------------


def expected_probs(rows: list[list[float]]) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, zero-padded probabilities and tail masses of lists of log-probabilities."""
    k = max(len(r) for r in rows)
    probs = np.zeros((len(rows), k))
    for i, row in enumerate(rows):
        p = sorted((math.exp(v) for v in row), reverse=True)
        probs[i, :len(p)] = p
    tails = np.array([1.0 - sum(math.exp(v) for v in row) for row in rows])
    return probs, tails


def entropy(values: list[float]) -> float:
    return -sum(v * math.log(v) for v in values if v > 0)


def log_moment(values: list[float]) -> float:
    return sum(v * math.log(v) ** 2 for v in values if v > 0)


def concentrated_tail(top: list[float], tail: float) -> list[float]:
    """Full distribution with the tail as few tokens of the smallest top probability."""
    q = min(top)
    n = int(tail // q)
    return top + [q] * n + [tail - n * q]


def spread_tail(top: list[float], tail: float, vocab: int) -> list[float]:
    """Full distribution with the tail spread evenly over the rest of the vocabulary."""
    m = vocab - len(top)
    return top + [tail / m] * m


def write_lines(path: Path, records: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def chat_record(rows: list[list[float]], sampled: list[int] | None = None) -> dict:
    """A chat completion whose positions list the given top log-probabilities."""
    content = []
    for i, row in enumerate(rows):
        top = [{"token": f"t{j}", "logprob": v} for j, v in enumerate(row)]
        s = 0 if sampled is None else sampled[i]
        content.append({"token": f"t{s}", "logprob": row[s], "top_logprobs": top})
    return {"object": "chat.completion",
            "choices": [{"index": 0, "logprobs": {"content": content}}]}


def check_bank(ds: xr.Dataset, rows: list[list[float]], ranks: list[int]) -> None:
    probs, tails = expected_probs(rows)
    np.testing.assert_allclose(ds["probs"].values, probs, rtol=0, atol=1e-15)
    np.testing.assert_allclose(ds["tail_mass"].values, tails, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(ds["sampled_rank"].values, ranks)


# ---------------------------------------------------------------------------------------
# JSON Lines fixtures
# ---------------------------------------------------------------------------------------


def test_chat_fixture_probabilities_ranks_and_sequences():
    ds = import_logprobs(FIXTURES / "chat.jsonl")
    check_bank(ds, CHAT_ROWS, CHAT_RANKS)
    np.testing.assert_array_equal(ds["sequence"].values, CHAT_SEQUENCES)
    assert ds["probs"].dims == ("position", "rank")
    assert ds.attrs["format"] == "openai-chat"


def test_legacy_fixture_with_body_wrapper_and_two_choices():
    ds = import_logprobs(FIXTURES / "legacy.jsonl")
    check_bank(ds, LEGACY_ROWS, LEGACY_RANKS)
    np.testing.assert_array_equal(ds["sequence"].values, LEGACY_SEQUENCES)
    assert ds.attrs["format"] == "openai-completions"


def test_streamed_chunks_in_sse_framing_form_one_sequence():
    ds = import_logprobs(FIXTURES / "stream.jsonl")
    check_bank(ds, STREAM_ROWS, [0, 0])
    np.testing.assert_array_equal(ds["sequence"].values, [0, 0])


def test_pretty_printed_json_document_llama_cpp_shape():
    ds = import_logprobs(FIXTURES / "document.json")
    check_bank(ds, [[-0.5, -1.0]], [0])
    assert ds.attrs["format"] == "llama.cpp-completion"


def test_varying_k_is_zero_padded_and_zero_probabilities_dropped():
    ds = import_logprobs(FIXTURES / "varying_k.jsonl")
    check_bank(ds, VARYING_ROWS, [0, 0, 0])
    assert ds.sizes["rank"] == 3
    np.testing.assert_array_equal((ds["probs"].values > 0).sum(axis=1), [3, 1, 2])


def test_several_files_concatenate_with_distinct_sequences():
    ds = import_logprobs([FIXTURES / "chat.jsonl", FIXTURES / "legacy.jsonl"])
    check_bank(ds, CHAT_ROWS + LEGACY_ROWS, CHAT_RANKS + LEGACY_RANKS)
    np.testing.assert_array_equal(ds["sequence"].values,
                                  CHAT_SEQUENCES + [2 + s for s in LEGACY_SEQUENCES])
    assert ds.attrs["format"] == "openai-chat, openai-completions"
    assert json.loads(ds.attrs["source_files"]) == [str(FIXTURES / "chat.jsonl"),
                                                    str(FIXTURES / "legacy.jsonl")]


def test_top_k_truncates_and_moves_mass_to_the_tail():
    ds = import_logprobs(FIXTURES / "chat.jsonl", top_k=1)
    top1 = [[max(row)] for row in CHAT_ROWS]
    probs, tails = expected_probs(top1)
    np.testing.assert_allclose(ds["probs"].values, probs, atol=1e-15)
    np.testing.assert_allclose(ds["tail_mass"].values, tails, atol=1e-12)
    np.testing.assert_array_equal(ds["sampled_rank"].values,
                                  [r if r == 0 else -1 for r in CHAT_RANKS])


def test_sampled_token_found_by_token_and_closest_logprob(tmp_path):
    # two entries share the token string (distinct ids decoding alike): the one whose
    # logprob equals the sampled logprob is the sampled one.
    item = {"token": "x", "logprob": -2.0,
            "top_logprobs": [{"token": "x", "logprob": -1.0}, {"token": "y", "logprob": -1.7},
                             {"token": "x", "logprob": -2.0}, {"token": "z", "logprob": -3.0}]}
    path = write_lines(tmp_path / "dup.jsonl",
                       [{"choices": [{"logprobs": {"content": [item]}}]}])
    assert import_logprobs(path)["sampled_rank"].values.tolist() == [2]


def test_batch_api_error_records_are_bad_lines(tmp_path):
    path = write_lines(tmp_path / "batch.jsonl", [
        {"custom_id": "a", "response": {"status_code": 200, "body": chat_record([[-0.1]])}},
        {"custom_id": "b", "response": {"status_code": 429, "body": {"error": "rate"}}},
        {"custom_id": "c", "response": None, "error": {"message": "expired"}},
    ])
    with pytest.raises(UserError, match=r"batch\.jsonl:2: request failed with status_code 429"):
        import_logprobs(path)
    with pytest.warns(BadInputWarning, match="0 bad positions and 2 bad lines"):
        ds = import_logprobs(path, skip_bad=True)
    check_bank(ds, [[-0.1]], [0])


def test_top_k_sum_above_one_is_an_error(tmp_path):
    path = write_lines(tmp_path / "over.jsonl",
                       [chat_record([[-0.5, -2.0]]), chat_record([[math.log(0.7)] * 2])])
    with pytest.raises(UserError, match=r"over\.jsonl:2: top-k probabilities sum to"):
        import_logprobs(path)


def test_rounding_above_one_within_tolerance_is_accepted(tmp_path):
    path = write_lines(tmp_path / "full.jsonl", [chat_record([[math.log(0.5 + 4e-7)] * 2])])
    ds = import_logprobs(path)
    assert ds["tail_mass"].values.tolist() == [0.0]


# ---------------------------------------------------------------------------------------
# errors, skip_bad and atomicity
# ---------------------------------------------------------------------------------------

ERROR_CASES = [
    # file, message pattern, positions kept with skip_bad, bad positions, bad lines
    ("malformed.jsonl", r"malformed\.jsonl:2: malformed JSON", 2, 0, 1),
    ("missing_field.jsonl",
     r"missing_field\.jsonl:2: choices\[0\]\.logprobs\.content\[1\]: missing 'top_logprobs'",
     2, 1, 1),
    ("nan.jsonl", r"nan\.jsonl:2: logprob is NaN", 1, 1, 0),
    ("positive.jsonl", r"positive\.jsonl:2: positive logprob 0\.5", 1, 1, 0),
    ("empty.jsonl", r"empty\.jsonl:1: empty file", 0, 0, 1),
]


@pytest.mark.parametrize("name,pattern,kept,bad_positions,bad_lines", ERROR_CASES)
def test_bad_input_raises_with_file_and_line(name, pattern, kept, bad_positions, bad_lines):
    with pytest.raises(UserError, match=pattern) as info:
        import_logprobs(FIXTURES / name)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name,pattern,kept,bad_positions,bad_lines", ERROR_CASES)
def test_bad_input_writes_nothing(tmp_path, name, pattern, kept, bad_positions, bad_lines):
    out = tmp_path / "bank.nc"
    with pytest.raises(UserError):
        import_logprobs([FIXTURES / "chat.jsonl", FIXTURES / name], out)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name,pattern,kept,bad_positions,bad_lines", ERROR_CASES)
def test_skip_bad_keeps_valid_positions_and_warns(name, pattern, kept, bad_positions,
                                                  bad_lines):
    if kept == 0:
        with pytest.raises(UserError, match=pattern + r".*no valid positions|no valid "
                                                        r"positions.*" + pattern):
            import_logprobs(FIXTURES / name, skip_bad=True)
        return
    with pytest.warns(BadInputWarning) as record:
        ds = import_logprobs(FIXTURES / name, skip_bad=True)
    message = str(record[0].message)
    assert f"skipped {bad_positions} bad positions and {bad_lines} bad lines" in message
    assert ds.sizes["position"] == kept
    assert ds.attrs["skipped_positions"] == bad_positions
    assert ds.attrs["skipped_lines"] == bad_lines


def test_skip_bad_values_of_kept_positions():
    with pytest.warns(BadInputWarning):
        ds = import_logprobs(FIXTURES / "malformed.jsonl", skip_bad=True)
    check_bank(ds, [[-0.5, -1.5], [-0.2, -2.0]], [0, 0])
    with pytest.warns(BadInputWarning):
        ds = import_logprobs(FIXTURES / "positive.jsonl", skip_bad=True)
    # a logprob of +5e-7 is rounding: probability 1, empty tail
    assert ds["probs"].values.tolist() == [[1.0]]
    assert ds["tail_mass"].values.tolist() == [0.0]


def test_skip_bad_over_several_files_skips_the_empty_one():
    with pytest.warns(BadInputWarning, match="1 bad lines"):
        ds = import_logprobs([FIXTURES / "empty.jsonl", FIXTURES / "chat.jsonl"],
                             skip_bad=True)
    check_bank(ds, CHAT_ROWS, CHAT_RANKS)


def test_existing_output_is_untouched_on_error(tmp_path):
    out = tmp_path / "bank.nc"
    out.write_bytes(b"previous")
    with pytest.raises(UserError):
        import_logprobs(FIXTURES / "nan.jsonl", out)
    assert out.read_bytes() == b"previous"
    assert sorted(os.listdir(tmp_path)) == ["bank.nc"]


def test_unknown_extension_and_missing_file(tmp_path):
    csv = tmp_path / "x.csv"
    csv.write_text("a,b\n")
    with pytest.raises(UserError, match=r"x\.csv: unknown format '\.csv'"):
        import_logprobs(csv)
    with pytest.raises(UserError, match=r"nope\.jsonl: no such file"):
        import_logprobs(tmp_path / "nope.jsonl")


@pytest.mark.parametrize("kwargs", [{"top_k": 0}, {"vocab": -3}, {"top_k": 2.5}])
def test_bad_parameters(kwargs):
    with pytest.raises(UserError, match=r"(top_k|vocab) must be an integer in \[1, 1099511627776\]"):
        import_logprobs(FIXTURES / "chat.jsonl", **kwargs)


def test_vocab_too_small_for_the_tail_is_reported(tmp_path):
    # top [0.5, 0.25], tail 0.25: with vocab 2 no token is left for the tail
    path = write_lines(tmp_path / "v.jsonl", [chat_record([[math.log(0.5), math.log(0.25)]])])
    with pytest.raises(UserError, match=r"v\.jsonl:1: tail mass 0\.25 cannot be spread"):
        import_logprobs(path, vocab=2)
    assert import_logprobs(path, vocab=3).sizes["position"] == 1


# ---------------------------------------------------------------------------------------
# bounds of the entropy and the second log-moment
# ---------------------------------------------------------------------------------------


def test_bounds_of_a_hand_computed_example():
    # top [1/2, 1/4], tail 1/4, vocab 4: the tail is one token of 1/4 at least and two of
    # 1/8 at most, i.e. the distributions (1/2, 1/4, 1/4) and (1/2, 1/4, 1/8, 1/8).
    h_lo, h_hi, m_lo, m_hi = entropy_bounds(np.array([[0.5, 0.25]]), np.array([0.25]), 4)
    log2 = math.log(2.0)
    assert h_lo[0] == pytest.approx(1.5 * log2, rel=1e-12)
    assert h_hi[0] == pytest.approx(1.75 * log2, rel=1e-12)
    assert m_lo[0] == pytest.approx(2.5 * log2 ** 2, rel=1e-12)
    assert m_hi[0] == pytest.approx(3.75 * log2 ** 2, rel=1e-12)


def test_upper_bounds_are_infinite_without_vocab_and_exact_without_tail():
    probs = np.array([[0.5, 0.25], [0.75, 0.25]])
    h_lo, h_hi, m_lo, m_hi = entropy_bounds(probs, np.array([0.25, 0.0]))
    assert np.isinf(h_hi[0]) and np.isinf(m_hi[0])
    assert h_lo[1] == h_hi[1] == pytest.approx(entropy([0.75, 0.25]), rel=1e-12)
    assert m_lo[1] == m_hi[1] == pytest.approx(log_moment([0.75, 0.25]), rel=1e-12)


def test_whole_vocabulary_listed_means_no_tail_terms():
    probs = np.array([[0.6, 0.3, 0.1 - 1e-9]])
    h_lo, h_hi, _, _ = entropy_bounds(probs, np.array([1e-9]), vocab=3)
    assert h_lo[0] == h_hi[0] == pytest.approx(entropy([0.6, 0.3, 0.1]), rel=1e-7)


@pytest.mark.parametrize("top,tail,vocab", [
    ([0.4, 0.2, 0.1], 0.3, 50),      # concave case, q <= 1/e
    ([0.3, 0.25], 0.45, 6),          # few tail tokens
    ([0.55], 0.45, 4),               # q > 1/e
    ([0.45, 0.4], 0.15, 5),          # q > 1/e, two listed entries
    ([0.9], 0.1, 1000),
])
def test_bounds_contain_every_feasible_tail_and_are_attained(top, tail, vocab):
    rng = np.random.default_rng(12345)
    q, m = min(top), vocab - len(top)
    h_lo, h_hi, m_lo, m_hi = (b[0] for b in entropy_bounds(np.array([top]), np.array([tail]),
                                                          vocab))
    tried = 0
    while tried < 400:
        count = int(rng.integers(math.ceil(tail / q - 1e-12), m + 1))
        t = rng.dirichlet(np.full(count, rng.choice([0.1, 1.0, 10.0]))) * tail
        if t.max() > q:
            continue
        tried += 1
        full = top + t.tolist()
        assert h_lo - 1e-12 <= entropy(full) <= h_hi + 1e-12
        assert m_lo - 1e-12 <= log_moment(full) <= m_hi + 1e-12
    # the even spread attains the entropy upper bound, the concentrated tail the lower one
    assert h_hi == pytest.approx(entropy(spread_tail(top, tail, vocab)), rel=1e-12)
    assert h_lo == pytest.approx(entropy(concentrated_tail(top, tail)), rel=1e-12)
    if q <= math.exp(-1):
        assert m_lo == pytest.approx(log_moment(concentrated_tail(top, tail)), rel=1e-12)
        assert m_hi == pytest.approx(log_moment(spread_tail(top, tail, vocab)), rel=1e-12)


def test_mu2_upper_bound_with_large_smallest_probability_matches_a_grid_search():
    # top [0.5], tail 0.5 over two tokens of probability <= 0.5: maximise over the split
    t = np.linspace(0.0, 0.5, 100_001)[1:-1]
    g = lambda x: x * np.log(x) ** 2  # noqa: E731
    best = 0.5 * math.log(0.5) ** 2 + (g(t) + g(0.5 - t)).max()
    _, _, _, m_hi = entropy_bounds(np.array([[0.5]]), np.array([0.5]), vocab=3)
    assert m_hi[0] == pytest.approx(best, rel=1e-9)


def test_bank_bounds_of_the_chat_fixture(tmp_path):
    ds = import_logprobs(FIXTURES / "chat.jsonl", vocab=50)
    for i, row in enumerate(CHAT_ROWS):
        top = sorted((math.exp(v) for v in row), reverse=True)
        tail = 1.0 - sum(top)
        assert ds["entropy_lower"].values[i] == pytest.approx(
            entropy(concentrated_tail(top, tail)), rel=1e-9)
        assert ds["entropy_upper"].values[i] == pytest.approx(
            entropy(spread_tail(top, tail, 50)), rel=1e-9)
        assert ds["mu2_lower"].values[i] == pytest.approx(
            log_moment(concentrated_tail(top, tail)), rel=1e-9)
        assert ds["mu2_upper"].values[i] == pytest.approx(
            log_moment(spread_tail(top, tail, 50)), rel=1e-9)


# ---------------------------------------------------------------------------------------
# npz
# ---------------------------------------------------------------------------------------

NPZ_LOGPROBS = np.array([
    [-2.0, -0.5, -np.inf, -1.5],          # unsorted, one masked entry
    [-0.1, -3.0, -4.0, -5.0],
    [-1.0, -1.0, -2.0, -np.inf],          # a tie
])


def npz_expected() -> tuple[np.ndarray, np.ndarray]:
    rows = [[v for v in row if np.isfinite(v)] for row in NPZ_LOGPROBS.tolist()]
    return expected_probs(rows)


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_with_sampled_rank(tmp_path, compressed):
    path = tmp_path / "lp.npz"
    save = np.savez_compressed if compressed else np.savez
    save(path, logprobs=NPZ_LOGPROBS.astype(np.float32), sampled_rank=np.array([1, 7, -1]))
    ds = import_logprobs(path)
    probs, tails = npz_expected()
    np.testing.assert_allclose(ds["probs"].values, probs, rtol=1e-6)
    np.testing.assert_allclose(ds["tail_mass"].values, tails, atol=1e-6)
    # rank 7 is outside the top-4: unknown
    np.testing.assert_array_equal(ds["sampled_rank"].values, [1, -1, -1])
    assert ds.attrs["format"] == "npz"


def test_npz_with_sampled_logprob_and_sequence(tmp_path):
    path = tmp_path / "lp.npz"
    np.savez(path, logprobs=NPZ_LOGPROBS, sampled_logprob=np.array([-2.0, -9.0, -2.0]),
             sequence=np.array([0, 0, 1]))
    ds = import_logprobs([path, path])
    np.testing.assert_array_equal(ds["sampled_rank"].values, [2, -1, 2] * 2)
    np.testing.assert_array_equal(ds["sequence"].values, [0, 0, 1, 2, 2, 3])


def test_npz_read_in_blocks_equals_one_block(tmp_path, monkeypatch):
    rng = np.random.default_rng(7)
    lp = np.log(rng.dirichlet(np.ones(30), size=1000)[:, :12])
    path = tmp_path / "many.npz"
    np.savez_compressed(path, logprobs=lp, sampled_rank=rng.integers(0, 20, size=1000))
    whole = import_logprobs(path)
    monkeypatch.setattr(npz_reader, "BLOCK_ELEMENTS", 12 * 7)  # blocks of 7 rows
    blocks = import_logprobs(path)
    for name in BANK_VARIABLES:
        np.testing.assert_array_equal(whole[name].values, blocks[name].values)
    expected = -np.sort(-np.exp(lp), axis=1)
    np.testing.assert_allclose(blocks["probs"].values, expected, rtol=1e-13)


@pytest.mark.parametrize("arrays,pattern", [
    ({"scores": np.zeros((2, 2))}, r": no 'logprobs' array \(arrays found: scores\)"),
    ({"logprobs": np.zeros(3)}, r": 'logprobs' must have shape \(positions, k\)"),
    ({"logprobs": np.zeros((2, 2), dtype=np.int64)}, ": 'logprobs' must be a float array"),
    ({"logprobs": np.zeros((2, 1)), "sampled_rank": np.zeros(3, dtype=int)},
     r": 'sampled_rank' has shape \(3,\)"),
    ({"logprobs": np.array([[-0.1], [np.nan], [-0.2]])}, r": row 1: logprob is NaN"),
    ({"logprobs": np.array([[-0.1], [-0.2], [0.3]])}, r": row 2: positive logprob 0\.3"),
    ({"logprobs": np.array([[-0.1, -0.2]])}, r": row 0: top-k probabilities sum to"),
    ({"logprobs": np.zeros((0, 4))}, r": row 0: empty file"),
    ({"logprobs": np.array([[-np.inf, -np.inf]])}, r": row 0: no top log-probabilities"),
])
def test_npz_errors(tmp_path, arrays, pattern):
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    out = tmp_path / "bank.nc"
    with pytest.raises(UserError, match=r"bad\.npz" + pattern):
        import_logprobs(path, out)
    assert not out.exists()


def test_not_a_zip_file(tmp_path):
    path = tmp_path / "junk.npz"
    path.write_text("not a zip")
    with pytest.raises(UserError, match=r"junk\.npz: not a readable \.npz file"):
        import_logprobs(path)


# ---------------------------------------------------------------------------------------
# writing and loading banks
# ---------------------------------------------------------------------------------------


def test_written_bank_has_attributes_and_round_trips(tmp_path):
    out = tmp_path / "sub" / "bank.nc"
    ds = import_logprobs([FIXTURES / "chat.jsonl"], out, vocab=50)
    assert out.is_file()
    with xr.open_dataset(out) as disk:
        for name in BANK_VARIABLES:
            assert disk[name].attrs["long_name"]
            assert disk[name].attrs["units"] in ("1", "nat", "nat2")
            np.testing.assert_array_equal(disk[name].values, ds[name].values)
        for key in ("Conventions", "title", "source", "history", "config_json",
                    "source_files", "format"):
            assert disk.attrs[key]
        assert "seed_entropy" not in disk.attrs      # an import draws no random numbers
        assert json.loads(disk.attrs["config_json"])["vocab"] == 50
    probs, tail = load_bank(out)
    expected, tails = expected_probs(CHAT_ROWS)
    np.testing.assert_allclose(probs, expected, atol=1e-15)
    np.testing.assert_allclose(tail, tails, atol=1e-12)


def test_load_bank_accepts_a_dataset():
    ds = import_logprobs(FIXTURES / "legacy.jsonl")
    probs, tail = load_bank(ds)
    assert probs.dtype == np.float64 and probs.shape == (4, 3) and tail.shape == (4,)


def _bank(probs, tail) -> xr.Dataset:
    return xr.Dataset({"probs": (("position", "rank"), np.array(probs, dtype=float)),
                       "tail_mass": ("position", np.array(tail, dtype=float))})


@pytest.mark.parametrize("ds,pattern", [
    (xr.Dataset({"probs": (("position", "rank"), [[0.5]])}), "missing variable 'tail_mass'"),
    (_bank([[0.5, 0.2], [np.nan, 0.1]], [0.3, 0.5]), "position 1: NaN"),
    (_bank([[0.5, -0.2]], [0.7]), "position 0: negative"),
    (_bank([[0.5, 0.2], [0.2, 0.5]], [0.3, 0.3]), "position 1: probabilities not sorted"),
    (_bank([[0.7, 0.6]], [0.0]), r"position 0: probabilities sum to 1\.3"),
    (_bank([[0.5, 0.2]], [0.5]), "position 0: probabilities .* plus tail mass"),
    (_bank([[0.0, 0.0]], [1.0]), "position 0: no positive probability"),
    (_bank(np.zeros((0, 2)), []), "empty bank"),
])
def test_load_bank_rejects_bad_banks(ds, pattern):
    with pytest.raises(UserError, match=pattern):
        load_bank(ds)


def test_load_bank_rejects_missing_and_unreadable_files(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        load_bank(tmp_path / "none.nc")
    bad = tmp_path / "bad.nc"
    bad.write_text("garbage")
    with pytest.raises(UserError, match="not a readable netCDF"):
        load_bank(bad)


# ---------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="brwsim")
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def test_cli_writes_the_bank_and_prints_a_summary(tmp_path, capsys):
    out = tmp_path / "bank.nc"
    args = _parse(["import-logprobs", str(FIXTURES / "chat.jsonl"),
                   str(FIXTURES / "legacy.jsonl"), "--out", str(out), "--vocab", "50",
                   "--top-k", "2"])
    assert args.command == "import-logprobs"
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert "10 positions from 2 file(s)" in text and "k = 2" in text
    assert "Mean entropy in [" in text and "inf" not in text
    probs, _ = load_bank(out)
    assert probs.shape == (10, 2)


def test_cli_reports_skipped_input_and_infinite_bounds(tmp_path, capsys):
    args = _parse(["import-logprobs", str(FIXTURES / "nan.jsonl"), "--out",
                   str(tmp_path / "b.nc"), "--skip-bad"])
    assert args.func(args) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("brwsim: warning: skipped 1 bad positions")
    assert "pass --vocab" in captured.out


def test_cli_requires_out():
    with pytest.raises(SystemExit):
        _parse(["import-logprobs", "x.jsonl"])


# ---------------------------------------------------------------------------------------
# streaming
# ---------------------------------------------------------------------------------------


def write_generated_chat(path: Path, logps: np.ndarray, padding: str) -> Path:
    """One chat completion per row of ``logps`` (sampled token: the most likely one)."""
    with open(path, "w") as fh:
        for row in logps.tolist():
            top = ", ".join(f'{{"token": "t{j}", "logprob": {v!r}}}' for j, v in enumerate(row))
            s = int(np.argmax(row))
            fh.write(f'{{"choices": [{{"index": 0, "message": {{"role": "assistant", '
                     f'"content": "{padding}"}}, "logprobs": {{"content": [{{"token": '
                     f'"t{s}", "logprob": {row[s]!r}, "top_logprobs": [{top}]}}]}}}}]}}\n')
    return path


def random_top4(n: int, seed: int) -> np.ndarray:
    """Top-4 of random 6-token distributions, scaled so the tail is at least 0.1%."""
    return np.random.default_rng(seed).dirichlet(np.ones(6), size=n)[:, :4] * 0.999


def test_fifty_thousand_lines_import_quickly(tmp_path):
    raw = random_top4(50_000, seed=3)
    path = write_generated_chat(tmp_path / "big.jsonl", np.log(raw), "lorem ipsum")
    start = time.perf_counter()
    ds = import_logprobs(path)
    elapsed = time.perf_counter() - start
    assert ds.sizes["position"] == 50_000
    np.testing.assert_allclose(ds["probs"].values, -np.sort(-raw, axis=1), rtol=1e-12)
    np.testing.assert_allclose(ds["tail_mass"].values, 1.0 - raw.sum(axis=1), atol=1e-12)
    np.testing.assert_array_equal(ds["sampled_rank"].values, 0)
    assert elapsed < 20


def test_peak_memory_is_independent_of_file_size(tmp_path):
    """Lines padded with 4 kB of text: peak traced memory stays far below the file size."""
    raw = random_top4(8_000, seed=4)
    path = write_generated_chat(tmp_path / "padded.jsonl", np.log(raw), "lorem ipsum " * 340)
    size = path.stat().st_size
    tracemalloc.start()
    try:
        ds = import_logprobs(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ds.sizes["position"] == 8_000
    assert size > 30e6
    assert peak < size / 10, (peak, size)


# ---------------------------------------------------------------------------------------
# experiments/capture_hf.py
# ---------------------------------------------------------------------------------------

CAPTURE_SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "capture_hf.py"


def _capture_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("capture_hf", CAPTURE_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_capture_without_torch_or_transformers_exits_with_one_message(tmp_path, monkeypatch,
                                                                        capsys):
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` fail
    monkeypatch.setitem(sys.modules, "transformers", None)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello\n")
    status = _capture_module().main([str(tmp_path), str(prompts), "--out",
                                     str(tmp_path / "bank.nc")])
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith("capture_hf: error: this script needs the optional dependencies")
    assert "pip install -e '.[hf]' in the brwsim checkout" in err and err.count("\n") == 1
    assert not (tmp_path / "bank.nc").exists()


def _tiny_model(folder: Path, vocab: int = 100) -> None:
    """A randomly initialised one-layer GPT-2 and a word-level tokenizer, saved locally."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    words = {"<unk>": 0, "<eos>": 1} | {f"w{i}": i for i in range(2, vocab)}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(words, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>",
                                                eos_token="<eos>", pad_token="<eos>")
    fast.save_pretrained(folder)
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=32, n_positions=64,
                                     vocab_size=vocab, bos_token_id=1, eos_token_id=1)
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)


@pytest.mark.slow
def test_capture_with_a_tiny_random_model(tmp_path, capsys):
    model_dir = tmp_path / "model"
    _tiny_model(model_dir)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("w2 w3 w4\n\nw5 w6\n")
    out = tmp_path / "bank.nc"
    status = _capture_module().main([str(model_dir), str(prompts), "--out", str(out),
                                     "--top-k", "8", "--max-new-tokens", "6",
                                     "--temperature", "0.7", "--seed", "1"])
    assert status == 0, capsys.readouterr().err
    npz = np.load(tmp_path / "bank.npz")
    lp = npz["logprobs"]
    n = lp.shape[0]
    assert lp.shape[1] == 8 and 2 <= n <= 12
    assert set(npz["sequence"].tolist()) == {0, 1}
    assert np.all(np.diff(lp, axis=1) <= 0) and np.all(lp <= 0)
    ds = xr.open_dataset(out)
    try:
        probs = np.exp(lp.astype(np.float64))
        np.testing.assert_allclose(ds["probs"].values, probs, rtol=1e-12)
        np.testing.assert_allclose(ds["tail_mass"].values, 1.0 - probs.sum(axis=1), atol=1e-6)
        ranks = npz["sampled_rank"]
        np.testing.assert_array_equal(ds["sampled_rank"].values, np.where(ranks < 8, ranks, -1))
        assert ds.attrs["vocab"] == "100"
        assert np.all(np.isfinite(ds["entropy_upper"].values))
        assert np.all(ds["entropy_lower"].values <= ds["entropy_upper"].values)
        # a random 100-token model is nearly uniform: entropy close to log(100)
        assert np.all(ds["entropy_upper"].values <= math.log(100) + 1e-9)
        assert json.loads(ds.attrs["capture_config_json"])["temperature"] == 0.7
    finally:
        ds.close()
    assert "positions from 1 file(s) (npz)" in capsys.readouterr().out


@pytest.mark.slow
def test_capture_reports_an_unloadable_model(tmp_path, capsys):
    pytest.importorskip("transformers")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello\n")
    module = _capture_module()
    status = module.main([str(tmp_path / "nothing"), str(prompts), "--out",
                          str(tmp_path / "bank.nc")])
    assert status == 2
    assert "nothing: no such folder" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert module.main([str(empty), str(prompts), "--out", str(tmp_path / "bank.nc")]) == 2
    assert "empty: cannot load a local causal LM" in capsys.readouterr().err
    assert not (tmp_path / "bank.nc").exists()


# ---------------------------------------------------------------------------------------
# the public API
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("first_import", ["brwsim.bank", "brwsim.cli.bank",
                                          "brwsim.families.empirical"])
def test_bank_api_is_reachable_in_a_fresh_interpreter(first_import):
    """`import brwsim; brwsim.bank.import_logprobs` (the README's API table) works, whatever
    module a program imports first (no import cycle between the bank and the families)."""
    import subprocess
    import sys

    code = (f"import {first_import}\nimport brwsim\n"
            "assert callable(brwsim.bank.import_logprobs) and callable(brwsim.bank.load_bank)\n"
            "assert brwsim.bank_stats is brwsim.bankstats.bank_stats\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], timeout=300)
    assert done.returncode == 0, done.stderr
