"""The gateway end to end with the official `openai` client: simulated model servers behind it, keys
in a SQLite store, one gateway process started by `gpuplex gateway`."""

from __future__ import annotations

import os
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import openai
import orjson
import pytest
from openai.types.chat import ChatCompletionMessageParam

from gpuplex.core.serve.usage import UsageRecord
from tests.e2e.cli_runs import run_subprocess
from tests.e2e.gateway.stack import Gateway, Stack, free_port, sim_prompt_tokens, stack_in
from tests.services import missing

pytestmark = pytest.mark.lane

SPEC = """
fleet:
  nodes: [{name: n1, gpus: [{model: H100-80GB, count: 2}]}]
tenants:
  - name: acme
    isolation: mps
    requirement: moderate
    workloads:
      - name: chat
        gpu: {memory_gib: 20}
        serve: {model: acme-chat, base_model: llama-8b, accepts_adapters: true, port: {sim_port}}
      - name: embed
        gpu: {memory_gib: 5}
        serve: {model: acme-embed, port: {embed_port}}
  - name: globex
    isolation: mps
    requirement: moderate
    workloads:
      - name: support
        serve: {model: support, lora_of: acme/chat}
      - name: private
        gpu: {memory_gib: 5}
        serve: {model: secret-model, port: {dead_port}}
  - name: limited
    isolation: mps
    requirement: moderate
    rate_limits: {requests_per_min: 2}
    workloads:
      - name: tiny
        serve: {model: tiny, lora_of: acme/chat}
gateway:
  port: {gateway_port}
  # one gateway serves the whole module, and each new key is polled until it works: those polls
  # are failed checks from loopback (the lockout itself is tested in tests/abuse)
  failed_auth_per_min: 10000
  max_body_kib: 16
  body_timeout_s: 1.5
  health_interval_s: 0.5
  backends:
    acme/embed: ["http://127.0.0.1:{sim_port}"]
"""

MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Say something in twenty characters"}
]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    """One stack for the module: its model servers and gateway start once, and each test makes
    its own keys (starting them per test cost most of this module's time)."""
    with stack_in() as made:
        yield made


@pytest.fixture(scope="module")
def gateway(stack: Stack) -> Gateway:
    sim_port = stack.sim(["llama-8b", "acme-embed"], ["globex/support", "limited/tiny"])
    spec = (
        SPEC.replace("{sim_port}", str(sim_port))
        .replace("{embed_port}", str(free_port()))
        .replace("{dead_port}", str(free_port()))
    )
    gateway = stack.gateway(spec)
    gateway.sim_url = f"http://127.0.0.1:{sim_port}"  # type: ignore[attr-defined]
    return gateway


Connect = Callable[[str], openai.OpenAI]


@pytest.fixture
def connect(gateway: Gateway) -> Iterator[Connect]:
    """openai clients for the gateway, closed after the test."""
    made: list[openai.OpenAI] = []

    def client(key: str) -> openai.OpenAI:
        made.append(
            openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0, timeout=10)
        )
        return made[-1]

    yield client
    for client_made in made:
        client_made.close()


def test_chat_completions_embeddings_and_streaming(
    stack: Stack, gateway: Gateway, connect: Connect
) -> None:
    api = connect(stack.key("acme"))
    prompt = sim_prompt_tokens(gateway.sim_url, {"model": "llama-8b", "messages": MESSAGES})  # type: ignore[attr-defined]
    chat = api.chat.completions.create(model="acme-chat", messages=MESSAGES, max_tokens=5)
    assert chat.usage is not None
    assert (chat.usage.prompt_tokens, chat.usage.completion_tokens) == (prompt, 5)
    assert chat.choices[0].message.content
    completion = api.completions.create(model="acme-chat", prompt="abcdefgh", max_tokens=3)
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 3
    embedding = api.embeddings.create(model="acme-embed", input=["one", "two"])
    assert len(embedding.data) == 2
    chunks = list(
        api.chat.completions.create(model="acme-chat", messages=MESSAGES, max_tokens=7, stream=True)
    )
    tokens = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(tokens) == 7  # one event per generated token
    models = [m.id for m in api.models.list()]
    assert models == ["acme-chat", "acme-embed"]


def test_usage_records_reach_the_store(stack: Stack, gateway: Gateway, connect: Connect) -> None:
    key = stack.key("acme")
    prefix = key.split("_")[1]
    api = connect(key)
    prompt = sim_prompt_tokens(gateway.sim_url, {"model": "llama-8b", "messages": MESSAGES})  # type: ignore[attr-defined]
    api.chat.completions.create(model="acme-chat", messages=MESSAGES, max_tokens=4)
    list(
        api.chat.completions.create(model="acme-chat", messages=MESSAGES, max_tokens=6, stream=True)
    )

    def own() -> list[UsageRecord]:  # the module's gateway serves other tests' keys too
        return [r for r in stack.usage().records(tenant="acme") if r.key_prefix == prefix]

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(own()) < 2:
        time.sleep(0.2)
    records = sorted(own(), key=lambda r: r.started_at)
    assert [(r.status, r.prompt_tokens, r.completion_tokens, r.stream) for r in records] == [
        (200, prompt, 4, False),
        (200, prompt, 6, True),
    ]


def test_lora_adapter_gets_the_base_with_only_the_model_and_the_token_limit_rewritten(
    stack: Stack, gateway: Gateway, connect: Connect
) -> None:
    api = connect(stack.key("globex"))
    api.chat.completions.create(
        model="support", messages=MESSAGES, max_tokens=2, temperature=0.25, user="u-1"
    )
    seen = httpx.get(f"{gateway.sim_url}/sim/last-request").json()  # type: ignore[attr-defined]
    assert seen == {
        "model": "globex/support",
        "messages": MESSAGES,
        "max_tokens": 2,
        "max_completion_tokens": 2,  # the one budget, in both fields a server may read
        "temperature": 0.25,
    }  # `user` is dropped: an end-user id changes nothing a server generates


def test_wrong_and_revoked_keys_get_401(stack: Stack, gateway: Gateway, connect: Connect) -> None:
    with pytest.raises(openai.AuthenticationError):
        connect("gpx_00000000_" + "x" * 43).models.list()
    with pytest.raises(openai.AuthenticationError):
        connect("not-a-key").models.list()
    key = stack.key("acme")
    api = connect(key)
    assert api.models.list().data
    prefix = key.split("_")[1]
    revoke = subprocess.run(  # noqa: S603 - our own CLI
        [sys.executable, "-m", "gpuplex.cli", "keys", "revoke", prefix, "--store", stack.store_url],
        capture_output=True,
        check=True,
    )
    revoked_at = time.monotonic()
    assert prefix in revoke.stdout.decode() + revoke.stderr.decode()
    last_accepted_at = revoked_at  # when the last request the key still passed was sent
    while True:
        sent_at = time.monotonic()
        try:
            api.models.list()
        except openai.AuthenticationError:
            break
        last_accepted_at = sent_at
        time.sleep(0.02)
    assert last_accepted_at - revoked_at <= 1.0


def test_another_tenants_model_is_not_found_without_a_hint(
    stack: Stack, gateway: Gateway, connect: Connect
) -> None:
    api = connect(stack.key("acme"))
    with pytest.raises(openai.NotFoundError) as other:
        api.chat.completions.create(model="secret-model", messages=MESSAGES)
    with pytest.raises(openai.NotFoundError) as missing:
        api.chat.completions.create(model="no-such-model", messages=MESSAGES)
    assert other.value.body == {  # the same answer as for a model that does not exist
        **missing.value.body,  # type: ignore[dict-item]
        "message": "The model `secret-model` does not exist or you do not have access to it.",
    }
    scoped = connect(stack.key("acme", models=["acme-embed"]))
    assert [m.id for m in scoped.models.list()] == ["acme-embed"]
    with pytest.raises(openai.NotFoundError):
        scoped.chat.completions.create(model="acme-chat", messages=MESSAGES)


def test_over_the_limit_gets_429_with_retry_after(
    stack: Stack, gateway: Gateway, connect: Connect
) -> None:
    api = connect(stack.key("limited"))
    for _ in range(2):
        api.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=1)
    with pytest.raises(openai.RateLimitError) as refused:
        api.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=1)
    retry_after = int(refused.value.response.headers["retry-after"])
    assert 1 <= retry_after <= 60
    assert refused.value.code == "rate_limit_exceeded"


def test_a_dead_backend_fails_only_its_own_tenants(
    stack: Stack, gateway: Gateway, connect: Connect
) -> None:
    with pytest.raises(openai.InternalServerError) as dead:
        connect(stack.key("globex")).chat.completions.create(
            model="secret-model", messages=MESSAGES
        )
    assert dead.value.status_code == 503
    ok = connect(stack.key("acme")).chat.completions.create(
        model="acme-chat", messages=MESSAGES, max_tokens=1
    )
    assert ok.choices


def _post(gateway: Gateway, key: str, body: bytes) -> httpx.Response:
    return httpx.post(
        f"{gateway.url}/v1/chat/completions",
        content=body,
        headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
        timeout=10,
    )


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        (b"[1, 2]", 400, "invalid_request"),
        (b'{"model": 7, "messages": []}', 400, "invalid_request"),
        (
            b'{"model": "acme-chat", "messages": [{"content": "x"}], "max_tokens": "9"}',
            400,
            "invalid_request",
        ),
        (
            orjson.dumps({"model": "acme-chat", "messages": [{"content": "x" * 20_000}]}),
            413,
            "request_too_large",
        ),
    ],
)
def test_bad_bodies_get_a_json_error(
    stack: Stack, gateway: Gateway, body: bytes, status: int, code: str
) -> None:
    reply = _post(gateway, stack.key("acme"), body)
    assert reply.status_code == status
    assert reply.json()["error"]["code"] == code


def test_a_trickled_body_times_out_while_everyone_else_is_served(
    stack: Stack, gateway: Gateway
) -> None:
    key = stack.key("acme")
    answer: list[bytes] = []

    def trickle() -> None:
        """One byte every 0.1 s: each arrives in time, the whole body never does."""
        with socket.create_connection(("127.0.0.1", gateway.port)) as sock:
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                + f"Authorization: Bearer {key}\r\n".encode()
                + b"Content-Type: application/json\r\nContent-Length: 500\r\n\r\n{"
            )
            for _ in range(60):
                readable, _, _ = select.select([sock], [], [], 0.1)
                if readable:  # the whole answer: its head and body may come in separate reads
                    sock.settimeout(5)
                    while chunk := sock.recv(65536):
                        answer.append(chunk)
                        if b"request_timeout" in b"".join(answer):
                            break
                    return
                sock.sendall(b" ")

    thread = threading.Thread(target=trickle)
    thread.start()
    served = 0
    while thread.is_alive():
        reply = _post(
            gateway,
            key,
            orjson.dumps({"model": "acme-chat", "messages": MESSAGES, "max_tokens": 1}),
        )
        assert reply.status_code == 200
        served += 1
    thread.join()
    assert served > 3
    assert answer
    whole = b"".join(answer)
    head = whole.split(b"\r\n", 1)[0]
    assert b" 408 " in head
    assert b"request_timeout" in whole


def test_metrics_are_served_with_the_metrics_token(
    stack: Stack, gateway: Gateway, connect: Connect
) -> None:
    connect(stack.key("acme")).chat.completions.create(
        model="acme-chat", messages=MESSAGES, max_tokens=1
    )
    text = gateway.metrics()
    assert 'gpuplex_gateway_requests_total{status="200",tenant="acme"}' in text
    assert "gpuplex_gateway_queue_wait_seconds_bucket" in text
    promtool = shutil.which("promtool")
    if promtool is None:
        missing("promtool (Debian package prometheus)")
    else:
        checked = subprocess.run(  # noqa: S603
            [promtool, "check", "metrics"], input=text, capture_output=True, text=True
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_an_expired_key_gets_401(stack: Stack, gateway: Gateway, connect: Connect) -> None:
    key = stack.key("acme", expires_at=datetime.now(UTC) + timedelta(seconds=1.5))
    api = connect(key)
    assert api.models.list().data
    time.sleep(1.6)
    with pytest.raises(openai.AuthenticationError):
        api.models.list()


def one_model_spec(model: str, port: int, tenant: str = "", gateway: str = "") -> str:
    """Tenant acme serving one model on the simulated server at `port`; `tenant` and `gateway` add
    a line to the tenant and to the gateway section. `{gateway_port}` is left for the stack."""
    return f"""
fleet:
  nodes: [{{name: n1, gpus: [{{model: H100-80GB, count: 1}}]}}]
tenants:
  - name: acme
    isolation: mps
    requirement: moderate
    {tenant}
    workloads:
      - name: {model}
        gpu: {{memory_gib: 10}}
        serve: {{model: {model}, port: {port}}}
gateway:
  port: {{gateway_port}}
  {gateway}
"""


def test_a_model_server_slower_than_the_timeout_gets_504(stack: Stack) -> None:
    port = stack.sim(["slow"], decode_ms_per_token=100.0)
    gateway = stack.gateway(
        one_model_spec("slow", port, gateway="upstream_timeout_s: 0.5"), name="slow"
    )
    with openai.OpenAI(
        base_url=f"{gateway.url}/v1", api_key=stack.key("acme"), max_retries=0
    ) as api:
        with pytest.raises(openai.APIStatusError) as slow:
            api.chat.completions.create(model="slow", messages=MESSAGES, max_tokens=20)
        assert slow.value.status_code == 504
        assert slow.value.code == "upstream_timeout"
        fast = api.chat.completions.create(model="slow", messages=MESSAGES, max_tokens=2)
        assert fast.choices


def test_the_gateway_refuses_to_run_as_root(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can check that root is refused")
    spec = tmp_path / "g.yaml"
    spec.write_text("fleet: {nodes: [{name: n, gpus: [{model: L4}]}]}\n")
    refused = run_subprocess("gateway", "--config", spec, "--store", f"sqlite:///{tmp_path}/s.db")
    assert refused.exit_code == 2
    assert "never runs as root" in refused.stderr
    assert "Traceback" not in refused.output


def test_an_unreachable_redis_fails_closed_with_503(stack: Stack) -> None:
    port = stack.sim(["m"])
    spec = one_model_spec(
        "m", port, tenant="rate_limits: {requests_per_min: 100}", gateway="limiter: redis"
    )
    gateway = stack.gateway(spec, redis_url=f"redis://127.0.0.1:{free_port()}/0", name="no-redis")
    with (
        openai.OpenAI(
            base_url=f"{gateway.url}/v1", api_key=stack.key("acme"), max_retries=0
        ) as api,
        pytest.raises(openai.APIStatusError) as refused,
    ):
        api.chat.completions.create(model="m", messages=MESSAGES, max_tokens=1)
    assert refused.value.status_code == 503
    assert refused.value.code == "limiter_unavailable"
    assert "Traceback" not in gateway.log()
