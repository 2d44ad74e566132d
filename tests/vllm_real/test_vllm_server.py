"""What the real vLLM server of the `vllm` fixture answers: the facts that the gateway's tests, its
test double (gpuplex sim model) and the benchmark build on. Each one is asked of the running server,
so a vLLM upgrade that changes one fails here first."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import httpx
import pytest

from tests.vllm_real.server import BASE_NAME, VllmServer

MESSAGES = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "Say something short about GPUs."},
]
PROMPT = "def fibonacci(n):"


def post(server: VllmServer, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=60)


def chat(server: VllmServer, model: str, **extra: Any) -> dict[str, Any]:
    body = {"model": model, "messages": MESSAGES, "max_tokens": 16, "temperature": 0} | extra
    reply = post(server, "/v1/chat/completions", body)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def events(server: VllmServer, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON events of a streamed chat completion, having checked that `[DONE]` ends it."""
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=60) as reply:
        assert reply.status_code == 200
        data = [line[len("data: ") :] for line in reply.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(item) for item in data[:-1]]


def counter(server: VllmServer, name: str) -> float:
    """The value of counter `name` for the base model (LoRA traffic is counted under it)."""
    text = httpx.get(server.url + "/metrics", timeout=10).text
    prefix = f'{name}{{engine="0",model_name="{BASE_NAME}"}} '
    found = [line for line in text.splitlines() if line.startswith(prefix)]
    assert found, f"no {prefix!r} in /metrics"
    return float(found[0][len(prefix) :])


def test_health_answers_200_with_an_empty_body(vllm: VllmServer) -> None:
    reply = httpx.get(vllm.url + "/health", timeout=10)
    assert (reply.status_code, reply.content) == (200, b"")


def test_models_lists_the_base_and_each_lora_with_the_base_as_its_parent(
    vllm: VllmServer,
) -> None:
    listed = httpx.get(vllm.url + "/v1/models", timeout=10).json()
    parents = {model["id"]: model["parent"] for model in listed["data"]}
    assert parents == {BASE_NAME: None, "lora-a": BASE_NAME, "lora-b": BASE_NAME}
    assert vllm.loras == ("lora-a", "lora-b")


def test_chat_usage_counts_the_prompt_as_vllm_tokenizes_it_chat_template_included(
    vllm: VllmServer,
) -> None:
    tokenized = post(
        vllm, "/tokenize", {"model": BASE_NAME, "messages": MESSAGES, "add_generation_prompt": True}
    ).json()
    contents_only = sum(
        post(vllm, "/tokenize", {"model": BASE_NAME, "prompt": m["content"]}).json()["count"]
        for m in MESSAGES
    )
    answer = chat(vllm, BASE_NAME)
    usage = answer["usage"]
    assert usage["prompt_tokens"] == tokenized["count"]
    # the template's BOS, a role and an end token per message, and the assistant's turn
    assert tokenized["count"] > contents_only
    assert usage["completion_tokens"] == 16
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert answer["model"] == BASE_NAME


def test_completion_usage_counts_the_prompt_as_vllm_tokenizes_it(vllm: VllmServer) -> None:
    tokenized = post(vllm, "/tokenize", {"model": BASE_NAME, "prompt": PROMPT}).json()
    reply = post(
        vllm,
        "/v1/completions",
        {"model": BASE_NAME, "prompt": PROMPT, "max_tokens": 8, "temperature": 0},
    )
    assert reply.status_code == 200, reply.text
    usage = reply.json()["usage"]
    assert usage["prompt_tokens"] == tokenized["count"]
    assert tokenized["tokens"][0] == 0  # BOS, which the tokenizer adds to a plain prompt
    assert (usage["completion_tokens"], usage["total_tokens"]) == (8, tokenized["count"] + 8)


def test_a_stream_carries_usage_only_when_asked_in_a_last_chunk_without_choices(
    vllm: VllmServer,
) -> None:
    body: dict[str, Any] = {"model": BASE_NAME, "messages": MESSAGES, "max_tokens": 6}
    body |= {"temperature": 0, "stream": True}
    plain = events(vllm, body)
    assert plain[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all("usage" not in event or event["usage"] is None for event in plain)
    assert all(event["choices"] for event in plain)

    counted = events(vllm, body | {"stream_options": {"include_usage": True}})
    last = counted[-1]
    assert last["choices"] == []
    prompt = post(
        vllm, "/tokenize", {"model": BASE_NAME, "messages": MESSAGES, "add_generation_prompt": True}
    ).json()["count"]
    assert last["usage"] == {
        "prompt_tokens": prompt,
        "completion_tokens": 6,
        "total_tokens": prompt + 6,
    }
    assert all(event.get("usage") is None for event in counted[:-1])


def test_an_unknown_model_is_a_404_that_names_the_base_only(vllm: VllmServer) -> None:
    reply = post(vllm, "/v1/chat/completions", {"model": "no-such-model", "messages": MESSAGES})
    assert reply.status_code == 404
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"], error["code"]) == ("NotFoundError", "model", 404)
    assert "no-such-model" in error["message"]
    assert BASE_NAME in error["message"]
    assert "lora-a" not in error["message"]


def test_max_tokens_beyond_the_context_is_a_400_on_max_tokens(vllm: VllmServer) -> None:
    reply = post(
        vllm,
        "/v1/chat/completions",
        {"model": BASE_NAME, "messages": MESSAGES, "max_tokens": 10_000},
    )
    assert reply.status_code == 400
    assert reply.json()["error"]["param"] == "max_tokens"


def test_each_lora_answers_otherwise_than_the_base_at_temperature_0(vllm: VllmServer) -> None:
    said = {model: chat(vllm, model) for model in (BASE_NAME, "lora-a", "lora-b")}
    texts = {model: answer["choices"][0]["message"]["content"] for model, answer in said.items()}
    assert len(set(texts.values())) == 3, texts
    assert {answer["model"] for answer in said.values()} == set(said)  # a LoRA's own name
    # greedy decoding repeats itself: the difference is the adapter's, not chance
    assert chat(vllm, "lora-a")["choices"][0]["message"]["content"] == texts["lora-a"]


def test_a_request_id_sent_is_echoed(vllm: VllmServer) -> None:
    reply = httpx.post(
        vllm.url + "/v1/chat/completions",
        json={"model": BASE_NAME, "messages": MESSAGES, "max_tokens": 1},
        headers={"x-request-id": "test-echo-1"},
        timeout=60,
    )
    assert reply.status_code == 200
    assert reply.headers["x-request-id"] == "test-echo-1"


@pytest.mark.parametrize("model", [BASE_NAME, "lora-a"])
def test_metrics_count_prompt_and_generated_tokens_under_the_base_name(
    vllm: VllmServer, model: str
) -> None:
    names = ("vllm:prompt_tokens_total", "vllm:generation_tokens_total")
    before = [counter(vllm, name) for name in names]
    usage = chat(vllm, model)["usage"]
    expected = [before[0] + usage["prompt_tokens"], before[1] + usage["completion_tokens"]]
    deadline = time.monotonic() + 10  # the engine reports its counts a moment after replying
    while (now := [counter(vllm, name) for name in names]) != expected:
        assert time.monotonic() < deadline, f"{names}: {now}, expected {expected}"
        time.sleep(0.2)


def test_an_idle_keep_alive_connection_is_closed_after_5_s(vllm: VllmServer) -> None:
    """VLLM_HTTP_TIMEOUT_KEEP_ALIVE (5 s by default): a client pool that keeps idle connections
    longer (the gateway's keeps them 30 s) meets connections vLLM has closed."""
    host, port = vllm.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        time.sleep(3)
        sock.sendall(f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")  # still open after 3 s idle
        idle_from = time.monotonic()
        assert sock.recv(4096) == b""  # closed by the server, blocking until then
        assert 4 < time.monotonic() - idle_from < 8
