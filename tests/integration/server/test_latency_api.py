"""A tenant's latency per model over the API: nearest-rank p50/p95 of queue wait, time to first
token and inter-token latency from its usage records in the range (the last hour by default),
nothing of another tenant's, and a 422 for a range that is not one."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gpuplex.core.serve.usage import UsageRecord
from tests.integration.server.conftest import T0, TENANT_A, TENANT_B, Api, error_of


def record(
    tenant: str,
    n: int,
    minutes: float,
    model: str = "chat",
    stream: bool = True,
    queued: bool = True,
) -> UsageRecord:
    """Request n: waited n ms in the queue, first token after 100 + n ms, a token every n ms."""
    return UsageRecord(
        request_id=f"{tenant}-{model}-{n}-{minutes}",
        tenant=tenant,
        key_prefix="gpx_test",
        model=model,
        endpoint="chat.completions",
        status=200,
        prompt_tokens=10,
        completion_tokens=5,
        latency_s=1.0,
        started_at=T0 + timedelta(minutes=minutes),
        stream=stream,
        queue_wait_s=n / 1000 if queued else None,
        ttft_s=(100 + n) / 1000 if stream and queued else None,
        itl_s=n / 1000 if stream and queued else None,
    )


def latency(api: Api, tenant: str, caller: str = "admin", **params: str) -> dict[str, Any]:
    reply = api.get(f"/tenants/{tenant}/latency", caller, params=params)
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def test_percentiles_per_model_over_the_last_hour(api: Api) -> None:
    records = [record(TENANT_A, n, minutes=30) for n in range(1, 21)]
    records += [record(TENANT_A, 5, minutes=31, stream=False)]  # a whole reply: queue wait only
    records += [record(TENANT_A, 7, minutes=32, model="embed", stream=False)]
    records += [record(TENANT_A, 9, minutes=33, model="made-up", queued=False)]  # refused
    records += [record(TENANT_A, 500, minutes=-30)]  # before the last hour
    records += [record(TENANT_B, 900, minutes=30, model="b-private")]
    api.ctx.usage.insert_many(records)
    api.clock.advance(timedelta(hours=1))

    body = latency(api, TENANT_A)
    assert body["start"].startswith("2026-03-10T12:00:00")
    assert body["requests"] == 22
    assert body["truncated"] is False
    by_model = {m["model"]: m for m in body["models"]}
    assert set(by_model) == {"chat", "embed"}
    chat = by_model["chat"]
    assert chat["requests"] == 21
    # queue waits 1..20 ms and one of 5 ms: 21 values, rank 11 is 10 ms, rank 20 is 19 ms
    assert chat["queue_wait"] == {"p50_s": 0.010, "p95_s": 0.019, "count": 21}
    assert chat["time_to_first_token"] == {"p50_s": 0.110, "p95_s": 0.119, "count": 20}
    assert chat["inter_token_latency"] == {"p50_s": 0.010, "p95_s": 0.019, "count": 20}
    embed = by_model["embed"]
    assert embed["time_to_first_token"] is None
    assert embed["queue_wait"] == {"p50_s": 0.007, "p95_s": 0.007, "count": 1}
    assert "b-private" not in str(body)

    earlier = latency(
        api, TENANT_A, start=(T0 - timedelta(hours=1)).isoformat(), end=T0.isoformat()
    )
    assert earlier["requests"] == 1
    assert earlier["models"][0]["queue_wait"]["p50_s"] == 0.5


def test_a_range_that_is_not_one_is_refused(api: Api) -> None:
    for params in (
        {"start": T0.isoformat(), "end": T0.isoformat()},
        {"start": T0.isoformat(), "end": (T0 + timedelta(days=32)).isoformat()},
    ):
        reply = api.get(f"/tenants/{TENANT_A}/latency", params=params)
        assert reply.status_code == 422, reply.text
        assert error_of(reply)["code"] == "invalid_request"
