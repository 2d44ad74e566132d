"""Time to first token and inter-token latency through the real gateway, in front of a simulated
model server that takes a known time per token: `/metrics` has both histograms per tenant and the
model it called (and no series for a model a client made up), promtool accepts them, and the
usage record keeps the stream's TTFT, mean gap and queue wait."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator

import openai
import pytest

from gpuplex.core.serve.usage import UsageRecord
from tests.e2e.gateway.stack import Gateway, Stack, one_tenant_spec, stack_in
from tests.e2e.gateway.test_gateway_api import MESSAGES
from tests.services import missing

pytestmark = pytest.mark.lane

DECODE_MS = 40
PREFILL_MS = 10  # per prompt token: the 9-token prompt takes 90 ms to its first token
TTFT = "gpuplex_gateway_time_to_first_token_seconds"
ITL = "gpuplex_gateway_inter_token_latency_seconds"


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with stack_in() as made:
        yield made


@pytest.fixture(scope="module")
def gateway(stack: Stack) -> Gateway:
    sim_port = stack.sim(
        ["llama-8b"], decode_ms_per_token=DECODE_MS, prefill_ms_per_token=PREFILL_MS
    )
    return stack.gateway(one_tenant_spec(sim_port))


def value(text: str, sample: str) -> float:
    found = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.MULTILINE)
    assert found, f"{sample} is not in /metrics"
    return float(found.group(1))


def test_a_stream_is_timed_per_tenant_and_model(stack: Stack, gateway: Gateway) -> None:
    key = stack.key("acme")
    api = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0, timeout=10)
    with api:
        chunks = list(
            api.chat.completions.create(
                model="acme-chat", messages=MESSAGES, max_tokens=6, stream=True
            )
        )
        assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) == 6
        api.chat.completions.create(model="acme-chat", messages=MESSAGES, max_tokens=2)
        with pytest.raises(openai.NotFoundError):
            api.chat.completions.create(model="made-up", messages=MESSAGES, stream=True)

    text = gateway.metrics()
    labels = '{model="acme-chat",tenant="acme"}'
    # one stream: one TTFT (the whole reply is not timed), at least the prefill's 90 ms
    assert value(text, f"{TTFT}_count{labels}") == 1
    assert 0.09 <= value(text, f"{TTFT}_sum{labels}") < 5
    # six tokens 40 ms apart: up to five gaps (tokens read together count once), each >= 40 ms
    gaps = value(text, f"{ITL}_count{labels}")
    assert 1 <= gaps <= 5
    assert value(text, f"{ITL}_sum{labels}") >= gaps * DECODE_MS / 1000 * 0.9
    assert value(text, f'{ITL}_bucket{{le="0.025",model="acme-chat",tenant="acme"}}') == 0
    assert "made-up" not in text
    promtool = shutil.which("promtool")
    if promtool is None:
        missing("promtool (Debian package prometheus)")
    else:
        checked = subprocess.run(  # noqa: S603
            [promtool, "check", "metrics"], input=text, capture_output=True, text=True
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr

    prefix = key.split("_")[1]

    def own() -> list[UsageRecord]:
        return [r for r in stack.usage().records(tenant="acme") if r.key_prefix == prefix]

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(own()) < 2:
        time.sleep(0.2)
    records = {(r.stream, r.model): r for r in own()}
    streamed = records[True, "acme-chat"]
    assert streamed.ttft_s is not None
    assert 0.09 <= streamed.ttft_s < 5
    assert streamed.itl_s is not None
    assert streamed.itl_s >= DECODE_MS / 1000 * 0.9
    assert streamed.queue_wait_s is not None
    assert streamed.queue_wait_s < streamed.ttft_s
    whole = records[False, "acme-chat"]
    assert (whole.ttft_s, whole.itl_s) == (None, None)
    assert whole.queue_wait_s is not None
