"""What the gateway reads from request bodies and from replies and streams."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, strategies as st

from gpuplex.core.serve.inference import BadRequest, Endpoint, InferenceRequest, read_request
from gpuplex.core.serve.stream_usage import StreamUsage, reply_usage
from gpuplex.core.serve.tokens import (
    PromptOverhead,
    chat_prompt_tokens,
    completion_prompt_tokens,
    text_tokens,
)

NO_OVERHEAD = PromptOverhead(per_message=0, per_request=0)
USER = [{"role": "user", "content": "x"}]


def test_text_costs_at_most_its_utf8_bytes() -> None:
    assert [text_tokens(t) for t in ("", "a", "abcd", "日本語", "\U0001f600")] == [0, 1, 4, 9, 4]
    body = {"messages": [{"content": "abcdefgh"}, {"content": [{"type": "text", "text": "abc"}]}]}
    assert chat_prompt_tokens(body, NO_OVERHEAD) == 11
    assert completion_prompt_tokens({"input": ["abcd", "abcd"]}, "input", NO_OVERHEAD) == 8


def test_the_template_overhead_is_added_per_message_and_per_request() -> None:
    overhead = PromptOverhead(per_message=8, per_request=100)
    empty = {"role": "user", "content": ""}
    assert chat_prompt_tokens({"messages": [empty] * 1000}, overhead) == 100 + 1000 * (8 + 4)
    prompts = {"prompt": ["a", "b", "c"]}
    assert completion_prompt_tokens(prompts, "prompt", overhead) == 100 + 3 * (8 + 1)


def test_a_chat_request_reserves_prompt_plus_max_tokens() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 40}], "max_tokens": 7}
    request = read_request(Endpoint.CHAT, body, default_max_tokens=512, overhead=NO_OVERHEAD)
    assert request == InferenceRequest(Endpoint.CHAT, "m", False, 44, 7)  # content + "user"
    assert request.reserved_tokens == 51
    default = read_request(Endpoint.COMPLETIONS, {"model": "m", "prompt": "abcd"}, 512)
    assert isinstance(default, InferenceRequest)
    assert default.max_tokens == 512


@pytest.mark.parametrize(
    ("endpoint", "body", "param"),
    [
        (Endpoint.CHAT, [], None),
        (Endpoint.CHAT, {"messages": [{"content": "x"}]}, "model"),
        (Endpoint.CHAT, {"model": 3, "messages": [{}]}, "model"),
        (Endpoint.CHAT, {"model": "m", "messages": "hi"}, "messages"),
        (Endpoint.CHAT, {"model": "m", "messages": ["hi"]}, "messages"),
        (Endpoint.CHAT, {"model": "m", "messages": [{}], "stream": "yes"}, "stream"),
        (Endpoint.CHAT, {"model": "m", "messages": [{}]}, "messages[0].role"),
        (Endpoint.CHAT, {"model": "m", "messages": USER, "max_tokens": True}, "max_tokens"),
        (Endpoint.CHAT, {"model": "m", "messages": USER, "max_tokens": 0}, "max_tokens"),
        (Endpoint.COMPLETIONS, {"model": "m", "prompt": 5}, "prompt"),
        (Endpoint.EMBEDDINGS, {"model": "m", "input": []}, "input"),
    ],
)
def test_bad_bodies_name_the_field(endpoint: Endpoint, body: object, param: str | None) -> None:
    result = read_request(endpoint, body, 16)
    assert isinstance(result, BadRequest)
    assert result.param == param


def _event(value: object) -> bytes:
    return b"data: " + orjson.dumps(value) + b"\n\n"


def test_stream_tokens_are_counted_across_chunk_boundaries() -> None:
    stream = b"".join(
        [_event({"choices": [{"delta": {"content": "tok "}}]}) for _ in range(5)]
        + [b"data: [DONE]\n\n"]
    )
    usage = StreamUsage()
    done = [usage.feed(stream[i : i + 7]) for i in range(0, len(stream), 7)]
    assert done.count(True) == 1
    assert done[-1]
    assert usage.tokens(prompt_estimate=3) == (3, 5)


def test_stream_usage_chunk_wins_over_counting() -> None:
    usage = StreamUsage()
    usage.feed(_event({"choices": [{"delta": {"content": "tok "}}]}))
    usage.feed(_event({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}))
    assert usage.tokens(prompt_estimate=3) == (9, 4)


def test_reply_usage_is_the_servers_count_or_none() -> None:
    assert reply_usage(b'{"usage": {"prompt_tokens": 5, "completion_tokens": 2}}') == (5, 2)
    assert reply_usage(b"not json") is None
    assert reply_usage(b'{"usage": {"prompt_tokens": "5"}}') is None


def test_the_usage_only_chunk_is_marked_and_every_generated_part_counts() -> None:
    usage = StreamUsage()
    usage.read_event(_event({"choices": [{"delta": {"role": "assistant", "content": ""}}]}))
    assert (usage.token_events, usage.completion_tokens, usage.usage_only) == (0, 0, False)
    usage.read_event(_event({"choices": [{"delta": {"reasoning_content": "hmm"}}]}))
    call = {"index": 0, "function": {"name": "get", "arguments": '{"a": 1}'}}
    usage.read_event(_event({"choices": [{"delta": {"tool_calls": [call]}}]}))
    assert usage.token_events == 2
    assert usage.completion_tokens == 1 + 1 + 2  # reasoning; name and arguments
    assert not usage.reported
    usage.read_event(_event({"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 9}}))
    assert usage.usage_only
    assert usage.reported
    assert usage.tokens(prompt_estimate=100) == (4, 9)
    usage.read_event(b"data: [DONE]\n\n")
    assert not usage.usage_only


_LINE_ENDS = st.sampled_from([b"\n", b"\r\n", b"\r"])
_DATA = st.sampled_from(
    [
        b"[DONE]",
        b'{"choices":[{"delta":{"content":"hello there"}}]}',
        b'{"choices":[{"text":"caf\\u00e9"}]}',
        b'{"usage":{"prompt_tokens":3,"completion_tokens":9}}',
        b"not json",
        b"",
    ]
)
_LINE = st.tuples(st.sampled_from([b"data: ", b"data:", b": ", b"event: x", b"id: 1"]), _DATA)


@given(lines=st.lists(st.tuples(_LINE, _LINE_ENDS), min_size=1, max_size=3), end=_LINE_ENDS)
def test_the_one_line_fast_path_counts_as_reading_line_by_line(
    lines: list[tuple[tuple[bytes, bytes], bytes]], end: bytes
) -> None:
    event = b"".join(field + data + ending for (field, data), ending in lines) + end
    fast, slow = StreamUsage(), StreamUsage()
    assert fast.read_event(event) == slow.read_lines(event)
    assert fast.tokens(0) == slow.tokens(0)
