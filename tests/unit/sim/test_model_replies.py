"""What the simulated model server accepts and what it answers: request checks, and reply bodies
that the official `openai` client's own models validate."""

from __future__ import annotations

import base64
import math
import struct

import orjson
import pytest
from openai.types import Completion, CreateEmbeddingResponse, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from gpuplex.core.serve.inference import Endpoint
from gpuplex.core.serve.stream_usage import StreamUsage
from gpuplex.core.serve.tokens import text_tokens
from gpuplex.sim.model_replies import (
    completion_reply,
    embedding_vector,
    embeddings_reply,
    models_reply,
    stream_events,
)
from gpuplex.sim.model_requests import (
    ErrorReply,
    FinishReason,
    GenerationRequest,
    parse_request,
)

SERVED = frozenset({"base", "acme/support"})
CHAT = {"model": "base", "messages": [{"role": "user", "content": "twelve chars"}]}


def parse(endpoint: Endpoint, body: object) -> GenerationRequest | ErrorReply:
    return parse_request(endpoint, body, SERVED, default_max_tokens=16, embedding_dim=8)


def ok(endpoint: Endpoint, body: object) -> GenerationRequest:
    request = parse(endpoint, body)
    assert isinstance(request, GenerationRequest), request
    return request


@pytest.mark.parametrize(
    ("endpoint", "body", "status", "param"),
    [
        (Endpoint.CHAT, [CHAT], 400, None),
        (Endpoint.CHAT, "text", 400, None),
        (Endpoint.CHAT, {"messages": CHAT["messages"]}, 400, "model"),
        (Endpoint.CHAT, {**CHAT, "model": 7}, 400, "model"),
        (Endpoint.CHAT, {**CHAT, "model": "other"}, 404, "model"),
        (Endpoint.CHAT, {"model": "base"}, 400, "messages"),
        (Endpoint.CHAT, {**CHAT, "messages": "hi"}, 400, "messages"),
        (Endpoint.CHAT, {**CHAT, "messages": []}, 400, "messages"),
        (Endpoint.CHAT, {**CHAT, "messages": ["hi"]}, 400, "messages"),
        (Endpoint.CHAT, {**CHAT, "max_tokens": 0}, 400, "max_tokens"),
        (Endpoint.CHAT, {**CHAT, "max_tokens": -3}, 400, "max_tokens"),
        (Endpoint.CHAT, {**CHAT, "max_tokens": 2.5}, 400, "max_tokens"),
        (Endpoint.CHAT, {**CHAT, "max_tokens": "5"}, 400, "max_tokens"),
        (Endpoint.CHAT, {**CHAT, "max_tokens": True}, 400, "max_tokens"),
        (Endpoint.CHAT, {**CHAT, "max_tokens": 10**9}, 400, "max_tokens"),
        (Endpoint.CHAT, {**CHAT, "max_completion_tokens": 0}, 400, "max_completion_tokens"),
        (Endpoint.CHAT, {**CHAT, "stream": "yes"}, 400, "stream"),
        (Endpoint.CHAT, {**CHAT, "stream_options": True}, 400, "stream_options"),
        (Endpoint.COMPLETIONS, {"model": "base"}, 400, "prompt"),
        (Endpoint.COMPLETIONS, {"model": "base", "prompt": ""}, 400, "prompt"),
        (Endpoint.COMPLETIONS, {"model": "base", "prompt": [1, "a"]}, 400, "prompt"),
        (Endpoint.COMPLETIONS, {"model": "base", "prompt": {"a": 1}}, 400, "prompt"),
        (Endpoint.EMBEDDINGS, {"model": "base"}, 400, "input"),
        (Endpoint.EMBEDDINGS, {"model": "base", "input": []}, 400, "input"),
        (Endpoint.EMBEDDINGS, {"model": "base", "input": "a", "dimensions": 0}, 400, "dimensions"),
        (
            Endpoint.EMBEDDINGS,
            {"model": "base", "input": "a", "encoding_format": "hex"},
            400,
            "encoding_format",
        ),
    ],
)
def test_bad_requests_get_openai_errors(
    endpoint: Endpoint, body: object, status: int, param: str | None
) -> None:
    error = parse(endpoint, body)
    assert isinstance(error, ErrorReply)
    assert (error.status, error.param) == (status, param)
    wire = orjson.loads(error.body())
    assert set(wire["error"]) == {"message", "type", "param", "code"}
    assert wire["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    ("endpoint", "body", "prompt_tokens", "completion_tokens", "finish"),
    [
        # vLLM: a chat request without a limit may fill the context (4096 here)
        (Endpoint.CHAT, CHAT, 3, 4096 - 3, FinishReason.STOP),
        (Endpoint.CHAT, {**CHAT, "model": "acme/support", "max_tokens": 5}, 3, 5, "length"),
        (Endpoint.CHAT, {**CHAT, "max_tokens": None}, 3, 4096 - 3, FinishReason.STOP),
        (Endpoint.CHAT, {**CHAT, "max_completion_tokens": 4, "max_tokens": 9}, 3, 4, "length"),
        (Endpoint.CHAT, {**CHAT, "max_completion_tokens": 9, "max_tokens": 4}, 3, 9, "length"),
        # vLLM's completions read max_tokens only: max_completion_tokens is not a field there
        (
            Endpoint.COMPLETIONS,
            {"model": "base", "prompt": "abcd", "max_completion_tokens": 2, "max_tokens": 7},
            1,
            7,
            "length",
        ),
        (
            Endpoint.COMPLETIONS,
            {"model": "base", "prompt": "abcd", "max_completion_tokens": 2},
            1,
            16,
            "stop",
        ),
        (Endpoint.COMPLETIONS, {"model": "base", "prompt": "abcdefgh"}, 2, 16, "stop"),
        (Endpoint.COMPLETIONS, {"model": "base", "prompt": ["abcde", "abc"]}, 3, 16, "stop"),
        (
            Endpoint.COMPLETIONS,
            {"model": "base", "prompt": [5, 6, 7], "max_tokens": 1},
            3,
            1,
            "length",
        ),
        (Endpoint.COMPLETIONS, {"model": "base", "prompt": [[5, 6], [7]]}, 3, 16, "stop"),
        (Endpoint.EMBEDDINGS, {"model": "base", "input": ["one", "two"]}, 2, 0, "stop"),
    ],
)
def test_token_counts(
    endpoint: Endpoint,
    body: object,
    prompt_tokens: int,
    completion_tokens: int,
    finish: FinishReason,
) -> None:
    request = ok(endpoint, body)
    assert (request.prompt_tokens, request.completion_tokens) == (prompt_tokens, completion_tokens)
    assert request.finish_reason == finish


def test_n_and_best_of_generate_that_many_sequences_and_usage_counts_them_all() -> None:
    chat = ok(Endpoint.CHAT, {**CHAT, "n": 3, "max_tokens": 5})
    assert (chat.choices, chat.sequences, chat.generated_tokens) == (3, 3, 15)
    reply = orjson.loads(completion_reply(chat, "x", 0))
    assert len(reply["choices"]) == 3
    assert reply["usage"]["completion_tokens"] == 15
    best = ok(Endpoint.COMPLETIONS, {"model": "base", "prompt": "a", "n": 2, "best_of": 4})
    assert (best.choices, best.sequences, best.generated_tokens) == (2, 4, 64)
    assert isinstance(
        parse(Endpoint.COMPLETIONS, {"model": "base", "prompt": "a", "n": 3, "best_of": 2}),
        ErrorReply,
    )
    assert isinstance(parse(Endpoint.CHAT, {**CHAT, "n": 0}), ErrorReply)


def test_chat_reply_parses_and_its_text_counts_as_its_usage() -> None:
    request = ok(Endpoint.CHAT, {**CHAT, "max_tokens": 7})
    reply = ChatCompletion.model_validate(orjson.loads(completion_reply(request, "abc", 1700)))
    assert (reply.id, reply.object, reply.created, reply.model) == (
        "chatcmpl-abc",
        "chat.completion",
        1700,
        "base",
    )
    content = reply.choices[0].message.content
    assert content is not None
    assert text_tokens(content) == 7
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (3, 7)
    assert reply.usage.total_tokens == 10


def test_text_completion_reply_parses() -> None:
    request = ok(Endpoint.COMPLETIONS, {"model": "base", "prompt": "abcd"})
    reply = Completion.model_validate(orjson.loads(completion_reply(request, "x", 1)))
    assert reply.id == "cmpl-x"
    assert text_tokens(reply.choices[0].text) == 16
    assert reply.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("endpoint", [Endpoint.CHAT, Endpoint.COMPLETIONS])
@pytest.mark.parametrize("include_usage", [False, True])
def test_stream_events_parse_and_count(endpoint: Endpoint, include_usage: bool) -> None:
    body: dict[str, object] = {"model": "base", "max_tokens": 3, "stream": True}
    body |= {"messages": CHAT["messages"]} if endpoint is Endpoint.CHAT else {"prompt": "abcd"}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    request = ok(endpoint, body)
    events = stream_events(request, "s", 5)
    wire = events.first + events.token * 2 + events.end
    datas = [e.removeprefix(b"data: ") for e in wire.split(b"\n\n") if e]
    assert datas[-1] == b"[DONE]"
    chunks = [orjson.loads(d) for d in datas[:-1]]
    assert len(chunks) == 3 + 1 + include_usage
    if endpoint is Endpoint.CHAT:
        parsed = [ChatCompletionChunk.model_validate(c) for c in chunks]
        assert parsed[0].choices[0].delta.role == "assistant"
        text = "".join(c.choices[0].delta.content or "" for c in parsed if c.choices)
    else:  # the client reads these unvalidated: a streamed finish_reason is null until the end
        text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
        assert {c["object"] for c in chunks} == {"text_completion"}
    assert text_tokens(text) == 3
    assert chunks[3]["choices"][0]["finish_reason"] == "length"
    prompt = request.prompt_tokens
    if include_usage:
        assert chunks[-1]["choices"] == []
        assert chunks[-1]["usage"] == {
            "prompt_tokens": prompt,
            "completion_tokens": 3,
            "total_tokens": prompt + 3,
        }
    else:
        assert all("usage" not in c for c in chunks)
    counted = StreamUsage()  # the gateway's own count of the stream agrees
    assert counted.feed(wire)
    assert counted.tokens(prompt_estimate=prompt) == (prompt, 3)


def test_embeddings_are_deterministic_unit_vectors() -> None:
    request = ok(Endpoint.EMBEDDINGS, {"model": "base", "input": ["one", "two"], "dimensions": 4})
    reply = CreateEmbeddingResponse.model_validate(orjson.loads(embeddings_reply(request)))
    assert [d.index for d in reply.data] == [0, 1]
    one, two = (d.embedding for d in reply.data)
    assert one == embedding_vector("one", 4)
    assert one != two
    assert len(one) == 4
    assert math.fsum(x * x for x in one) == pytest.approx(1.0)
    assert (reply.usage.prompt_tokens, reply.usage.total_tokens) == (2, 2)


def test_embeddings_in_base64_are_float32_of_the_same_vector() -> None:
    request = ok(
        Endpoint.EMBEDDINGS, {"model": "base", "input": "one", "encoding_format": "base64"}
    )
    data = orjson.loads(embeddings_reply(request))["data"][0]["embedding"]
    decoded = struct.unpack("<8f", base64.b64decode(data))
    assert decoded == pytest.approx(embedding_vector("one", 8), abs=1e-6)


def test_model_list_has_bases_then_adapters_on_the_first_base() -> None:
    listing = orjson.loads(models_reply(["base", "embed"], ["acme/support"], 9))
    cards = [Model.model_validate(card) for card in listing["data"]]
    assert [c.id for c in cards] == ["base", "embed", "acme/support"]
    assert [card["parent"] for card in listing["data"]] == [None, None, "base"]
