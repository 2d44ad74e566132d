"""What the gateway reads from request bodies and from replies and streams."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, strategies as st

from gpuplex.core.serve.inference import BadRequest, Endpoint, InferenceRequest, read_request
from gpuplex.core.serve.stream_usage import StreamUsage, reply_usage
from gpuplex.core.serve.tokens import prompt_tokens, text_tokens


def test_tokens_are_a_quarter_of_the_characters_rounded_up() -> None:
    assert [text_tokens(t) for t in ("", "a", "abcd", "abcde")] == [0, 1, 1, 2]
    body = {"messages": [{"content": "abcdefgh"}, {"content": [{"type": "text", "text": "abc"}]}]}
    assert prompt_tokens(body) == 3
    assert prompt_tokens({"input": ["abcd", "abcd"]}) == 2


def test_a_chat_request_reserves_prompt_plus_max_tokens() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 40}], "max_tokens": 7}
    request = read_request(Endpoint.CHAT, body, default_max_tokens=512)
    assert request == InferenceRequest(Endpoint.CHAT, "m", False, 10, 7)
    assert request.reserved_tokens == 17
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
        (Endpoint.CHAT, {"model": "m", "messages": [{}], "max_tokens": True}, "max_tokens"),
        (Endpoint.CHAT, {"model": "m", "messages": [{}], "max_tokens": 0}, "max_tokens"),
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


def test_reply_usage_falls_back_to_the_estimate() -> None:
    assert reply_usage(b'{"usage": {"prompt_tokens": 5, "completion_tokens": 2}}', 1) == (5, 2)
    assert reply_usage(b"not json", 4) == (4, 0)
    assert reply_usage(b'{"usage": {"prompt_tokens": "5"}}', 4) == (4, 0)


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
