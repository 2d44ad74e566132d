"""Label values are bounded by the applied spec, never by traffic: at most TENANT_LABEL_CAP tenants
with series of their own (the rest under `_other`), models the tenant serves, and nothing a client
sent (model names, key prefixes, request ids)."""

from __future__ import annotations

from datetime import timedelta

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from gpuplex.core.serve.usage import UsageRecord
from gpuplex.server.metrics.endpoint import LOOPBACK_NETWORKS, mount_metrics
from gpuplex.server.metrics.tenant_labels import OTHER, TENANT_LABEL_CAP
from gpuplex.server.problems import install_handlers
from tests.integration.server_metrics.conftest import (
    APPLIED_AT,
    NOW,
    RECORDS,
    Scrape,
    Stack,
    build_stack,
)

MANY = TENANT_LABEL_CAP + 200


def many_tenants_spec(count: int) -> str:
    tenants = "\n".join(f"  - name: t{n:05d}" for n in range(count))
    serving = (
        "  - name: busy\n    workloads:\n"
        "      - name: chat\n        gpu: {count: 1}\n        serve: {model: busy-chat}\n"
    )
    return (
        "version: 1\nfleet:\n  nodes:\n    - name: box\n      gpus:\n"
        "        - model: H100-80GB\n          count: 2\n"
        f"tenants:\n{tenants}\n{serving}"
        "pricing:\n  currency: EUR\n  gpu_hour: {H100-80GB: '2.00'}\n"
    )


def traffic(tenants: list[str], models_per_tenant: int) -> list[UsageRecord]:
    return [
        UsageRecord(
            request_id=f"req-{tenant}-{m}",
            tenant=tenant,
            key_prefix=f"gpx_{m:08x}",
            model=f"client-says-{m}",
            endpoint="chat.completions",
            status=200,
            prompt_tokens=3,
            completion_tokens=2,
            latency_s=0.1,
            started_at=APPLIED_AT + timedelta(seconds=m),
        )
        for tenant in tenants
        for m in range(models_per_tenant)
    ]


def scrape_app(stack: Stack, tenant_cap: int) -> Scrape:
    app = FastAPI()
    install_handlers(app)
    mount_metrics(app, stack.ctx, LOOPBACK_NETWORKS, tenant_cap)
    reply = TestClient(app, client=("127.0.0.1", 50_000)).get("/metrics")
    assert reply.status_code == 200
    return Scrape.parse(reply.text)


def test_a_spec_with_more_tenants_than_the_cap_has_bounded_series(sqlite_engine: Engine) -> None:
    stack = build_stack(sqlite_engine, many_tenants_spec(MANY))
    beyond = [f"t{n:05d}" for n in range(TENANT_LABEL_CAP, MANY)]
    stack.ctx.usage.insert_many(traffic(["t00000", *beyond[:50]], models_per_tenant=40))
    stack.ctx.metering.roll_up_range(APPLIED_AT, NOW)
    scrape = stack.scrape()

    assert scrape.value("gpuplex_metrics_tenants_beyond_cap") == MANY + 1 - TENANT_LABEL_CAP
    tenants = {dict(labels).get("tenant") for _, labels in scrape.series} - {None}
    assert len(tenants) == TENANT_LABEL_CAP + 1
    assert OTHER in tenants
    assert "busy" not in tenants  # the spec's last tenant is beyond the cap
    assert scrape.value("gpuplex_tenant_allocated_gpus", tenant=OTHER) == 1  # busy's GPU
    # 40 client-named models x 51 tenants: two model label values
    assert scrape.label_values("gpuplex_tenant_requests_total", "model") == {OTHER}
    assert scrape.value("gpuplex_tenant_requests_total", tenant="t00000", model=OTHER) == 40
    assert scrape.value("gpuplex_tenant_requests_total", tenant=OTHER, model=OTHER) == 50 * 40
    # per own tenant: allocated GPUs and memory, unplaced replicas, spend; the rest for a few
    assert len(scrape.series) < 4 * (TENANT_LABEL_CAP + 1) + 100
    assert "client-says" not in scrape.text
    assert "gpx_" not in scrape.text
    assert "req-" not in scrape.text


def test_tenants_beyond_a_small_cap_are_summed_under_other(stack: Stack) -> None:
    # the example's tenants in spec order: northwind, contoso, fabrikam, adatum, hobbyists
    full, capped = stack.scrape(), scrape_app(stack, tenant_cap=2)
    assert capped.value("gpuplex_metrics_tenants_beyond_cap") == 3
    assert capped.label_values("gpuplex_tenant_allocated_gpus", "tenant") == {
        "northwind",
        "contoso",
        OTHER,
    }
    for name in ("gpuplex_tenant_allocated_gpus", "gpuplex_tenant_allocated_gpu_memory_mib"):
        folded = sum(full.value(name, tenant=t) for t in ("fabrikam", "adatum", "hobbyists"))
        assert capped.value(name, tenant=OTHER) == folded
        assert capped.value(name, tenant="northwind") == full.value(name, tenant="northwind")
    # hobbyists' requests count under _other, and so does its model
    assert capped.value("gpuplex_tenant_requests_total", tenant=OTHER, model=OTHER) == 2
    memory = "gpuplex_tenant_gpu_memory_mib_seconds_total"
    assert capped.value(memory, tenant=OTHER) == full.value(memory, tenant="hobbyists")


def test_nothing_a_client_sent_becomes_a_label(stack: Stack) -> None:
    text = stack.scrape().text
    assert "no-such-model-7" not in text  # the model a client asked for that nobody serves
    for record in RECORDS:
        assert record.request_id not in text
        assert record.key_prefix not in text
