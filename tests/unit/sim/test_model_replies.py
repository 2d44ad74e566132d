"""What the simulated model server accepts and what it answers, as vLLM 0.32 does: request checks
and errors, token counts by the simulated model's own tokenizer and chat template, a list of
prompts run prompt by prompt, streams, tool calls and reasoning, in reply bodies that the official
`openai` client's own models validate."""

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
from gpuplex.sim.model_errors import ModelErrorReply
from gpuplex.sim.model_replies import (
    completion_reply,
    embedding_vector,
    embeddings_reply,
    models_reply,
)
from gpuplex.sim.model_requests import (
    FinishReason,
    GenerationRequest,
    ServedModels,
    parse_request,
)
from gpuplex.sim.model_stream import StreamEvents
from gpuplex.sim.model_tokenizer import sim_tokenizer

TOKENIZER = sim_tokenizer()
SERVED = ServedModels(
    bases=("base",), adapters=("acme/support",), reasoning=("acme/support",), max_model_len=4096
)
CHAT = {"model": "base", "messages": [{"role": "user", "content": "twelve chars"}]}
#: The chat above as the simulated model's template renders it, counted by its tokenizer.
CHAT_TOKENS = len(TOKENIZER.encode("<s><|user|>\ntwelve chars<|end|>\n<|assistant|>\n"))
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def text_tokens(text: str, bos: bool = True) -> int:
    """A completion prompt's tokens: the text's, after a BOS token."""
    return len(TOKENIZER.encode(text)) + bos


def parse(endpoint: Endpoint, body: object) -> GenerationRequest | ModelErrorReply:
    return parse_request(endpoint, body, SERVED, TOKENIZER)


def ok(endpoint: Endpoint, body: object) -> GenerationRequest:
    request = parse(endpoint, body)
    assert isinstance(request, GenerationRequest), request
    return request


def wire(request: GenerationRequest) -> bytes:
    events = StreamEvents(request, TOKENIZER, "s", 5)
    return events.head() + b"".join(events.step(i) for i in range(request.steps)) + events.end()


def chunks_of(stream: bytes) -> list[dict[str, object]]:
    datas = [e.removeprefix(b"data: ") for e in stream.split(b"\n\n") if e]
    assert datas[-1] == b"[DONE]"
    return [orjson.loads(d) for d in datas[:-1]]


@pytest.mark.parametrize(
    ("endpoint", "body", "status", "param", "kind"),
    [
        (Endpoint.CHAT, [CHAT], 400, "body", "Bad Request"),
        (Endpoint.CHAT, {**CHAT, "model": 7}, 400, "body.model", "Bad Request"),
        (Endpoint.CHAT, {**CHAT, "model": "other"}, 404, "model", "NotFoundError"),
        (Endpoint.CHAT, {"model": "base"}, 400, "body.messages", "Bad Request"),
        (Endpoint.CHAT, {**CHAT, "messages": "hi"}, 400, "body.messages", "Bad Request"),
        (Endpoint.CHAT, {**CHAT, "messages": ["hi"]}, 400, "messages", "BadRequestError"),
        (Endpoint.CHAT, {**CHAT, "max_tokens": 0}, 400, "max_tokens", "BadRequestError"),
        (Endpoint.CHAT, {**CHAT, "max_tokens": -3}, 400, "max_tokens", "BadRequestError"),
        (Endpoint.CHAT, {**CHAT, "max_tokens": 2.5}, 400, "body.max_tokens", "Bad Request"),
        (Endpoint.CHAT, {**CHAT, "max_tokens": True}, 400, "body.max_tokens", "Bad Request"),
        # over the context: refused, naming the field the limit came from
        (Endpoint.CHAT, {**CHAT, "max_tokens": 4097}, 400, "max_tokens", "BadRequestError"),
        (
            Endpoint.CHAT,
            {**CHAT, "max_completion_tokens": 4097},
            400,
            "max_completion_tokens",
            "BadRequestError",
        ),
        (Endpoint.CHAT, {**CHAT, "n": 0}, 400, "n", "BadRequestError"),
        (Endpoint.CHAT, {**CHAT, "stream": "yes"}, 400, "body.stream", "Bad Request"),
        (
            Endpoint.CHAT,
            {**CHAT, "stream_options": True},
            400,
            "body.stream_options",
            "Bad Request",
        ),
        (
            Endpoint.CHAT,
            {**CHAT, "stream_options": {"include_usage": True}},
            400,
            "stream_options",
            "Bad Request",
        ),
        (Endpoint.CHAT, {**CHAT, "tools": []}, 400, "tools", "Bad Request"),
        (Endpoint.CHAT, {**CHAT, "tool_choice": "required"}, 400, "tool_choice", "Bad Request"),
        (
            Endpoint.CHAT,
            {
                **CHAT,
                "tools": TOOLS,
                "tool_choice": {"type": "function", "function": {"name": "x"}},
            },
            400,
            "tool_choice",
            "Bad Request",
        ),
        (Endpoint.COMPLETIONS, {"model": "base"}, 400, "prompt", "Bad Request"),
        (Endpoint.COMPLETIONS, {"model": "base", "prompt": ""}, 400, "prompt", "Bad Request"),
        (
            Endpoint.COMPLETIONS,
            {"model": "base", "prompt": [1, "a"]},
            400,
            "body.prompt",
            "Bad Request",
        ),
        (
            Endpoint.COMPLETIONS,
            {"model": "base", "prompt": [-1]},
            400,
            "body.prompt",
            "Bad Request",
        ),
        (
            Endpoint.COMPLETIONS,
            {"model": "base", "prompt": "x" * 5000},
            400,
            "input_tokens",
            "BadRequestError",
        ),
        (Endpoint.EMBEDDINGS, {"model": "base"}, 400, "body.input", "Bad Request"),
        (Endpoint.EMBEDDINGS, {"model": "base", "input": []}, 400, "body.input", "Bad Request"),
        (
            Endpoint.EMBEDDINGS,
            {"model": "base", "input": "a", "dimensions": 0},
            400,
            "dimensions",
            "BadRequestError",
        ),
        (
            Endpoint.EMBEDDINGS,
            {"model": "base", "input": "a", "encoding_format": "hex"},
            400,
            "body.encoding_format",
            "Bad Request",
        ),
    ],
)
def test_bad_requests_get_vllms_errors(
    endpoint: Endpoint, body: object, status: int, param: str | None, kind: str
) -> None:
    error = parse(endpoint, body)
    assert isinstance(error, ModelErrorReply)
    assert (error.status, error.param) == (status, param)
    wire_error = orjson.loads(error.body())
    assert wire_error == {
        "error": {"message": error.message, "type": kind, "param": param, "code": status}
    }


def test_an_unknown_model_names_the_bases_only_and_unknown_fields_are_ignored() -> None:
    error = parse(Endpoint.CHAT, {**CHAT, "model": "gpt-4"})
    assert isinstance(error, ModelErrorReply)
    assert error.message == "The model `gpt-4` does not exist. Valid aliases: base."
    plain = ok(Endpoint.CHAT, {**CHAT, "max_tokens": 3})
    extra = ok(Endpoint.CHAT, {**CHAT, "max_tokens": 3, "best_of": 4, "frobnicate": {"x": 1}})
    assert extra == plain
    assert ok(Endpoint.CHAT, {"messages": CHAT["messages"]}).model == "base"  # vLLM's default


@pytest.mark.parametrize(
    ("endpoint", "body", "prompt_tokens", "completion_tokens", "finish"),
    [
        # vLLM: a chat request without a limit may fill the context (4096 here)
        (Endpoint.CHAT, CHAT, CHAT_TOKENS, 4096 - CHAT_TOKENS, FinishReason.STOP),
        (
            Endpoint.CHAT,
            {**CHAT, "model": "acme/support", "max_tokens": 5},
            CHAT_TOKENS,
            5,
            "length",
        ),
        (Endpoint.CHAT, {**CHAT, "max_tokens": None}, CHAT_TOKENS, 4096 - CHAT_TOKENS, "stop"),
        (
            Endpoint.CHAT,
            {**CHAT, "max_completion_tokens": 4, "max_tokens": 9},
            CHAT_TOKENS,
            4,
            "length",
        ),
        (
            Endpoint.CHAT,
            {**CHAT, "max_completion_tokens": 9, "max_tokens": 4},
            CHAT_TOKENS,
            9,
            "length",
        ),
        (Endpoint.CHAT, {**CHAT, "max_tokens": 4096}, CHAT_TOKENS, 4096 - CHAT_TOKENS, "length"),
        (
            Endpoint.CHAT,
            {**CHAT, "add_special_tokens": True},
            CHAT_TOKENS + 1,
            4095 - CHAT_TOKENS,
            "stop",
        ),
        # vLLM's completions read max_tokens only: max_completion_tokens is not a field there
        (
            Endpoint.COMPLETIONS,
            {"model": "base", "prompt": "abcd", "max_completion_tokens": 2, "max_tokens": 7},
            text_tokens("abcd"),
            7,
            "length",
        ),
        (
            Endpoint.COMPLETIONS,
            {"model": "base", "prompt": "abcdefgh"},
            text_tokens("abcdefgh"),
            16,
            "stop",
        ),
        (
            Endpoint.COMPLETIONS,
            {"model": "base", "prompt": "abcd", "max_tokens": None},
            text_tokens("abcd"),
            4096 - text_tokens("abcd"),
            "stop",
        ),
        (
            Endpoint.COMPLETIONS,
            {"model": "base", "prompt": "abcd", "add_special_tokens": False},
            text_tokens("abcd", bos=False),
            16,
            "stop",
        ),
        (
            Endpoint.COMPLETIONS,
            {"model": "base", "prompt": [5, 6, 7], "max_tokens": 1},
            3,
            1,
            "length",
        ),
        (
            Endpoint.EMBEDDINGS,
            {"model": "base", "input": ["one", "two"]},
            text_tokens("one") + text_tokens("two"),
            0,
            "stop",
        ),
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
    assert request.prompt_tokens == prompt_tokens
    assert request.prompts[0].completion_tokens == completion_tokens
    assert request.prompts[0].finish_reason == finish


def test_tools_and_every_message_field_the_template_renders_count_in_the_prompt() -> None:
    plain = ok(Endpoint.CHAT, CHAT).prompt_tokens
    with_tools = ok(Endpoint.CHAT, {**CHAT, "tools": TOOLS, "tool_choice": "none"}).prompt_tokens
    tools_text = "<|system|>\n# Tools\n" + orjson.dumps(TOOLS).decode() + "<|end|>\n"
    assert with_tools == plain + len(TOKENIZER.encode(tools_text))
    named = {**CHAT, "messages": [{**CHAT["messages"][0], "name": "x" * 400}]}  # type: ignore[dict-item]
    assert ok(Endpoint.CHAT, named).prompt_tokens == plain  # templates ignore it, as vLLM's does


def test_a_list_of_prompts_runs_prompt_by_prompt() -> None:
    body = {"model": "base", "prompt": ["one two", "x" * 4090], "max_tokens": 10, "n": 2}
    request = ok(Endpoint.COMPLETIONS, body)
    long_tokens = text_tokens("x" * 4090)
    assert [p.prompt_tokens for p in request.prompts] == [text_tokens("one two"), long_tokens]
    # each prompt gets what its own context leaves: the long one is cut to fit
    assert [p.completion_tokens for p in request.prompts] == [10, 4096 - long_tokens]
    reply = Completion.model_validate(orjson.loads(completion_reply(request, TOKENIZER, "x", 1)))
    assert [c.index for c in reply.choices] == [0, 1, 2, 3]  # prompt * n + choice
    cut = 4096 - long_tokens
    assert [TOKENIZER.count(c.text) for c in reply.choices] == [10, 10, cut, cut]
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == text_tokens("one two") + long_tokens  # each prompt once
    assert reply.usage.completion_tokens == 2 * 10 + 2 * (4096 - long_tokens)  # every choice
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    token_arrays = ok(Endpoint.COMPLETIONS, {"model": "base", "prompt": [[5, 6], [7]], "n": 3})
    assert [p.prompt_tokens for p in token_arrays.prompts] == [2, 1]
    assert token_arrays.generated_tokens == 2 * 3 * 16


def test_n_generates_that_many_choices_and_usage_counts_them_all() -> None:
    chat = ok(Endpoint.CHAT, {**CHAT, "n": 3, "max_tokens": 5})
    assert (chat.choices, chat.generated_tokens) == (3, 15)
    reply = orjson.loads(completion_reply(chat, TOKENIZER, "x", 0))
    assert [c["index"] for c in reply["choices"]] == [0, 1, 2]
    assert reply["usage"]["prompt_tokens"] == CHAT_TOKENS  # the prompt is read once
    assert reply["usage"]["completion_tokens"] == 15


def test_chat_reply_has_vllms_fields_and_its_text_counts_as_its_usage() -> None:
    request = ok(Endpoint.CHAT, {**CHAT, "max_tokens": 7})
    body = orjson.loads(completion_reply(request, TOKENIZER, "abc", 1700))
    assert set(body) == {
        "id", "object", "created", "model", "choices", "service_tier", "system_fingerprint",
        "usage", "prompt_logprobs", "prompt_token_ids", "prompt_text", "kv_transfer_params",
        "ec_transfer_params", "metrics",
    }  # fmt: skip
    assert set(body["choices"][0]["message"]) == {
        "role", "content", "refusal", "annotations", "audio", "function_call", "reasoning"
    }  # fmt: skip
    reply = ChatCompletion.model_validate(body)
    assert (reply.id, reply.object, reply.created, reply.model) == (
        "chatcmpl-abc",
        "chat.completion",
        1700,
        "base",
    )
    content = reply.choices[0].message.content
    assert content is not None
    assert TOKENIZER.count(content) == 7
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (CHAT_TOKENS, 7)
    assert reply.usage.total_tokens == CHAT_TOKENS + 7


def test_text_completion_reply_parses() -> None:
    request = ok(Endpoint.COMPLETIONS, {"model": "base", "prompt": "abcd"})
    reply = Completion.model_validate(orjson.loads(completion_reply(request, TOKENIZER, "x", 1)))
    assert reply.id == "cmpl-x"
    assert TOKENIZER.count(reply.choices[0].text) == 16
    assert reply.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("endpoint", [Endpoint.CHAT, Endpoint.COMPLETIONS])
@pytest.mark.parametrize("include_usage", [False, True])
def test_stream_events_parse_and_count(endpoint: Endpoint, include_usage: bool) -> None:
    body: dict[str, object] = {"model": "base", "max_tokens": 3, "stream": True}
    body |= {"messages": CHAT["messages"]} if endpoint is Endpoint.CHAT else {"prompt": "abcd"}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    request = ok(endpoint, body)
    stream = wire(request)
    chunks = chunks_of(stream)
    chat = endpoint is Endpoint.CHAT
    assert len(chunks) == chat + 3 + include_usage  # the role chunk, one per token, usage
    tokens = chunks[chat : chat + 3]
    if chat:
        parsed = [ChatCompletionChunk.model_validate(c) for c in chunks]
        assert parsed[0].choices[0].delta.role == "assistant"
        assert parsed[0].choices[0].delta.content == ""
        text = "".join(c.choices[0].delta.content or "" for c in parsed if c.choices)
    else:  # the client reads these unvalidated: a streamed finish_reason is null until the end
        text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])  # type: ignore[index]
        assert {c["object"] for c in chunks} == {"text_completion"}
    assert TOKENIZER.count(text) == 3
    finishes = [c["choices"][0]["finish_reason"] for c in tokens]  # type: ignore[index]
    assert finishes == [None, None, "length"]  # the last token carries the finish reason
    prompt = request.prompt_tokens
    if include_usage:
        assert chunks[-1]["choices"] == []
        assert chunks[-1]["usage"] == {
            "prompt_tokens": prompt,
            "completion_tokens": 3,
            "total_tokens": prompt + 3,
        }
        assert all("usage" not in c for c in chunks[:-1])  # vLLM: not even a null
    else:
        assert all("usage" not in c for c in chunks)
    counted = StreamUsage()  # the gateway's own reading of the stream finds the server's count
    assert counted.feed(stream)
    if include_usage:
        assert counted.tokens(prompt_estimate=0) == (prompt, 3)


def test_continuous_usage_stats_give_each_chunk_its_choices_running_count() -> None:
    body = {
        "model": "base",
        "prompt": ["abcd", "one two three"],
        "max_tokens": 2,
        "n": 2,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    request = ok(Endpoint.COMPLETIONS, body)
    chunks = chunks_of(wire(request))
    running = [
        (c["choices"][0]["index"], c["usage"]["completion_tokens"], c["usage"]["prompt_tokens"])  # type: ignore[index]
        for c in chunks[:-1]
    ]
    a, b = (p.prompt_tokens for p in request.prompts)
    assert running == [
        (0, 1, a),
        (1, 1, a),
        (2, 1, b),
        (3, 1, b),
        (0, 2, a),
        (1, 2, a),
        (2, 2, b),
        (3, 2, b),
    ]
    assert chunks[-1]["usage"]["completion_tokens"] == 8  # type: ignore[index]


@pytest.mark.parametrize(
    ("tool_choice", "finish"),
    [("required", "tool_calls"), ({"type": "function", "function": {"name": "weather"}}, "stop")],
)
def test_a_forced_tool_call_streams_its_arguments_token_by_token(
    tool_choice: object, finish: str
) -> None:
    body = {**CHAT, "tools": TOOLS, "tool_choice": tool_choice, "stream": True}
    request = ok(Endpoint.CHAT, {**body, "stream_options": {"include_usage": True}})
    chunks = [ChatCompletionChunk.model_validate(c) for c in chunks_of(wire(request))]
    calls = [
        c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls
    ]
    assert calls[0] is not None
    first = calls[0][0]
    assert (first.index, first.type, first.id is not None) == (0, "function", True)
    assert first.function is not None
    assert first.function.name == "weather"
    arguments = "".join(call[0].function.arguments or "" for call in calls if call[0].function)
    assert set(orjson.loads(arguments)) == {"city"}
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.completion_tokens == len(calls) == TOKENIZER.count(arguments)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == finish
    whole = ChatCompletion.model_validate(
        orjson.loads(
            completion_reply(ok(Endpoint.CHAT, {**body, "stream": False}), TOKENIZER, "w", 1)
        )
    )
    message = whole.choices[0].message
    assert message.tool_calls is not None
    assert message.tool_calls[0].function.arguments == arguments  # type: ignore[union-attr]
    assert whole.choices[0].finish_reason == finish


def test_a_tool_call_cut_short_by_max_tokens_finishes_for_length() -> None:
    body = {**CHAT, "tools": TOOLS, "tool_choice": "required", "max_tokens": 2}
    request = ok(Endpoint.CHAT, body)
    assert (request.generated_tokens, request.prompts[0].finish_reason) == (2, "length")
    auto = ok(Endpoint.CHAT, {**CHAT, "tools": TOOLS, "max_tokens": 2})  # the model answers in text
    assert auto.tool_call is None


def test_a_reasoning_model_reasons_before_it_answers_and_counts_both() -> None:
    body = {**CHAT, "model": "acme/support", "max_tokens": 6}
    request = ok(Endpoint.CHAT, body)
    reply = orjson.loads(completion_reply(request, TOKENIZER, "r", 1))
    message = reply["choices"][0]["message"]
    assert TOKENIZER.count(message["reasoning"]) == 3
    assert TOKENIZER.count(message["content"]) == 3
    assert reply["usage"]["completion_tokens"] == 6
    assert reply["usage"]["completion_tokens_details"] == {"reasoning_tokens": 3}
    streamed = chunks_of(wire(ok(Endpoint.CHAT, {**body, "stream": True})))
    deltas = [c["choices"][0]["delta"] for c in streamed[1:]]  # type: ignore[index]
    assert [next(iter(d)) for d in deltas] == ["reasoning"] * 3 + ["content"] * 3
    off = {**body, "chat_template_kwargs": {"enable_thinking": False}}
    assert not ok(Endpoint.CHAT, off).reasoning
    assert not ok(Endpoint.CHAT, {**CHAT, "max_tokens": 6}).reasoning  # not a reasoning model


def test_embeddings_are_deterministic_unit_vectors() -> None:
    request = ok(Endpoint.EMBEDDINGS, {"model": "base", "input": ["one", "two"], "dimensions": 4})
    body = orjson.loads(embeddings_reply(request, "e", 1))
    assert set(body) == {"id", "object", "created", "model", "data", "usage"}
    reply = CreateEmbeddingResponse.model_validate(body)
    assert [d.index for d in reply.data] == [0, 1]
    one, two = (d.embedding for d in reply.data)
    assert one == embedding_vector("one", 4)
    assert one != two
    assert len(one) == 4
    assert math.fsum(x * x for x in one) == pytest.approx(1.0)
    assert reply.usage.prompt_tokens == text_tokens("one") + text_tokens("two")
    assert reply.usage.total_tokens == reply.usage.prompt_tokens


def test_embeddings_in_base64_are_float32_of_the_same_vector() -> None:
    request = ok(
        Endpoint.EMBEDDINGS, {"model": "base", "input": "one", "encoding_format": "base64"}
    )
    data = orjson.loads(embeddings_reply(request, "e", 1))["data"][0]["embedding"]
    decoded = struct.unpack("<8f", base64.b64decode(data))
    assert decoded == pytest.approx(embedding_vector("one", 8), abs=1e-6)


def test_embedding_models_embed_only_and_the_others_do_not_embed() -> None:
    served = ServedModels(bases=("chat",), embedding=("embed",))
    embed = parse_request(Endpoint.EMBEDDINGS, {"model": "embed", "input": "a"}, served, TOKENIZER)
    assert isinstance(embed, GenerationRequest)
    for endpoint, body in [
        (Endpoint.EMBEDDINGS, {"model": "chat", "input": "a"}),
        (Endpoint.CHAT, {"model": "embed", "messages": CHAT["messages"]}),
    ]:
        missing = parse_request(endpoint, body, served, TOKENIZER)
        assert isinstance(missing, ModelErrorReply)
        assert missing.status == 404
        assert orjson.loads(missing.body()) == {"detail": "Not Found"}  # no such route in vLLM


def test_model_list_has_bases_then_adapters_on_the_first_base() -> None:
    listing = orjson.loads(models_reply(["base", "embed"], ["acme/support"], 9, 4096))
    cards = [Model.model_validate(card) for card in listing["data"]]
    assert [c.id for c in cards] == ["base", "embed", "acme/support"]
    assert [card["parent"] for card in listing["data"]] == [None, None, "base"]
    assert [card["max_model_len"] for card in listing["data"]] == [4096, 4096, None]
    assert listing["data"][0]["permission"][0]["object"] == "model_permission"
