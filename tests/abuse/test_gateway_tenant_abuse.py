"""A tenant who reads the docs and tries to get around the gateway's limits, against a real
`gpuplex gateway` process and simulated vLLM-like model servers on loopback. Each test is one
attack from the issue that found it; the simulated servers report what they really read and
generated, so the limits are checked on what was done, not on what the gateway believed."""

from __future__ import annotations

import asyncio
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.e2e.gateway.stack import Gateway, Stack, free_port, stack_in

pytestmark = pytest.mark.lane

SPEC = """
fleet:
  nodes: [{name: n1, gpus: [{model: H100-80GB, count: 2}]}]
tenants:
  - name: base
    isolation: mps
    requirement: moderate
    workloads:
      - name: chat
        gpu: {memory_gib: 20}
        serve: {model: base-chat, base_model: llama-8b, accepts_adapters: true, port: {fast}}
  - {name: tight, isolation: mps, requirement: moderate, rate_limits: {tokens_per_min: 1000},
     workloads: [{name: chat, serve: {model: chat, lora_of: base/chat}}]}
  - {name: ids, isolation: mps, requirement: moderate, rate_limits: {tokens_per_min: 2000},
     workloads: [{name: chat, serve: {model: chat, lora_of: base/chat}}]}
  - {name: omit, isolation: mps, requirement: moderate, rate_limits: {tokens_per_min: 3000},
     workloads: [{name: chat, serve: {model: chat, lora_of: base/chat}}]}
  - {name: mixed, isolation: mps, requirement: moderate, rate_limits: {tokens_per_min: 4000},
     workloads: [{name: chat, serve: {model: chat, lora_of: base/chat}}]}
  - {name: probe, isolation: mps, requirement: moderate,
     workloads: [{name: chat, serve: {model: chat, lora_of: base/chat}}]}
  - name: streamer
    isolation: mps
    requirement: moderate
    rate_limits: {concurrent_requests: 2}
    workloads:
      - name: slow
        gpu: {memory_gib: 5}
        serve: {model: slow, port: {slow}}
  - name: bad
    isolation: mps
    requirement: moderate
    workloads:
      - name: broken
        gpu: {memory_gib: 5}
        serve: {model: broken, port: {broken}}
gateway:
  port: {gateway_port}
  default_max_tokens: 4000
  max_reply_mib: 2
  max_event_kib: 64
  failed_auth_per_min: 30
  health_interval_s: 0.5
"""

ADAPTERS = ["tight/chat", "ids/chat", "omit/chat", "mixed/chat", "probe/chat"]


class BrokenModelServer(socketserver.ThreadingTCPServer):
    """A model server gone wrong: a chat reply of `reply_mib` MiB of JSON, or a stream whose one
    event never ends. Answers /health like a good one, so the gateway keeps sending to it."""

    daemon_threads = True
    allow_reuse_address = True
    reply_mib = 300

    def __init__(self, port: int) -> None:
        super().__init__(("127.0.0.1", port), _BrokenHandler)


class _BrokenHandler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        request_line = self.rfile.readline()
        length = 0
        while (line := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        body = orjson.loads(self.rfile.read(length)) if length else {}
        if b"/health" in request_line:
            self._send(b"application/json", b'{"status":"ok"}', closed=False)
            return
        streaming = bool(body.get("stream"))
        if streaming and body.get("max_tokens") == 3:
            self._break_off()
            return
        head = b"text/event-stream" if streaming else b"application/json"
        self.wfile.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: " + head + b"\r\nConnection: close\r\n\r\n"
        )
        self.wfile.write(b"data: " if streaming else b'{"model":"broken","choices":[{"text":"')
        chunk = b"x" * 65536
        try:
            for _ in range(self.server.reply_mib * 16):  # type: ignore[attr-defined]
                self.wfile.write(chunk)
        except OSError:
            return  # the gateway hung up: what it should do

    def _break_off(self) -> None:
        """Two token events in chunked encoding, then the connection drops mid-reply."""
        self.wfile.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        event = b'data: {"model":"broken","choices":[{"index":0,"delta":{"content":"tok "}}]}\n\n'
        for _ in range(2):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
        self.wfile.flush()

    def _send(self, kind: bytes, body: bytes, *, closed: bool) -> None:
        self.wfile.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: "
            + kind
            + b"\r\nContent-Length: %d\r\n\r\n" % len(body)
            + body
        )


@pytest.fixture(scope="module")
def attacked() -> Iterator[tuple[Stack, Gateway, BrokenModelServer]]:
    with stack_in() as made:
        fast = made.sim(["llama-8b"], ADAPTERS)
        slow = made.sim(["slow"], decode_ms_per_token=2.0)
        broken = BrokenModelServer(free_port())
        threading.Thread(target=broken.serve_forever, daemon=True).start()
        spec = (
            SPEC.replace("{fast}", str(fast))
            .replace("{slow}", str(slow))
            .replace("{broken}", str(broken.server_address[1]))
        )
        gateway = made.gateway(spec)
        gateway.fast_url = f"http://127.0.0.1:{fast}"  # type: ignore[attr-defined]
        gateway.slow_url = f"http://127.0.0.1:{slow}"  # type: ignore[attr-defined]
        try:
            yield made, gateway, broken
        finally:
            broken.shutdown()
            broken.server_close()


def _stats(url: str) -> dict[str, dict[str, int]]:
    stats: dict[str, dict[str, int]] = httpx.get(f"{url}/sim/stats").json()
    return stats


def _done_by(gateway: Gateway, model: str) -> int:
    """Prompt tokens the simulated server read plus tokens it generated for `model`."""
    stats = _stats(gateway.fast_url)  # type: ignore[attr-defined]
    return stats["prompt_tokens"].get(model, 0) + stats["generated_tokens"].get(model, 0)


def _chat(
    gateway: Gateway, key: str, body: dict[str, object], path: str = "chat/completions"
) -> httpx.Response:
    return httpx.post(
        f"{gateway.url}/v1/{path}",
        headers={"authorization": f"Bearer {key}"},
        json={"model": "chat", **body},
        timeout=30,
    )


def _parallel(
    gateway: Gateway, key: str, bodies: list[dict[str, object]], path: str = "chat/completions"
) -> list[httpx.Response]:
    async def go() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as client:
            return list(
                await asyncio.gather(
                    *(
                        client.post(
                            f"{gateway.url}/v1/{path}",
                            headers={"authorization": f"Bearer {key}"},
                            json={"model": "chat", **body},
                        )
                        for body in bodies
                    )
                )
            )

    return asyncio.run(go())


HELLO = [{"role": "user", "content": "hello there, model"}]


def test_max_tokens_1_beside_a_big_max_completion_tokens_cannot_buy_2500_tokens(
    attacked: tuple[Stack, Gateway, BrokenModelServer],
) -> None:
    stack, gateway, _ = attacked
    key = stack.key("tight")
    body = {"messages": HELLO, "max_completion_tokens": 2500, "max_tokens": 1}
    replies = _parallel(gateway, key, [body] * 4)
    assert {r.status_code for r in replies} == {400}
    assert replies[0].json()["error"]["code"] == "request_exceeds_limit"
    fits = _chat(gateway, key, {"messages": HELLO, "max_completion_tokens": 300, "max_tokens": 1})
    assert fits.status_code == 200
    assert fits.json()["usage"]["completion_tokens"] == 300  # what it was admitted for
    assert _done_by(gateway, "tight/chat") <= 1000


def test_token_id_prompts_count_one_token_per_id(
    attacked: tuple[Stack, Gateway, BrokenModelServer],
) -> None:
    stack, gateway, _ = attacked
    key = stack.key("ids")
    huge = _chat(gateway, key, {"prompt": [1] * 100_000, "max_tokens": 1}, "completions")
    assert huge.status_code == 400
    assert huge.json()["error"]["code"] == "request_exceeds_limit"
    nested = _chat(
        gateway, key, {"prompt": [[1] * 1500, [2] * 1500], "max_tokens": 1}, "completions"
    )
    assert nested.status_code == 400
    assert _done_by(gateway, "ids/chat") == 0


def test_an_omitted_limit_is_forwarded_so_the_server_cannot_fill_its_context(
    attacked: tuple[Stack, Gateway, BrokenModelServer],
) -> None:
    stack, gateway, _ = attacked
    key = stack.key("omit")
    replies = _parallel(gateway, key, [{"messages": HELLO}] * 5)
    assert {r.status_code for r in replies} <= {200, 429}
    assert any(r.status_code == 200 for r in replies)
    assert _done_by(gateway, "omit/chat") <= 3000
    seen = httpx.get(f"{gateway.fast_url}/sim/last-request").json()  # type: ignore[attr-defined]
    assert seen["max_completion_tokens"] == seen["max_tokens"] <= 3000


@st.composite
def attacks(draw: st.DrawFn) -> tuple[str, dict[str, object], float | None]:
    """One request in any of the forms a tenant may send, and when (if) it hangs up."""
    completions = draw(st.booleans())
    body: dict[str, object] = {}
    if completions:
        body["prompt"] = draw(
            st.one_of(
                st.text("abcdefgh ", min_size=1, max_size=400),
                st.lists(st.integers(0, 50_000), min_size=1, max_size=300),
                st.lists(
                    st.lists(st.integers(0, 9), min_size=1, max_size=50), min_size=1, max_size=4
                ),
            )
        )
    else:
        body["messages"] = [
            {"role": "user", "content": draw(st.text("abcd ", min_size=1, max_size=400))}
        ]
    for field in ("max_tokens", "max_completion_tokens"):
        if draw(st.booleans()):
            body[field] = draw(st.integers(1, 1500))
    if draw(st.booleans()):
        body["n"] = draw(st.integers(1, 3))
    body["stream"] = draw(st.booleans())
    hang_up_after = draw(st.none() | st.floats(0.0, 0.05))
    return ("completions" if completions else "chat/completions", body, hang_up_after)


async def _attack(
    gateway: Gateway, key: str, path: str, body: dict[str, object], hang_up: float | None
) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        request = client.stream(
            "POST",
            f"{gateway.url}/v1/{path}",
            headers={"authorization": f"Bearer {key}"},
            json={"model": "chat", **body},
        )
        if hang_up is None:
            async with request as reply:
                await reply.aread()
            return
        try:
            async with asyncio.timeout(hang_up):
                async with request as reply:
                    await reply.aread()
        except TimeoutError:
            pass  # hung up: the gateway cancels what it forwarded


def test_no_mix_of_request_forms_gets_past_tokens_per_minute(
    attacked: tuple[Stack, Gateway, BrokenModelServer],
) -> None:
    """Every form at once (both token fields, token-id prompts, n, streaming, omitted limits,
    hang-ups), a few at a time: what the server read and generated stays within the limit, and the
    usage billed is what it did (admission and billing agree). The test runs well inside a
    minute, so the whole run is one window."""
    stack, gateway, _ = attacked
    key = stack.key("mixed")
    started = time.monotonic()

    @settings(
        max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    @given(batch=st.lists(attacks(), min_size=1, max_size=4))
    def burst(batch: list[tuple[str, dict[str, object], float | None]]) -> None:
        async def go() -> None:
            await asyncio.gather(*(_attack(gateway, key, *attack) for attack in batch))

        asyncio.run(go())
        assert _done_by(gateway, "mixed/chat") <= 4000

    burst()
    assert time.monotonic() - started < 50, "the run must stay inside one window"
    done = _done_by(gateway, "mixed/chat")
    assert done <= 4000
    deadline = time.monotonic() + 10
    billed = 0
    while time.monotonic() < deadline:
        records = [r for r in stack.usage().records("mixed") if r.status in (200, 499)]
        billed = sum(r.prompt_tokens + r.completion_tokens for r in records)
        if billed >= done:
            break
        time.sleep(0.2)
    assert billed <= 4000
    assert billed >= done * 0.9, (billed, done)  # hang-ups are billed what reached the client


def test_a_client_that_hangs_up_stops_generation_frees_its_slot_and_pays_what_it_got(
    attacked: tuple[Stack, Gateway, BrokenModelServer],
) -> None:
    stack, gateway, _ = attacked
    key = stack.key("streamer")
    slow_url: str = gateway.slow_url  # type: ignore[attr-defined]

    def cut_stream() -> None:
        with socket.create_connection(("127.0.0.1", gateway.port)) as sock:
            body = orjson.dumps(
                {"model": "slow", "messages": HELLO, "max_tokens": 4000, "stream": True}
            )
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                + f"Authorization: Bearer {key}\r\n".encode()
                + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                + body
            )
            sock.recv(4096)
            time.sleep(0.5)

    cutters = [threading.Thread(target=cut_stream) for _ in range(2)]
    for cutter in cutters:
        cutter.start()
    for cutter in cutters:
        cutter.join()
    deadline = time.monotonic() + 2
    while httpx.get(f"{slow_url}/sim/stats").json()["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert httpx.get(f"{slow_url}/sim/stats").json()["in_flight"] == 0  # generation stopped
    generated = httpx.get(f"{slow_url}/sim/stats").json()["generated_tokens"]["slow"]
    assert generated < 2 * 1000  # about 250 each at 2 ms a token, not 4,000
    # both concurrency slots are free again at once
    replies = _parallel(gateway, key, [{"model": "slow", "messages": HELLO, "max_tokens": 2}] * 2)
    assert [r.status_code for r in replies] == [200, 200]
    deadline = time.monotonic() + 10
    cancelled: list[object] = []
    while time.monotonic() < deadline and len(cancelled) < 2:
        cancelled = [r for r in stack.usage().records("streamer") if r.status == 499]
        time.sleep(0.2)
    assert len(cancelled) == 2
    assert all(0 < r.completion_tokens < 1000 for r in cancelled)  # type: ignore[attr-defined]


def test_a_valid_key_gets_in_from_an_address_that_failed_31_times(
    attacked: tuple[Stack, Gateway, BrokenModelServer],
) -> None:
    stack, gateway, _ = attacked
    key = stack.key("probe")
    for n in range(31):
        _chat(gateway, f"gpx_wrong{n:04d}_{'x' * 40}", {"messages": HELLO, "max_tokens": 1})
    refused = _chat(gateway, "gpx_wrong_again_" + "x" * 40, {"messages": HELLO, "max_tokens": 1})
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "too_many_failed_auth"
    ok = _chat(gateway, key, {"messages": HELLO, "max_tokens": 1})
    assert ok.status_code == 200


def test_the_bearer_scheme_is_case_insensitive_and_replies_name_the_model_called(
    attacked: tuple[Stack, Gateway, BrokenModelServer],
) -> None:
    stack, gateway, _ = attacked
    key = stack.key("probe")
    reply = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": f"bearer {key}"},
        json={"model": "chat", "messages": HELLO, "max_tokens": 2},
    )
    assert reply.status_code == 200
    assert reply.json()["model"] == "chat"  # not the adapter's name on the server, probe/chat
    streamed = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": f"BEARER {key}"},
        json={"model": "chat", "messages": HELLO, "max_tokens": 2, "stream": True},
    )
    assert b"probe/chat" not in streamed.content
    assert b'"model":"chat"' in streamed.content


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _gateway_pids(gateway: Gateway) -> list[int]:
    assert gateway.process is not None
    pids = [gateway.process.pid]
    for path in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = path.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) in pids:
            pids.append(int(path.parent.name))
    return pids


@pytest.mark.parametrize("stream", [False, True])
def test_a_model_server_sending_300_mib_gets_a_502_and_costs_no_memory(
    attacked: tuple[Stack, Gateway, BrokenModelServer], stream: bool
) -> None:
    stack, gateway, _ = attacked
    before = {pid: _rss_mib(pid) for pid in _gateway_pids(gateway)}
    probe = stack.key("probe")
    bad = stack.key("bad")
    reply = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {bad}"},
        json={"model": "broken", "messages": HELLO, "max_tokens": 2, "stream": stream},
        timeout=30,
    )
    assert reply.status_code == 502
    expected = "upstream_event_too_large" if stream else "upstream_reply_too_large"
    assert reply.json()["error"]["code"] == expected
    grown = max(_rss_mib(pid) - mib for pid, mib in before.items())
    assert grown < 64
    ok = _chat(gateway, probe, {"messages": HELLO, "max_tokens": 1})
    assert ok.status_code == 200


def test_a_model_server_that_breaks_off_a_stream_ends_it_with_an_error_and_bills_what_came(
    attacked: tuple[Stack, Gateway, BrokenModelServer],
) -> None:
    stack, gateway, _ = attacked
    key = stack.key("bad")
    prefix = key.split("_")[1]
    reply = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json={"model": "broken", "messages": HELLO, "max_tokens": 3, "stream": True},
        timeout=30,
    )
    assert reply.status_code == 200
    events = [e for e in reply.content.split(b"\n\n") if e]
    assert events[-1].startswith(b'data: {"error"')
    assert b"backend_unavailable" in events[-1]
    assert sum(b'"content":"tok "' in e for e in events) == 2
    deadline = time.monotonic() + 10
    mine: list[object] = []
    while time.monotonic() < deadline and not mine:
        mine = [r for r in stack.usage().records("bad") if r.key_prefix == prefix]
        time.sleep(0.2)
    assert [r.completion_tokens for r in mine] == [2]  # type: ignore[attr-defined]
