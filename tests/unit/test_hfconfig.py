"""One validated config.json reader (brwsim.models.hfconfig) behind every checkpoint reader,
and one window check shared by the transformer family and the drafter (issue 39)."""

from __future__ import annotations

import json
import os

import pytest

from brwsim.backends.numpyforward import load_hf_weights
from brwsim.drafters.eagle import load_head
from brwsim.errors import UserError
from brwsim.families.checkpoint import Checkpoint, check_slots, checkpoint_path, load_checkpoint
from brwsim.models.hfconfig import MAX_CONFIG_BYTES, config_key, config_text, read_config

READERS = {"family": load_checkpoint, "numpy backend": load_hf_weights, "eagle head": load_head}


def _folder(tmp_path, content=None):
    folder = tmp_path / "ck"
    folder.mkdir()
    if content is not None:
        (folder / "config.json").write_text(content)
    return folder


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("content, message", [
    ("[1, 2]", "not a JSON object"),
    ("{", "not JSON"),
    ('{"n": ' + "9" * 5000 + "}", "not JSON"),
    ("[" * 100000 + "]" * 100000, "not JSON"),
])
def test_every_reader_refuses_bad_json_in_one_line(tmp_path, reader, content, message):
    folder = _folder(tmp_path, content)
    with pytest.raises(UserError, match=message) as e:
        READERS[reader](str(folder))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_refuses_a_fifo_and_a_huge_file_unread(tmp_path, reader):
    folder = _folder(tmp_path)
    os.mkfifo(folder / "config.json")                # opening it would block forever
    with pytest.raises(UserError, match="regular file|FIFO|pipe|not a file"):
        READERS[reader](str(folder))
    os.unlink(folder / "config.json")
    with open(folder / "config.json", "wb") as fh:   # sparse: declares its size only
        fh.truncate(MAX_CONFIG_BYTES + 1)
    with pytest.raises(UserError, match="config"):
        READERS[reader](str(folder))


@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_names_a_missing_config(tmp_path, reader):
    with pytest.raises(UserError, match="no config.json"):
        READERS[reader](str(_folder(tmp_path)))


def test_read_config_returns_the_object_and_typed_entries(tmp_path):
    folder = _folder(tmp_path, json.dumps({"model_type": "llama", "n": 4, "act": ["x"]}))
    cfg = read_config(str(folder))
    assert cfg["n"] == 4
    assert config_text(cfg, "model_type", "w") == "llama"
    assert config_key(cfg, "n", "w") == 4
    with pytest.raises(UserError, match="'act' .* is not a string"):
        config_text(cfg, "act", "w")
    with pytest.raises(UserError, match="'model_type' .* is not a positive int"):
        config_key(cfg, "model_type", "w")


def _ck(positions, window):
    return Checkpoint(None, "mistral", 300, positions, 0, {}, window)


def test_one_window_check_for_family_and_drafter():
    check_slots(64, _ck(64, 0))
    with pytest.raises(UserError, match="^window \\+ carry = 65 exceeds the model's 64 positions"):
        check_slots(65, _ck(64, 0))
    with pytest.raises(UserError, match="the target's window \\+ carry = 40 exceeds the draft "
                                        "model's sliding window of 32 tokens"):
        check_slots(40, _ck(64, 32), "drafter(...): the target's ", "the draft model's")
    with pytest.raises(UserError, match="^drafter: path must be a checkpoint folder"):
        checkpoint_path(3, "drafter: ")
    from brwsim.families import Transformer
    from brwsim.policies import DraftModel

    for make, prefix in ((lambda: Transformer(path=3), ""), (lambda: DraftModel(path=3), "drafter: ")):
        with pytest.raises(UserError) as e:
            make()
        assert str(e.value) == f"{prefix}path must be a checkpoint folder, got 3"
