"""The gateway decides a request's completion budget once and forwards exactly that: every input
form counts, `n`/`best_of` multiply, and whichever field a server prefers says the same number."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from gpuplex.core.serve.inference import (
    BadRequest,
    Endpoint,
    InferenceRequest,
    forwarded_body,
    read_request,
)
from gpuplex.core.serve.tokens import (
    IMAGE_PART_TOKENS,
    PromptOverhead,
    chat_prompt_tokens,
    completion_prompt_tokens,
    text_tokens,
)
from gpuplex.sim.model_requests import GenerationRequest, ServedModels, parse_request
from gpuplex.sim.model_tokenizer import sim_tokenizer

USER = [{"role": "user", "content": "abcd"}]
NO_OVERHEAD = PromptOverhead(per_message=0, per_request=0)


def ok(endpoint: Endpoint, body: dict[str, object], cap: int | None = None) -> InferenceRequest:
    request = read_request(endpoint, body, 512, cap, NO_OVERHEAD)
    assert isinstance(request, InferenceRequest), request
    return request


def prompt_tokens(body: dict[str, object]) -> int:
    if "messages" in body:
        return chat_prompt_tokens(body, NO_OVERHEAD)
    return completion_prompt_tokens(body, "prompt" if "prompt" in body else "input", NO_OVERHEAD)


def test_max_completion_tokens_wins_over_max_tokens_as_in_vllm() -> None:
    body = {"model": "m", "messages": USER, "max_completion_tokens": 2500, "max_tokens": 1}
    request = ok(Endpoint.CHAT, body)
    assert request.max_tokens == 2500
    assert forwarded_body(body, request, "m") == {**body, "max_tokens": 2500}
    streamed = {**body, "stream": True}
    assert forwarded_body(streamed, ok(Endpoint.CHAT, streamed), "up")["stream_options"] == {
        "include_usage": True  # always asked of the server; hidden from this client
    }


def test_an_omitted_limit_is_the_default_lowered_to_fit_the_callers_limit_and_is_forwarded() -> (
    None
):
    body: dict[str, object] = {"model": "m", "messages": USER}
    assert ok(Endpoint.CHAT, body).max_tokens == 512
    capped = ok(Endpoint.CHAT, body, cap=300)
    assert capped.max_tokens == 292  # 8 prompt tokens ("abcd" and "user") + 292 fit 300
    forwarded = forwarded_body(body, capped, "m")
    assert (forwarded["max_tokens"], forwarded["max_completion_tokens"]) == (292, 292)


def test_completions_forward_max_tokens_only_the_one_field_vllm_reads_there() -> None:
    body = {"model": "m", "prompt": "abcd", "max_completion_tokens": 7}
    request = ok(Endpoint.COMPLETIONS, body)
    assert forwarded_body(body, request, "m") == {"model": "m", "prompt": "abcd", "max_tokens": 7}
    exact = {"model": "m", "prompt": "abcd", "max_tokens": 7, "user": "u-1", "stream": False}
    assert forwarded_body(exact, ok(Endpoint.COMPLETIONS, exact), "up") == {
        "model": "up",
        "prompt": "abcd",
        "max_tokens": 7,
        "stream": False,
    }  # `user` is dropped: it changes nothing a server generates


def test_n_and_best_of_multiply_the_budget() -> None:
    chat = ok(Endpoint.CHAT, {"model": "m", "messages": USER, "max_tokens": 10, "n": 4})
    assert (chat.completion_budget, chat.reserved_tokens) == (40, 48)
    body = {"model": "m", "prompt": "abcd", "max_tokens": 10, "n": 2, "best_of": 5}
    assert ok(Endpoint.COMPLETIONS, body).completion_budget == 50


def test_a_list_of_prompts_reserves_every_prompts_completions() -> None:
    body = {"model": "m", "prompt": ["a", "b", "c"], "max_tokens": 10, "n": 2}
    request = ok(Endpoint.COMPLETIONS, body)
    assert (request.prompts, request.completion_budget) == (3, 60)
    ids = {"model": "m", "prompt": [[1, 2], [3]], "max_tokens": 10}
    assert ok(Endpoint.COMPLETIONS, ids).completion_budget == 20
    one = {"model": "m", "prompt": [1, 2, 3], "max_tokens": 10}
    assert ok(Endpoint.COMPLETIONS, one).completion_budget == 10  # one token-id prompt
    capped = read_request(Endpoint.COMPLETIONS, {**body, "max_tokens": None}, 512, 100, NO_OVERHEAD)
    assert isinstance(capped, InferenceRequest)
    assert capped.reserved_tokens <= 100


@pytest.mark.parametrize(
    ("endpoint", "body", "param"),
    [
        (Endpoint.CHAT, {"chat_template": "{{ x }}"}, "chat_template"),
        (Endpoint.CHAT, {"chat_template_kwargs": {}}, "chat_template_kwargs"),
        (Endpoint.CHAT, {"lora_request": {"lora_path": "/x"}}, "lora_request"),
        (Endpoint.CHAT, {"priority": -100}, "priority"),
        (Endpoint.CHAT, {"request_id": "other-tenants-id"}, "request_id"),
        (Endpoint.CHAT, {"min_tokens": 500}, "min_tokens"),
        (Endpoint.CHAT, {"ignore_eos": True}, "ignore_eos"),
        (
            Endpoint.CHAT,
            {"stream_options": {"continuous_usage_stats": True}},
            "stream_options.continuous_usage_stats",
        ),
        (Endpoint.CHAT, {"messages": [{"role": "user", "content": "", "x": 1}]}, "messages[0].x"),
        (Endpoint.COMPLETIONS, {"prompt": "a", "messages": USER}, "messages"),
        (Endpoint.EMBEDDINGS, {"input": "a", "messages": USER}, "messages"),
        (Endpoint.EMBEDDINGS, {"input": "a", "prompt": "a" * 1000}, "prompt"),
        (Endpoint.COMPLETIONS, {"prompt": "a", "prompt_logprobs": 20}, "prompt_logprobs"),
    ],
)
def test_fields_the_gateway_does_not_forward_are_refused_by_name(
    endpoint: Endpoint, body: dict[str, object], param: str
) -> None:
    base: dict[str, object] = (
        {"model": "m", "messages": USER} if endpoint is Endpoint.CHAT else {"model": "m"}
    )
    refused = read_request(endpoint, {**base, **body}, 16)
    assert isinstance(refused, BadRequest)
    assert (refused.param, refused.unsupported) == (param, True)
    assert param in refused.message


def test_a_role_outside_the_chat_api_is_refused() -> None:
    huge_role = {"model": "m", "messages": [{"role": "x" * 100_000, "content": ""}]}
    refused = read_request(Endpoint.CHAT, huge_role, 16)
    assert isinstance(refused, BadRequest)
    assert refused.param == "messages[0].role"


@pytest.mark.parametrize(
    ("endpoint", "body", "param"),
    [
        (Endpoint.CHAT, {"model": "m", "messages": USER, "n": 0}, "n"),
        (Endpoint.CHAT, {"model": "m", "messages": USER, "n": 129}, "n"),
        (Endpoint.CHAT, {"model": "m", "messages": USER, "best_of": 2}, "best_of"),
        (Endpoint.COMPLETIONS, {"model": "m", "prompt": "a", "n": 3, "best_of": 2}, "best_of"),
        (
            Endpoint.CHAT,
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "x"}]}]},
            "messages",
        ),
        (
            Endpoint.CHAT,
            {"model": "m", "messages": [{"role": "user", "content": ["text"]}]},
            "messages",
        ),
        (Endpoint.COMPLETIONS, {"model": "m", "prompt": [1, "a"]}, "prompt"),
        (Endpoint.EMBEDDINGS, {"model": "m", "input": [[1], []]}, "input"),
    ],
)
def test_uncountable_requests_are_refused_naming_the_field(
    endpoint: Endpoint, body: dict[str, object], param: str
) -> None:
    refused = read_request(endpoint, body, 16)
    assert isinstance(refused, BadRequest)
    assert refused.param == param


def test_every_input_form_counts() -> None:
    assert prompt_tokens({"prompt": [1] * 100_000}) == 100_000
    assert prompt_tokens({"prompt": [[1, 2], [3]]}) == 3
    assert prompt_tokens({"input": [7] * 50}) == 50
    assert prompt_tokens({"prompt": "abcd", "suffix": "abcdefgh"}) == 12
    parts = [{"type": "text", "text": "abcd"}, {"type": "image_url", "image_url": {"url": "x"}}]
    assert (
        prompt_tokens({"messages": [{"role": "user", "content": parts}]})
        == 4 + 4 + IMAGE_PART_TOKENS  # "abcd", "user"
    )
    tools = [{"type": "function", "function": {"name": "f", "description": "d" * 400}}]
    assert prompt_tokens({"messages": USER, "tools": tools}) > 100
    call = {"role": "assistant", "tool_calls": [{"function": {"arguments": "x" * 400}}]}
    assert prompt_tokens({"messages": [call]}) > 100
    assert text_tokens("日本語") == 9  # UTF-8 bytes: no tokenizer spends less than one a token


bodies = st.fixed_dictionaries(
    {"model": st.just("m"), "messages": st.just(USER)},
    optional={
        "max_tokens": st.integers(1, 5000),
        "max_completion_tokens": st.integers(1, 5000),
        "n": st.integers(1, 8),
    },
)


@given(body=bodies, cap=st.none() | st.integers(2, 20_000))
def test_the_simulated_vllm_generates_exactly_the_budget_the_gateway_reserved(
    body: dict[str, object], cap: int | None
) -> None:
    request = read_request(Endpoint.CHAT, body, 512, cap)
    assert isinstance(request, InferenceRequest)
    forwarded = forwarded_body(body, request, "m")
    served = ServedModels(bases=("m",), max_model_len=10_000)  # room for any budget drawn
    generated = parse_request(Endpoint.CHAT, forwarded, served, sim_tokenizer())
    assert isinstance(generated, GenerationRequest)
    assert generated.generated_tokens == request.completion_budget
    assert generated.prompt_tokens <= request.prompt_tokens  # a real tokenizer, within the bound
