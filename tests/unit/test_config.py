"""Sweep configuration: grids, points, seeds, hashes, and errors that name the key path."""

from __future__ import annotations

import tomllib

import numpy as np
import pytest

from brwsim.sweep.config import load_config
from brwsim.errors import UserError
from brwsim.families import Dirichlet, Fixed, Mixture, Tempered, Zipf

BASE = """
[sweep]
seed = 3
iterations = 250
chunk = 100
budgets = [1, 4, 16]
prediction = "none"

[[sweep.family]]
name = "dirichlet"
alpha = [0.01, 0.05, 0.2]
vocab = 1000

[[sweep.family]]
name = "zipf"
s = [1.2, 1.5]
vocab = [1000, 32000]
"""


def cfg(text: str = BASE, **replace: str):
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new, 1)
    return load_config(tomllib.loads(text))


def test_grid_points_and_chunks():
    c = cfg()
    assert c.n_points == 3 + 4 and c.n_chunks == 3
    assert c.chunks() == [(0, 0, 100), (1, 100, 100), (2, 200, 50)]
    dirichlet, zipf = c.blocks
    assert (dirichlet.label, dirichlet.shape, dirichlet.fixed) == ("dirichlet", (3,), {"vocab": 1000})
    assert zipf.shape == (2, 2) and list(zipf.grid) == ["s", "vocab"]
    assert zipf.families[1] == Zipf(1.2, 32000)          # row-major: the last key varies fastest
    assert zipf.grid_values(2) == {"s": 1.5, "vocab": 1000}
    points = list(c.points())
    assert [p.index for p in points] == list(range(7))
    assert points[4].family == Zipf(1.2, 32000) and points[4].local == 1
    assert points[1].family == Dirichlet(0.05, 1000)
    np.testing.assert_array_equal(c.budgets, [1, 4, 16])


def test_point_keys_are_spawned_from_the_seed():
    c = cfg()
    expect = np.random.SeedSequence(3, spawn_key=(5,)).generate_state(1, np.uint64)[0]
    assert c.point_key(5) == expect
    assert len({int(c.point_key(i)) for i in range(c.n_points)}) == c.n_points


def test_hash_is_stable_and_changes_with_the_configuration():
    assert cfg().hash == cfg().hash
    assert cfg().hash != cfg(**{"iterations = 250": "iterations = 251"}).hash
    assert cfg().hash != cfg(**{"0.05": "0.06"}).hash
    # spelling of a family string does not matter, its value does
    a = cfg(BASE + '[[sweep.family]]\nfamily = "zipf(s=1.2,vocab=10)"\n')
    b = cfg(BASE + '[[sweep.family]]\nfamily = "zipf( s = 1.2, vocab = 10 )"\n')
    assert a.hash == b.hash


def test_list_parameters_are_values_not_grids():
    c = cfg(BASE + """
[[sweep.family]]
name = "fixed"
probs = [0.5, 0.3]
[[sweep.family]]
name = "mixture"
families = ["zipf(s=1.1, vocab=100)", "geometric(r=0.5)"]
weights = [0.25, 0.75]
""")
    fixed, mixture = c.blocks[2:]
    assert fixed.shape == () and fixed.families == (Fixed([0.5, 0.3]),)
    assert mixture.n_points == 1 and isinstance(mixture.families[0], Mixture)
    assert mixture.fixed["families"] == ["zipf(s=1.1, vocab=100, spread=0.0)", "geometric(r=0.5)"]


def test_nested_and_string_families():
    c = cfg(BASE + """
[[sweep.family]]
name = "tempered"
family = "zipf(s=1.2, vocab=1000)"
T = [0.5, 2.0]
[[sweep.family]]
family = ["geometric(r=0.5)", "uniform(k=3)"]
[[sweep.family]]
family = "geometric(r=0.7)"
label = "geo"
[[sweep.family]]
name = "zipf"
s = 1.1
vocab = 50
""")
    tempered, strings, single, zipf2 = c.blocks[2:]
    assert tempered.families[1] == Tempered(Zipf(1.2, 1000), 2.0)
    assert strings.label == "family" and strings.grid == {"family": ["geometric(r=0.5)", "uniform(k=3)"]}
    assert single.label == "geo" and single.n_points == 1
    assert zipf2.label == "zipf_2"


def test_seed_may_exceed_64_bits_as_a_string():
    c = cfg(**{"seed = 3": 'seed = "123456789012345678901234567890"'})
    assert c.seed == 123456789012345678901234567890
    assert c.normalized["seed"] == "123456789012345678901234567890"


def test_budgets_string_and_chunk_default():
    c = cfg(**{"budgets = [1, 4, 16]": 'budgets = "1..64"', "chunk = 100\n": ""})
    assert c.budgets.tolist() == [1, 2, 4, 8, 16, 32, 64] and c.chunk == 250


@pytest.mark.parametrize("replace, message", [
    ({"0.2]": "-0.2]"}, r"^sweep\.family\[0\]\.alpha\[2\]: must be a finite number > 0"),
    ({"vocab = [1000, 32000]": "vocab = [1000, 1]"}, r"^sweep\.family\[1\]\.vocab\[1\]: must be an integer in \[2, "),
    ({"vocab = 1000": "vocab = 1"}, r"^sweep\.family\[0\]\.vocab: must be an integer in \[2, "),
    ({"alpha": "alhpa"}, r"^sweep\.family\[0\]\.alhpa: unknown key; dirichlet takes alpha, vocab"),
    ({"vocab = 1000\n": ""}, r"^sweep\.family\[0\]: dirichlet takes alpha, vocab: missing .*'vocab'"),
    ({'"dirichlet"': '"dirichlett"'}, r"^sweep\.family\[0\]\.name: unknown family 'dirichlett'"),
    ({"[0.01, 0.05, 0.2]": "[0.01, 0.05, 0.01]"}, r"^sweep\.family\[0\]\.alpha\[2\]: duplicate grid value"),
    ({"[0.01, 0.05, 0.2]": "[]"}, r"^sweep\.family\[0\]\.alpha: empty list"),
    ({"[0.01, 0.05, 0.2]": "[[0.01], [0.05]]"}, r"^sweep\.family\[0\]\.alpha\[0\]: a grid value of dirichlet\.alpha must be"),
    ({"[0.01, 0.05, 0.2]": "true"}, r"^sweep\.family\[0\]\.alpha: must be a number or a string, got a boolean"),
    ({"[0.01, 0.05, 0.2]": '"abc"'}, r"^sweep\.family\[0\]\.alpha: must be a number, got 'abc'"),
    ({"[0.01, 0.05, 0.2]": "{x = 1}"}, r"^sweep\.family\[0\]\.alpha: must be a number or a string, got dict"),
    ({"iterations = 250": "iterations = 0"}, r"^sweep\.iterations: must be a positive integer, got 0"),
    ({"iterations = 250": 'iterations = "many"'}, r"^sweep\.iterations: must be a positive integer"),
    ({"iterations = 250\n": ""}, r"^sweep\.iterations: missing"),
    ({"chunk = 100": "chunk = 1.5"}, r"^sweep\.chunk: must be a positive integer, got 1\.5"),
    ({"seed = 3": "seed = -1"}, r"^sweep\.seed: must be a non-negative integer"),
    ({"budgets = [1, 4, 16]": "budgets = [1, 0]"}, r"^sweep\.budgets\[1\]: must be a positive integer, got 0"),
    ({"budgets = [1, 4, 16]": 'budgets = "1..x"'}, r"^sweep\.budgets: '1\.\.x' is not an integer"),
    ({"budgets = [1, 4, 16]": "budgets = [1, 134217728]"}, r"^sweep\.budgets: budget .* exceeds"),
    ({'prediction = "none"': 'prediction = "exact"'}, r"^sweep\.prediction: must be one of numerical, asymptotic, none"),
    ({"seed = 3": "seed = 3\ncolour = 1"}, r"^sweep\.colour: unknown key; known: seed, iterations"),
    ({"[sweep]": "top = 1\n[sweep]"}, r"^top: unknown key"),
    ({"vocab = 1000": 'vocab = 1000\nlabel = "a b"'}, r"^sweep\.family\[0\]\.label: must be an identifier"),
])
def test_errors_name_the_key_path(replace, message):
    with pytest.raises(UserError, match=message):
        cfg(**replace)


@pytest.mark.parametrize("block, message", [
    ('name = "fixed"\nprobs = 0.5', r"^sweep\.family\[2\]\.probs: must be a list \(fixed\.probs is a list parameter\)"),
    ('name = "fixed"\nprobs = [0.5, 0.7]', r"^sweep\.family\[2\]\.probs: must sum to at most 1"),
    ('name = "mixture"\nfamilies = ["zipf(s=1.1, vocab=9)", "geomtric(r=0.5)"]',
     r"^sweep\.family\[2\]\.families\[1\]: unknown family 'geomtric'"),
    ('name = "mixture"\nfamilies = ["geometric(r=0.5)"]\nweights = [0.5, 0.5]',
     r"^sweep\.family\[2\]: mixture has 1 families but 2 weights"),
    ('name = "tempered"\nfamily = "zipf(s=1.2)"\nT = 1', r"^sweep\.family\[2\]\.family: zipf\(s, vocab, spread\): .*'vocab'"),
    ('name = "tempered"\nfamily = "zipf(s=1.2, vocab=9)"\nT = [1, 0]', r"^sweep\.family\[2\]\.T\[1\]: must be a finite number > 0"),
    ('name = "zipf"\ns = [1.2, 0.1]\nvocab = 9\nspread = 0.2',
     r"^sweep\.family\[2\]\.spread: must be at most s .* \(at s=0\.1\)$"),
    ('family = ["geometric(r=0.5)", "geometric(r=1.5)"]', r"^sweep\.family\[2\]\.family\[1\]: r must be in \(0, 1\)"),
    ('family = "uniform(k=3)"\nT = 2', r"^sweep\.family\[2\]\.T: a block needs 'name'"),
    ("", r"^sweep\.family\[2\]: a block needs 'name'"),
    ('family = "uniform(k=3)"\nlabel = "zipf"', r"^sweep\.family\[2\]\.label: 'zipf' is already the label"),
])
def test_block_errors_name_the_key_path(block, message):
    with pytest.raises(UserError, match=message):
        cfg(BASE + "[[sweep.family]]\n" + block + "\n")


def test_file_errors(tmp_path):
    with pytest.raises(UserError, match="no such configuration file"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[sweep]\niterations = \n")
    with pytest.raises(UserError, match=r"bad\.toml: invalid TOML: .*line 2"):
        load_config(bad)
    bad.write_text(BASE.replace("0.2]", "-0.2]"))
    with pytest.raises(UserError, match=r"bad\.toml: sweep\.family\[0\]\.alpha\[2\]"):
        load_config(bad)
    with pytest.raises(UserError, match=r"^sweep: missing \[sweep\] table"):
        load_config({})


def _claimed(tmp_path, text: str):
    from brwsim.sweep.claim import FolderState, claim

    out = tmp_path / "state"
    out.mkdir(exist_ok=True)
    claim(out, load_config(tomllib.loads(text)), FolderState())
    return out


NO_CHUNK = BASE.replace("chunk = 100\n", "").replace("iterations = 250", "iterations = 50")


def test_a_changed_config_names_the_key_the_user_wrote(tmp_path):
    """No chunk key: chunk follows iterations (min(default, iterations)), yet the message
    names iterations, the key that changed in the file."""
    out = _claimed(tmp_path, NO_CHUNK)
    with pytest.raises(UserError, match=r"different configuration \(sweep\.iterations: 50 -> 500\)"):
        _claimed(tmp_path, NO_CHUNK.replace("iterations = 50", "iterations = 500"))
    assert (out / "config.json").exists()


def test_a_difference_in_a_default_says_default():
    from brwsim.sweep.claim import _first_difference

    old = {"chunk": 50, "iterations": 50, "seed": "0"}
    new = {"chunk": 500, "iterations": 50, "seed": "0"}
    assert (_first_difference(old, new, "sweep", ["iterations"], ["iterations"])
            == "sweep.chunk: 50 (default) -> 500 (default)")
    assert (_first_difference(old, dict(new, batch=4), "sweep", ["iterations"], ["iterations", "batch"])
            == "sweep.batch: (not set) -> 4")
    # an older state folder without the list of written keys: the plain first difference
    assert _first_difference(old, new, "sweep") == "sweep.chunk: 50 -> 500"
