"""The bank importer on the shapes real clients and servers write.

OpenAI shapes are built with the ``openai`` package's own pydantic types and dumped the way
the SDK serialises them. vLLM, SGLang and llama.cpp shapes follow their server code; each
test cites the file and commit it follows. Expected numbers are computed here from the
log-probabilities written into the records (exponentials, sorting, sums).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from openai.types import Completion, CompletionChoice
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionTokenLogprob
from openai.types.chat.chat_completion import Choice, ChoiceLogprobs
from openai.types.chat.chat_completion_chunk import Choice as ChunkChoice
from openai.types.chat.chat_completion_chunk import ChoiceDelta
from openai.types.chat.chat_completion_chunk import ChoiceLogprobs as ChunkLogprobs
from openai.types.chat.chat_completion_message import ChatCompletionMessage
from openai.types.chat.chat_completion_token_logprob import TopLogprob
from openai.types.completion_choice import Logprobs

from brwsim.bank import import_logprobs
from brwsim.errors import UserError

# llama.cpp writes the lowest float for a zero probability (completion_token_output::
# logarithm, tools/server/server-task.cpp @ 00efb3e184262872916bf136b3df63c1822a19bd).
LLAMA_LOWEST = -3.4028234663852886e38


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


def sse(records: list[object]) -> list[str]:
    """Server-sent-event framing as the servers write it (``data: {...}`` and a blank line)."""
    out = []
    for r in records:
        text = r.model_dump_json() if hasattr(r, "model_dump_json") else json.dumps(r)
        out += [f"data: {text}", ""]
    return out + ["data: [DONE]"]


def rows_of(ds) -> list[list[float]]:
    """The stored probabilities of a bank, row by row, padding dropped."""
    return [[p for p in row if p > 0] for row in ds["probs"].values.tolist()]


def assert_rows(ds, expected: list[list[float]]) -> None:
    """The bank's rows equal ``expected`` (same lengths, values to 1e-12)."""
    got = rows_of(ds)
    assert [len(r) for r in got] == [len(r) for r in expected], got
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-12)


def top_probs(logprobs: list[float]) -> list[float]:
    return sorted((math.exp(v) for v in logprobs), reverse=True)


def token_logprob(token: str, logprob: float, top: list[tuple[str, float]]):
    return ChatCompletionTokenLogprob(
        token=token, logprob=logprob, bytes=list(token.encode()),
        top_logprobs=[TopLogprob(token=t, logprob=v, bytes=list(t.encode())) for t, v in top])


# ---------------------------------------------------------------------------------------
# OpenAI chat: complete responses and streams (openai SDK types)
# ---------------------------------------------------------------------------------------


def test_openai_chat_completion_sdk_shape(tmp_path):
    items = [token_logprob("Hi", -0.2, [("Hi", -0.2), ("Hello", -1.9)]),
             token_logprob("!", -1.2, [(".", -0.6), ("!", -1.2), ("?", -2.0)])]
    resp = ChatCompletion(
        id="chatcmpl-1", created=0, model="m", object="chat.completion",
        choices=[Choice(index=0, finish_reason="stop",
                        message=ChatCompletionMessage(role="assistant", content="Hi!"),
                        logprobs=ChoiceLogprobs(content=items))])
    ds = import_logprobs(write_lines(tmp_path / "chat.jsonl", [resp.model_dump_json()]))
    assert_rows(ds, [top_probs([-0.2, -1.9]), top_probs([-0.6, -1.2, -2.0])])
    assert ds["sampled_rank"].values.tolist() == [0, 1]
    assert ds["sequence"].values.tolist() == [0, 0]


def chat_chunk(cid: str, index: int, *, content: list | None = None, role: bool = False,
               finish: str | None = None) -> ChatCompletionChunk:
    delta = ChoiceDelta(role="assistant", content="") if role else ChoiceDelta(content="x")
    return ChatCompletionChunk(
        id=cid, created=0, model="m", object="chat.completion.chunk",
        choices=[ChunkChoice(index=index, delta=delta, finish_reason=finish,
                             logprobs=None if content is None else ChunkLogprobs(content=content))])


def test_streamed_n2_choices_and_interleaved_streams_keep_one_sequence_each(tmp_path):
    """Chunks of choices 0 and 1 (n = 2) and of a second request interleave: 3 sequences."""
    a = lambda v: [token_logprob("a", v, [("a", v), ("b", v - 3.0)])]  # noqa: E731
    records = [chat_chunk("A", 0, role=True), chat_chunk("A", 1, role=True),
               chat_chunk("A", 0, content=a(-0.1)), chat_chunk("B", 0, role=True),
               chat_chunk("A", 1, content=a(-0.2)), chat_chunk("B", 0, content=a(-0.3)),
               chat_chunk("A", 0, content=a(-0.4)), chat_chunk("A", 1, content=a(-0.5)),
               chat_chunk("B", 0, content=a(-0.6)),
               chat_chunk("A", 0, finish="stop"), chat_chunk("A", 1, finish="length"),
               chat_chunk("B", 0, finish="stop"),
               ChatCompletionChunk(id="A", created=0, model="m", object="chat.completion.chunk",
                                   choices=[])]                    # include_usage chunk
    ds = import_logprobs(write_lines(tmp_path / "stream.jsonl", sse(records)))
    first = [r[0] for r in rows_of(ds)]
    assert first == pytest.approx([math.exp(v) for v in (-0.1, -0.2, -0.3, -0.4, -0.5, -0.6)])
    seq = ds["sequence"].values.tolist()
    assert seq == [0, 1, 2, 0, 1, 2]


def test_non_streamed_response_without_logprobs_is_refused_with_what_to_request(tmp_path):
    resp = ChatCompletion(
        id="c", created=0, model="m", object="chat.completion",
        choices=[Choice(index=0, finish_reason="stop", logprobs=None,
                        message=ChatCompletionMessage(role="assistant", content="x"))])
    path = write_lines(tmp_path / "nolp.jsonl", [resp.model_dump_json()])
    with pytest.raises(UserError, match=r"nolp\.jsonl:1: choices\[0\]: no 'logprobs' "
                                         r"\(request logprobs=true and top_logprobs=K"):
        import_logprobs(path)


# ---------------------------------------------------------------------------------------
# The sampled token: vLLM lists it first and keeps the first K entries
# (vllm/entrypoints/openai/serving_chat.py @ 99c5632fc2d252a6f25afa76347df392eb898c42,
# _get_top_logprobs: the first top_logprobs items of the position's dict; and
# vllm/v1/engine/logprobs.py @ dfafe710448e80b695513dfbee690b8e0334f230:
# "Sampler puts the sampled logprob in first.")
# ---------------------------------------------------------------------------------------


def vllm_chat(items: list[tuple[str, float, list[tuple[str, float]]]]) -> str:
    """A vLLM chat response: the sampled token's entry first in every top list."""
    content = [token_logprob(tok, lp, top) for tok, lp, top in items]
    return ChatCompletion(
        id="chatcmpl-v", created=0, model="m", object="chat.completion",
        choices=[Choice(index=0, finish_reason="length", logprobs=ChoiceLogprobs(content=content),
                        message=ChatCompletionMessage(role="assistant", content=""))]
    ).model_dump_json()


def test_vllm_top_logprobs_1_at_positive_temperature_is_refused(tmp_path):
    """top_logprobs=1 lists only the sampled token (p = 0.3): its rank is unknown."""
    lp = math.log(0.3)
    path = write_lines(tmp_path / "k1.jsonl", [vllm_chat([("b", lp, [("b", lp)])])])
    with pytest.raises(UserError, match=r"k1\.jsonl:1: choices\[0\]\.logprobs\.content\[0\]: "
                                         r"only the sampled token is listed \(p = 0\.3 <= 0\.5\)"
                                         r".*request top_logprobs >= 2"):
        import_logprobs(path)


def test_a_lone_sampled_token_above_one_half_is_the_top_one(tmp_path):
    lp = math.log(0.8)
    ds = import_logprobs(write_lines(tmp_path / "k1.jsonl",
                                     [vllm_chat([("a", lp, [("a", lp)])])]))
    assert_rows(ds, [[0.8]])
    assert ds["sampled_rank"].values.tolist() == [0]


def test_vllm_sampled_token_outside_the_top_goes_to_the_tail(tmp_path):
    """top_logprobs=3 with the sampled token ranked 5th: [sampled, top0, top1] is listed."""
    ds = import_logprobs(write_lines(tmp_path / "k3.jsonl", [vllm_chat(
        [("s", -4.0, [("s", -4.0), ("t0", -0.4), ("t1", -1.6)]),
         ("t0", -0.3, [("t0", -0.3), ("t1", -1.8), ("t2", -2.5)])])]))
    assert_rows(ds, [top_probs([-0.4, -1.6]), top_probs([-0.3, -1.8, -2.5])])
    assert ds["sampled_rank"].values.tolist() == [-1, 0]
    assert ds["tail_mass"].values[0] == pytest.approx(1 - math.exp(-0.4) - math.exp(-1.6))


def test_openai_top_logprobs_1_listing_another_token_is_a_true_top_one(tmp_path):
    """OpenAI lists the most likely token: a lone entry that is not the sampled one."""
    ds = import_logprobs(write_lines(tmp_path / "oa.jsonl", [vllm_chat(
        [("b", math.log(0.2), [("a", math.log(0.45))])])]))
    assert_rows(ds, [[0.45]])
    assert ds["sampled_rank"].values.tolist() == [-1]


# ---------------------------------------------------------------------------------------
# Legacy completions: echo=true (openai SDK types; SGLang's to_openai_style_logprobs in
# python/sglang/srt/entrypoints/openai/utils.py @ 0101654f9cc8d059f1c0914628f00a8cee65f9e0
# appends None for a position without top log-probabilities)
# ---------------------------------------------------------------------------------------


def test_legacy_completion_with_echo_skips_the_first_prompt_position(tmp_path):
    # The SDK's Logprobs type says float/dict, but the API sends null at the first echoed
    # position; the SDK builds responses with model_construct (no validation), as here.
    lp = Logprobs.model_construct(tokens=["The", " cat", " sat"], token_logprobs=[None, -2.0, -0.5],
                  top_logprobs=[None, {" dog": -1.1, " cat": -2.0, " owl": -3.0},
                                                {" sat": -0.5, " ran": -1.4}],
                  text_offset=[0, 3, 7])
    resp = Completion.model_construct(
        id="cmpl-1", created=0, model="m", object="text_completion",
        choices=[CompletionChoice.model_construct(index=0, text="The cat sat",
                                                  finish_reason="length", logprobs=lp)])
    ds = import_logprobs(write_lines(tmp_path / "echo.jsonl", [resp.model_dump_json()]))
    assert_rows(ds, [top_probs([-1.1, -2.0, -3.0]), top_probs([-0.5, -1.4])])
    assert ds["sampled_rank"].values.tolist() == [1, 0]


def test_a_null_top_list_at_a_scored_position_is_still_an_error(tmp_path):
    lp = Logprobs.model_construct(tokens=["a", "b"], token_logprobs=[-0.1, -0.2],
                                  top_logprobs=[{"a": -0.1, "c": -2.5}, None])
    resp = Completion.model_construct(
        id="c", created=0, model="m", object="text_completion",
        choices=[CompletionChoice.model_construct(index=0, text="ab", finish_reason="length",
                                                  logprobs=lp)])
    path = write_lines(tmp_path / "null.jsonl", [resp.model_dump_json()])
    with pytest.raises(UserError, match=r"null\.jsonl:1: choices\[0\]\.logprobs\.top_logprobs"
                                         r"\[1\]: is null"):
        import_logprobs(path)


def test_sglang_legacy_completions_stream(tmp_path):
    """SGLang streams text_completion chunks of one id, each with its positions."""
    chunks = [{"id": "s1", "object": "text_completion", "created": 0, "model": "m",
               "choices": [{"index": 0, "text": t, "finish_reason": f,
                            "logprobs": {"tokens": [t], "token_logprobs": [v],
                                         "text_offset": [-1], "top_logprobs": [top]}}]}
              for t, v, top, f in [("a", -0.2, {"a": -0.2, "b": -2.0}, None),
                                   ("c", -0.9, {"d": -0.7, "c": -0.9, "e": -3.0}, "length")]]
    ds = import_logprobs(write_lines(tmp_path / "sgl.jsonl", sse(chunks)))
    assert_rows(ds, [top_probs([-0.2, -2.0]), top_probs([-0.7, -0.9, -3.0])])
    assert ds["sampled_rank"].values.tolist() == [0, 1]
    assert ds["sequence"].values.tolist() == [0, 0]


# ---------------------------------------------------------------------------------------
# llama.cpp (tools/server/server-task.cpp @ 00efb3e184262872916bf136b3df63c1822a19bd:
# completion_token_output::probs_vector_to_json, to_json_non_oaicompat of the partial and
# final results, to_json_oaicompat of the partial and final completions results)
# ---------------------------------------------------------------------------------------


def llama_item(token: str, top: list[tuple[str, float]], *, post_sampling: bool = False,
               token_id: int | None = None) -> dict:
    """One completion_probabilities item (probabilities when post_sampling_probs); the
    listed tokens get ids 100, 101, ...; the sampled one the id of its first listing."""
    vkey, lkey = ("prob", "top_probs") if post_sampling else ("logprob", "top_logprobs")
    conv = math.exp if post_sampling else (lambda v: v)
    sampled = dict(top)[token]
    if token_id is None:
        token_id = 100 + [t for t, _ in top].index(token)
    return {"id": token_id, "token": token, "bytes": list(token.encode()), vkey: conv(sampled),
            lkey: [{"id": 100 + j, "token": t, "bytes": list(t.encode()), vkey: conv(v)}
                   for j, (t, v) in enumerate(top)]}


def llama_partial(item: dict, index: int = 0) -> dict:
    return {"index": index, "content": item["token"], "tokens": [1], "stop": False,
            "id_slot": 0, "tokens_predicted": 1, "tokens_evaluated": 3,
            "completion_probabilities": [item]}


def llama_final(index: int = 0, items: list | None = None) -> dict:
    out = {"index": index, "content": "", "tokens": [], "id_slot": 0, "stop": True,
           "model": "m", "tokens_predicted": 2, "tokens_evaluated": 3, "stop_type": "limit",
           "stopping_word": "", "tokens_cached": 4, "timings": {}}
    if items is not None:
        out["completion_probabilities"] = items
    return out


def test_llama_cpp_completion_stream_with_final_stop_chunk(tmp_path):
    first = [llama_item("a", [("a", -0.1), ("b", -2.4)]),
             llama_item("c", [("d", -0.5), ("c", -1.0)])]
    second = [llama_item("e", [("e", -0.05), ("f", LLAMA_LOWEST)])]
    records = ([llama_partial(i) for i in first] + [llama_final()]
               + [llama_partial(i) for i in second] + [llama_final()])
    ds = import_logprobs(write_lines(tmp_path / "llama.jsonl", sse(records)))
    assert_rows(ds, [top_probs([-0.1, -2.4]), top_probs([-0.5, -1.0]),
                                         [math.exp(-0.05)]])
    assert ds["sampled_rank"].values.tolist() == [0, 1, 0]
    assert ds["sequence"].values.tolist() == [0, 0, 1]
    assert ds.attrs["format"] == "llama.cpp-completion"


def test_llama_cpp_non_streamed_response_and_missing_n_probs(tmp_path):
    items = [llama_item("a", [("a", -0.3), ("b", -1.5)])]
    ds = import_logprobs(write_lines(tmp_path / "one.jsonl", [json.dumps(llama_final(0, items))]))
    assert_rows(ds, [top_probs([-0.3, -1.5])])
    path = write_lines(tmp_path / "none.jsonl", [json.dumps(llama_final())])
    with pytest.raises(UserError, match=r"none\.jsonl:1: no 'completion_probabilities' "
                                         r"\(request n_probs=K with K >= 1\)"):
        import_logprobs(path)


def test_llama_cpp_post_sampling_probs(tmp_path):
    """post_sampling_probs: true writes prob/top_probs (probabilities, not logs)."""
    item = llama_item("b", [("a", math.log(0.6)), ("b", math.log(0.3)), ("c", math.log(0.1))],
                      post_sampling=True)
    assert "top_probs" in item and "prob" in item["top_probs"][0]
    ds = import_logprobs(write_lines(tmp_path / "post.jsonl", [json.dumps(llama_final(0, [item]))]))
    assert_rows(ds, [[0.6, 0.3, 0.1]])
    assert ds["sampled_rank"].values.tolist() == [1]
    assert ds["tail_mass"].values[0] == pytest.approx(0.0, abs=1e-12)


def test_llama_cpp_older_probs_form_and_its_repeating_final_chunk(tmp_path):
    """Older servers: items {content, probs: [{tok_str, prob}]}, and a stream's final chunk
    repeats every position (ggerganov/llama.cpp examples/server/server.cpp @
    c92431a0a4643346e3c96a6b971dcadf0d5d4a99: send_partial_response, send_final_response)."""
    old = [{"content": "x", "probs": [{"tok_str": "x", "prob": 0.7}, {"tok_str": "y", "prob": 0.2}]},
           {"content": "w", "probs": [{"tok_str": "z", "prob": 0.5}, {"tok_str": "w", "prob": 0.4}]},
           {"content": "v", "probs": [{"tok_str": "v", "prob": 0.9}, {"tok_str": "u", "prob": 0.05}]}]
    partial = [{"content": it["content"], "stop": False, "slot_id": 0, "multimodal": False,
                "completion_probabilities": [it]} for it in old[:2]]
    final = {"content": "", "slot_id": 0, "stop": True, "model": "m", "tokens_predicted": 3,
             "completion_probabilities": old}   # the third position was never streamed
    ds = import_logprobs(write_lines(tmp_path / "old.jsonl", sse(partial + [final])))
    assert_rows(ds, [[0.7, 0.2], [0.5, 0.4], [0.9, 0.05]])
    assert ds["sampled_rank"].values.tolist() == [0, 1, 0]
    assert ds["sequence"].values.tolist() == [0, 0, 0]


def test_llama_cpp_openai_completions_stream_with_final_null_logprobs(tmp_path):
    """/v1/completions streams text_completion chunks whose logprobs hold chat-style
    content items; the final chunk has "logprobs": null and a finish reason."""
    items = [llama_item("a", [("a", -0.2), ("b", -1.9)]),
             llama_item("b", [("a", -0.9), ("b", -1.0), ("c", -2.0)])]
    chunk = lambda lp, fin: {"choices": [{"text": "t", "index": 0, "logprobs": lp,  # noqa: E731
                                          "finish_reason": fin}],
                             "created": 0, "model": "m", "system_fingerprint": "b1",
                             "object": "text_completion", "id": "cmpl-llama"}
    records = [chunk({"content": [it]}, None) for it in items] + [chunk(None, "length")]
    ds = import_logprobs(write_lines(tmp_path / "v1.jsonl", sse(records)))
    assert_rows(ds, [top_probs([-0.2, -1.9]), top_probs([-0.9, -1.0, -2.0])])
    assert ds["sampled_rank"].values.tolist() == [0, 1]
    assert ds["sequence"].values.tolist() == [0, 0]


def test_every_fixture_kind_in_one_file_keeps_sequences_apart(tmp_path):
    """llama.cpp chunks between OpenAI chunks do not disturb either stream's sequence."""
    a = [token_logprob("a", -0.1, [("a", -0.1), ("b", -2.5)])]
    records = [chat_chunk("A", 0, content=a), llama_partial(llama_item("a", [("a", -0.2), ("b", -2)])),
               chat_chunk("A", 0, content=a), llama_final(), chat_chunk("A", 0, finish="stop")]
    ds = import_logprobs(write_lines(tmp_path / "mix.jsonl", sse(records)))
    assert ds["sequence"].values.tolist() == [0, 1, 0]
    assert np.all(ds["sampled_rank"].values == 0)


def test_llama_cpp_token_ids_place_the_sampled_token_among_equal_texts(tmp_path):
    """Two listed tokens decode to the same text with the same log-probability (byte
    fallback fragments): only the id tells which one was sampled."""
    item = llama_item("\ufffd", [("\ufffd", -1.0), ("\ufffd", -1.0), ("a", -2.0)],
                      token_id=101)
    ds = import_logprobs(write_lines(tmp_path / "ids.jsonl", [json.dumps(llama_final(0, [item]))]))
    assert ds["sampled_rank"].values.tolist() == [1]
