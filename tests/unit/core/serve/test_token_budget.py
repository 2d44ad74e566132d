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
from gpuplex.core.serve.tokens import IMAGE_PART_TOKENS, prompt_tokens, text_tokens
from gpuplex.sim.model_requests import GenerationRequest, ServedModels, parse_request
from gpuplex.sim.model_tokenizer import sim_tokenizer

USER = [{"role": "user", "content": "abcd"}]


def ok(endpoint: Endpoint, body: dict[str, object], cap: int | None = None) -> InferenceRequest:
    request = read_request(endpoint, body, 512, cap)
    assert isinstance(request, InferenceRequest), request
    return request


def test_max_completion_tokens_wins_over_max_tokens_as_in_vllm() -> None:
    body = {"model": "m", "messages": USER, "max_completion_tokens": 2500, "max_tokens": 1}
    request = ok(Endpoint.CHAT, body)
    assert request.max_tokens == 2500
    assert forwarded_body(body, request, "m") == {**body, "max_tokens": 2500}


def test_an_omitted_limit_is_the_default_lowered_to_fit_the_callers_limit_and_is_forwarded() -> (
    None
):
    body: dict[str, object] = {"model": "m", "messages": USER}
    assert ok(Endpoint.CHAT, body).max_tokens == 512
    capped = ok(Endpoint.CHAT, body, cap=300)
    assert capped.max_tokens == 299  # 1 prompt token + 299 fit 300
    forwarded = forwarded_body(body, capped, "m")
    assert forwarded is not None
    assert (forwarded["max_tokens"], forwarded["max_completion_tokens"]) == (299, 299)


def test_completions_forward_max_tokens_only_the_one_field_vllm_reads_there() -> None:
    body = {"model": "m", "prompt": "abcd", "max_completion_tokens": 7}
    request = ok(Endpoint.COMPLETIONS, body)
    assert forwarded_body(body, request, "m") == {"model": "m", "prompt": "abcd", "max_tokens": 7}
    exact = {"model": "m", "prompt": "abcd", "max_tokens": 7}
    assert forwarded_body(exact, ok(Endpoint.COMPLETIONS, exact), "m") is None  # no re-encoding


def test_n_and_best_of_multiply_the_budget() -> None:
    chat = ok(Endpoint.CHAT, {"model": "m", "messages": USER, "max_tokens": 10, "n": 4})
    assert (chat.completion_budget, chat.reserved_tokens) == (40, 41)
    body = {"model": "m", "prompt": "abcd", "max_tokens": 10, "n": 2, "best_of": 5}
    assert ok(Endpoint.COMPLETIONS, body).completion_budget == 50


@pytest.mark.parametrize(
    ("endpoint", "body", "param"),
    [
        (Endpoint.CHAT, {"model": "m", "messages": USER, "n": 0}, "n"),
        (Endpoint.CHAT, {"model": "m", "messages": USER, "n": 129}, "n"),
        (Endpoint.CHAT, {"model": "m", "messages": USER, "best_of": 2}, "best_of"),
        (Endpoint.COMPLETIONS, {"model": "m", "prompt": "a", "n": 3, "best_of": 2}, "best_of"),
        (Endpoint.CHAT, {"model": "m", "messages": [{"content": [{"type": "x"}]}]}, "messages"),
        (Endpoint.CHAT, {"model": "m", "messages": [{"content": ["text"]}]}, "messages"),
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
    assert prompt_tokens({"prompt": "abcd", "suffix": "abcdefgh"}) == 3
    parts = [{"type": "text", "text": "abcd"}, {"type": "image_url", "image_url": {"url": "x"}}]
    assert (
        prompt_tokens({"messages": [{"role": "user", "content": parts}]}) == 1 + IMAGE_PART_TOKENS
    )
    tools = [{"type": "function", "function": {"name": "f", "description": "d" * 400}}]
    assert prompt_tokens({"messages": USER, "tools": tools}) > 100
    call = {"role": "assistant", "tool_calls": [{"function": {"arguments": "x" * 400}}]}
    assert prompt_tokens({"messages": [call]}) > 100
    assert text_tokens("日本語") == 3  # one per character outside ASCII


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
    request = ok(Endpoint.CHAT, body, cap)
    forwarded = forwarded_body(body, request, "m") or body
    served = ServedModels(bases=("m",), max_model_len=10_000)  # room for any budget drawn
    generated = parse_request(Endpoint.CHAT, forwarded, served, sim_tokenizer())
    assert isinstance(generated, GenerationRequest)
    assert generated.generated_tokens == request.completion_budget
