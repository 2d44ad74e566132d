"""A hostile tenant against a real vLLM behind the gateway, with tokens_per_min 2,000: every way
found to make the shared model server read or generate more than the limit (a decoy field the
estimate counted instead of the prompt, a list of prompts reserved once, empty messages and huge
roles, a tenant's own chat template, streams whose usage the gateway did not see, requests
abandoned before their reply, text that tokenizes badly) and the ordinary forms, each run as a
burst by a tenant of its own.

What vLLM did is read from vLLM itself (its `/metrics` counters of prompt and generated tokens,
which count by its own tokenizer, aborted requests included), never from the gateway or a double.
Each burst is over well inside a minute, so the whole burst is one window: per tenant, what vLLM
read and generated must stay within tokens_per_min plus one request's reservation (a reservation
is never more than the whole limit, so 2 x the limit bounds it), and every token vLLM counted must
be billed to that tenant and no other."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.gateway.stack import Gateway, Stack, stack_in

pytestmark = [pytest.mark.xdist_group("vllm")]

TPM = 2000
BURST_S = 8.0


@dataclass(frozen=True)
class Attack:
    name: str
    path: str  # under /v1/
    clients: int
    hang_up_s: float | None = None  # abandon each request after this long
    lora: bool = False  # through the tenant's LoRA adapter on the shared base

    def body(self, rng: random.Random) -> dict[str, object]:
        return BODIES[self.name](rng)


def _text(rng: random.Random, size: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(size))


WORDS = ("the", "model", "reads", "tokens", "shared", "server", "tenant", "limit", "window")


def _badly_tokenized(rng: random.Random, size: int) -> str:
    """Characters the tokenizer never merged: one token per byte, up to three per character."""
    return "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(size))


TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {
            "type": "object",
            "properties": {"word": {"type": "string"}, "note": {"type": "string"}},
            "required": ["word", "note"],
        },
    },
}

BODIES: dict[str, Callable[[random.Random], dict[str, object]]] = {
    "decoy messages on completions": lambda rng: {
        "prompt": _text(rng, 120),
        "messages": [],
        "max_tokens": 16,
    },
    "decoy messages on embeddings": lambda rng: {"input": _text(rng, 120), "messages": []},
    "list of prompts": lambda rng: {
        "prompt": [_text(rng, 3) for _ in range(25)],
        "max_tokens": 16,
    },
    "empty messages": lambda rng: {
        "messages": [{"role": "user", "content": ""}] * 100,
        "max_tokens": 8,
    },
    "huge role": lambda rng: {"messages": [{"role": "u" * 4000, "content": ""}], "max_tokens": 8},
    "own chat template": lambda rng: {
        "messages": [{"role": "user", "content": "hi"}],
        "chat_template": "{% for i in range(400) %}{{ messages[0].content }} {% endfor %}",
        "max_tokens": 8,
    },
    "fields for the shared server": lambda rng: {
        "messages": [{"role": "user", "content": "hi"}],
        "priority": -100,
        "request_id": "someone-elses",
        "max_tokens": 8,
    },
    "streams without include_usage": lambda rng: {
        "messages": [{"role": "user", "content": _text(rng, 10)}],
        "stream": True,
        "max_tokens": 200,
    },
    "forced tool calls in streams without include_usage": lambda rng: {
        "messages": [{"role": "user", "content": _text(rng, 10)}],
        "tools": [TOOL],
        "tool_choice": {"type": "function", "function": {"name": "lookup"}},
        "stream": True,
        "max_tokens": 120,
    },
    "abandoned whole replies": lambda rng: {
        "messages": [{"role": "user", "content": _text(rng, 10)}],
        "max_tokens": 400,
    },
    "abandoned streams": lambda rng: {
        "prompt": _text(rng, 10),
        "stream": True,
        "max_tokens": 400,
    },
    "badly tokenized text": lambda rng: {
        "messages": [{"role": "user", "content": _badly_tokenized(rng, 120)}],
        "max_tokens": 8,
    },
    "ordinary chat": lambda rng: rng.choice(
        [
            {"messages": [{"role": "user", "content": _text(rng, 20)}], "max_tokens": 32, "n": 2},
            {
                "messages": [
                    {"role": "system", "content": "Answer briefly."},
                    {"role": "user", "content": _text(rng, 8)},
                ],
                "stream": True,
                "stream_options": {"include_usage": True},
                "max_completion_tokens": 40,
            },
            {
                "messages": [{"role": "user", "content": _text(rng, 8)}],
                "temperature": 0.7,
                "top_p": 0.9,
                "seed": 3,
                "stop": ["\n\n"],
                "user": "end-user-7",
            },
        ]
    ),
    "ordinary completions": lambda rng: rng.choice(
        [
            {"prompt": [rng.randrange(5, 3000) for _ in range(40)], "max_tokens": 24},
            {"prompt": [[7, 8, 9], [10, 11]], "max_tokens": 12, "n": 2},
            {"prompt": _text(rng, 12), "max_tokens": 20, "temperature": 0.7, "seed": 3},
            {"prompt": _text(rng, 12), "stream": True, "max_tokens": 30, "logprobs": 2},
            {"prompt": _text(rng, 6), "echo": True, "max_tokens": 10},
        ]
    ),
}

ATTACKS = (
    Attack("decoy messages on completions", "completions", 8),
    Attack("decoy messages on embeddings", "embeddings", 8),
    Attack("list of prompts", "completions", 8),
    Attack("empty messages", "chat/completions", 32),
    Attack("huge role", "chat/completions", 8),
    Attack("own chat template", "chat/completions", 8),
    Attack("fields for the shared server", "chat/completions", 8),
    Attack("streams without include_usage", "chat/completions", 8),
    Attack("forced tool calls in streams without include_usage", "chat/completions", 4),
    Attack("abandoned whole replies", "chat/completions", 16, hang_up_s=0.15),
    Attack("abandoned streams", "completions", 16, hang_up_s=0.15),
    Attack("badly tokenized text", "chat/completions", 8),
    Attack("ordinary chat", "chat/completions", 8),
    Attack("ordinary completions", "completions", 8),
    Attack("ordinary chat", "chat/completions", 8, lora=True),
)


def _tenant(at: int) -> str:
    return f"attacker-{at}"


def _spec(vllm_port: int) -> str:
    tenants = []
    for at in range(len(ATTACKS)):
        tenants.append(
            f"""
  - name: {_tenant(at)}
    isolation: timeslice
    requirement: shared
    workloads:
      - name: chat
        gpu: {{memory_gib: 4}}
        serve: {{model: chat, base_model: tiny-llama, port: {20000 + at}, accepts_adapters: true}}
      - name: tuned
        serve: {{model: tuned, lora_of: {_tenant(at)}/chat}}"""
        )
    backends = "\n".join(
        f"    {_tenant(at)}/chat: ['http://127.0.0.1:{vllm_port}']" for at in range(len(ATTACKS))
    )
    return f"""
fleet:
  nodes: [{{name: n1, gpus: [{{model: H100-80GB, count: 8}}]}}]
tenants:{"".join(tenants)}
gateway:
  port: {{gateway_port}}
  health_interval_s: 0.5
  backends:
{backends}
"""


def _vllm_tokens(url: str) -> int:
    """Prompt tokens vLLM read plus tokens it generated, as its own metrics count them."""
    total = 0.0
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text):
        for sample in family.samples:
            if sample.name in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total"):
                total += sample.value
    return int(total)


def _vllm_busy(url: str) -> float:
    busy = 0.0
    for family in text_string_to_metric_families(httpx.get(f"{url}/metrics").text):
        for sample in family.samples:
            if sample.name in ("vllm:num_requests_running", "vllm:num_requests_waiting"):
                busy += sample.value
    return busy


def _wait_idle(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while _vllm_busy(url) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)  # counters are updated as the engine's last step is logged


class Sampler:
    """vLLM's token count every half second, in a thread, for `most_in_a_window`."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self.samples.append((time.monotonic(), _vllm_tokens(self.url)))
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.monotonic(), _vllm_tokens(self.url)))

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.samples.append((time.monotonic(), _vllm_tokens(self.url)))

    def most_in_a_window(self, window_s: float = 60.0) -> int:
        """The most tokens vLLM did in any `window_s` between two samples."""
        most = 0
        for at, (start_s, start_tokens) in enumerate(self.samples):
            for end_s, end_tokens in self.samples[at:]:
                if end_s - start_s > window_s:
                    break
                most = max(most, end_tokens - start_tokens)
        return most


async def _burst(
    gateway: Gateway, key: str, attack: Attack, seed: int
) -> tuple[dict[int, int], dict[int, str]]:
    """`attack.clients` clients sending its requests back to back for BURST_S: the status counts,
    and the first body of each status other than 200 and 429 (what a refusal said)."""
    statuses: dict[int, int] = {}
    said: dict[int, str] = {}
    model = "tuned" if attack.lora else "chat"
    stop_at = time.monotonic() + BURST_S

    async def client(rng: random.Random) -> None:
        async with httpx.AsyncClient(timeout=180) as http:
            while time.monotonic() < stop_at:
                body = {"model": model, **attack.body(rng)}
                request = http.stream(
                    "POST",
                    f"{gateway.url}/v1/{attack.path}",
                    headers={"authorization": f"Bearer {key}"},
                    json=body,
                )
                try:
                    async with asyncio.timeout(attack.hang_up_s):
                        async with request as reply:
                            await reply.aread()
                            status = reply.status_code
                            statuses[status] = statuses.get(status, 0) + 1
                            if status not in (200, 429):
                                said.setdefault(status, reply.text[:300])
                            if reply.status_code == 429:
                                await asyncio.sleep(0.2)
                except TimeoutError:
                    statuses[499] = statuses.get(499, 0) + 1
                except httpx.TimeoutException:  # a loaded machine: the limit must hold anyway
                    statuses[0] = statuses.get(0, 0) + 1

    await asyncio.gather(*(client(random.Random(seed * 100 + c)) for c in range(attack.clients)))
    return statuses, said


def _billed(stack: Stack, tenant: str, at_least: int, timeout_s: float = 15) -> int:
    """The tokens billed to `tenant`, once the records reach the store (at least `at_least`)."""
    deadline = time.monotonic() + timeout_s
    billed = 0
    while time.monotonic() < deadline:
        billed = sum(r.prompt_tokens + r.completion_tokens for r in stack.usage().records(tenant))
        if billed >= at_least:
            return billed
        time.sleep(0.25)
    return billed


@pytest.fixture(scope="module")
def behind_gateway(vllm: object, vllm_model: object) -> Iterator[tuple[Stack, Gateway, str]]:
    url: str = vllm.url  # type: ignore[attr-defined]
    loras = vllm_model.loras  # type: ignore[attr-defined]
    adapter_path = next(iter(loras.values()))
    for at in range(len(ATTACKS)):
        if ATTACKS[at].lora:  # the gateway names a tenant's adapter tenant/workload
            loaded = httpx.post(
                f"{url}/v1/load_lora_adapter",
                json={"lora_name": f"{_tenant(at)}/tuned", "lora_path": str(adapter_path)},
                timeout=60,
            )
            assert loaded.status_code == 200, loaded.text
    port = int(url.rsplit(":", 1)[1])
    try:
        with stack_in() as made:
            gateway = made.gateway(_spec(port))
            yield made, gateway, url
    finally:  # the session's vLLM serves its own adapters only again, for the tests after these
        for at in range(len(ATTACKS)):
            if ATTACKS[at].lora:
                httpx.post(
                    f"{url}/v1/unload_lora_adapter",
                    json={"lora_name": f"{_tenant(at)}/tuned"},
                    timeout=60,
                )


@pytest.mark.parametrize("at", range(len(ATTACKS)), ids=[a.name for a in ATTACKS])
def test_a_tenant_cannot_make_the_shared_server_do_more_than_its_tokens_per_min(
    behind_gateway: tuple[Stack, Gateway, str], at: int
) -> None:
    stack, gateway, vllm_url = behind_gateway
    attack = ATTACKS[at]
    tenant = _tenant(at)
    key = stack.key(tenant, tpm=TPM)
    _wait_idle(vllm_url)
    with Sampler(vllm_url) as sampler:
        statuses, said = asyncio.run(_burst(gateway, key, attack, at))
        _wait_idle(vllm_url)
    done = sampler.samples[-1][1] - sampler.samples[0][1]
    most = sampler.most_in_a_window()
    billed = _billed(stack, tenant, done)
    others = {
        _tenant(other): _billed(stack, _tenant(other), 0, timeout_s=0)
        for other in range(len(ATTACKS))
        if other > at
    }
    seconds = sampler.samples[-1][0] - sampler.samples[0][0]
    print(  # noqa: T201 - the figures docs/security.md quotes
        f"\n{attack.name} ({attack.path}, {attack.clients} clients): vLLM read+generated "
        f"{done} tokens in {seconds:.0f} s, at most {most} ({most / TPM:.2f}x tokens_per_min) "
        f"in a 60 s window; billed {billed}; answers {statuses} {said}"
    )
    assert most <= 2 * TPM, f"{attack.name}: vLLM did {most} tokens in 60 s, limit {TPM}"
    assert billed >= done, f"{attack.name}: vLLM did {done} tokens, {billed} billed"
    assert not any(others.values()), f"tokens billed to tenants that sent nothing: {others}"
