"""Valid parameters whose numbers degenerate in float64: one line, exit 2, no warning, no file."""

from __future__ import annotations

import warnings

import pytest

from brwsim import parse_family, simulate
from brwsim.cli import main
from brwsim.errors import UserError
from brwsim.theory import check_family

DEGENERATE = [
    ("dirichlet(alpha=1e308, vocab=200)", "degenerate in float64"),
    ("dirichlet(alpha=1e-308, vocab=200)", "degenerate in float64"),
    ("softmaxnormal(sigma=1e308, vocab=200)", "degenerate in float64"),
    ("zipf(s=1e308, vocab=10)", "degenerate in float64"),
    ("tempered(family=zipf(s=1.1, vocab=10), T=1e-308)", "degenerate in float64"),
    ("zipf(s=800, vocab=10)", "probability 1 in float64"),
    ("geometric(r=1e-300)", "probability 1 in float64"),
    ("fixed(probs=[1e-300, 1e-300])", "hold mass"),
]


@pytest.mark.parametrize("text,needle", DEGENERATE, ids=[t for t, _ in DEGENERATE])
def test_degenerate_families_give_one_line(text, needle, capsys, tmp_path):
    fam = parse_family(text)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                  # no RuntimeWarning escapes
        with pytest.raises(UserError, match=needle):
            check_family(fam)
        with pytest.raises(UserError, match=needle):
            simulate(fam, [1, 4], 2)
    for cmd in (["theory", "--family", text, "--budgets", "1,64"],
                ["run", "--family", text, "--budgets", "1,4", "--iterations", "2",
                 "--out", str(tmp_path / "r.nc")]):
        assert main(cmd) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err
    assert not (tmp_path / "r.nc").exists()


@pytest.mark.parametrize("text", ["dirichlet(alpha=0.1, vocab=1099511627776)",
                                  "mixture(families=[zipf(s=1.1, vocab=10), uniform(k=2)], "
                                  "weights=[1e308, 1e308])"])
def test_extreme_but_sound_families_are_accepted(text):
    check_family(parse_family(text))


def test_vocabularies_beyond_2_40_are_refused():
    with pytest.raises(UserError, match="vocab must be an integer in"):
        parse_family("zipf(s=1.1, vocab=1180591620717411303424)")
