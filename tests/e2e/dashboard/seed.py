"""A day of history for the dashboard to draw, written into the store before the server starts:
hourly roll-ups made by the real metering code from the example's plan (allocation), busy GPU time
and gateway traffic with a daily rhythm, the GPU samples of a moment ago, and host events
(a preemption, a restart, a watchdog stop)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

from sqlalchemy import Engine

from gpuplex.core.meter import (
    BUSY_GPU_SECONDS,
    COMPLETION_TOKENS,
    GPU_SECONDS,
    PROMPT_TOKENS,
    REQUESTS,
    GpuSample,
    MeterLine,
    MeterWindow,
    PlanInterval,
    allocation_lines,
    fleet_gpu_seconds,
)
from gpuplex.core.plan import Plan, make_plan
from gpuplex.core.serve.usage import UsageRecord
from gpuplex.host.output_reports import event_tenant
from gpuplex.specfile import load_spec_file
from gpuplex.store.db import open_store
from gpuplex.store.host_events import HostEvent, HostEvents
from gpuplex.store.rollups import RollupRepository
from gpuplex.store.samples import SampleRepository
from gpuplex.store.usage import UsageRepository

HOURS = 24
NODE = "h100-a"  # the example's node, whose host runtime reports the events
SERVING = {"northwind": 900, "contoso": 400, "hobbyists": 45}  # requests per hour at the peak


def _rhythm(tenant: str, hour: int) -> float:
    """0.15 .. 0.95: busier in the (UTC) afternoon, a little different per tenant."""
    phase = sum(map(ord, tenant)) % 5
    return 0.55 + 0.4 * math.sin((hour - 9 + phase) / 24 * 2 * math.pi)


def seed_history(store_url: str, spec_path: Path, now: datetime) -> Plan:
    plan = make_plan(load_spec_file(spec_path))
    end = _day_end(now)
    start = end - timedelta(hours=HOURS)
    interval = PlanInterval(plan=plan, active_from=start, active_until=end)
    engine = open_store(store_url)
    try:
        rollups = RollupRepository(engine)
        for hour in range(HOURS):
            window = MeterWindow(start + timedelta(hours=hour), start + timedelta(hours=hour + 1))
            allocation = allocation_lines([interval], window)
            rollups.replace_window(
                window.start,
                window.end,
                "allocation",
                allocation + fleet_gpu_seconds([interval], window),
            )
            rollups.replace_window(
                window.start, window.end, "measured", _busy(allocation, window.start.hour)
            )
            traffic = _traffic(window.start.hour) + _rider_traffic(window.start.hour)
            rollups.replace_window(window.start, window.end, "gateway", traffic)
        SampleRepository(engine).append(_samples(plan, now - timedelta(seconds=30)))
        _events(engine, now)
    finally:
        engine.dispose()
    return plan


def _day_end(now: datetime) -> datetime:
    """The seeded day ends at the start of the current hour, except in a month's first hour: then
    it ends with the hour in progress, so that the month always holds at least an hour of it (the
    budget tests need spend this month, and at 00:20 on the 1st the 24 hours before 00:00 are all
    last month's)."""
    end = now.replace(minute=0, second=0, microsecond=0)
    if end == now.replace(day=1, hour=0, minute=0, second=0, microsecond=0):
        end += timedelta(hours=1)
    return end


def _busy(allocation: list[MeterLine], hour: int) -> list[MeterLine]:
    held: dict[str, Decimal] = {}
    for line in allocation:
        if line.metric == GPU_SECONDS:
            held[line.tenant] = held.get(line.tenant, Decimal(0)) + line.quantity
    return [
        MeterLine(
            tenant=tenant,
            source="measured",
            metric=BUSY_GPU_SECONDS,
            dimension="H100-80GB",
            quantity=(seconds * Decimal(str(round(_rhythm(tenant, hour), 3)))).quantize(
                Decimal("0.001")
            ),
        )
        for tenant, seconds in sorted(held.items())
    ]


def _traffic(hour: int) -> list[MeterLine]:
    lines = []
    for tenant, peak in SERVING.items():
        requests = int(peak * _rhythm(tenant, hour))
        for metric, quantity in (
            (REQUESTS, requests),
            (PROMPT_TOKENS, requests * 850),
            (COMPLETION_TOKENS, requests * 240),
        ):
            lines.append(
                MeterLine(
                    tenant=tenant,
                    source="gateway",
                    metric=metric,
                    dimension=f"{tenant}-model",
                    quantity=Decimal(quantity),
                )
            )
    return lines


#: Tokens an hour sent to contoso's support-bot server, where adatum's LoRA adapter rides:
#: adatum sends a quarter of them.
RIDER_TOKENS = {("adatum", "adatum-legal"): 30_000, ("contoso", "contoso-support"): 90_000}


def _rider_traffic(hour: int) -> list[MeterLine]:
    """Gateway lines of the models routed to the shared server (in the same ratio every hour)."""
    del hour
    return [
        MeterLine(tenant, "gateway", metric, model, Decimal(tokens // 2))
        for (tenant, model), tokens in RIDER_TOKENS.items()
        for metric in (PROMPT_TOKENS, COMPLETION_TOKENS)
    ]


def _samples(plan: Plan, at: datetime) -> list[GpuSample]:
    return [
        GpuSample(
            at=at,
            node=placement.node,
            gpu_index=gpu_index,
            tenant=placement.tenant,
            workload=placement.workload,
            replica=placement.replica,
            memory_used_mib=int(placement.memory_mib * 0.72 / len(placement.gpu_indices)),
            utilization_percent=round(100 * _rhythm(placement.tenant, at.hour), 1),
            source="sim",
        )
        for placement in plan.placements
        for gpu_index in placement.gpu_indices
    ]


def host_event(engine: Engine, at: datetime, kind: str, target: str, message: str) -> None:
    """An event as a host runtime reports it to the store (where the control plane reads it)."""
    event = HostEvent(NODE, at, kind, target, event_tenant(target), message)
    HostEvents(engine).append(NODE, [event])


def _events(engine: Engine, now: datetime) -> None:
    for minutes_ago, kind, target, message in (
        (
            42,
            "stopped",
            "hobbyists/playground#3",
            "preempted: its MPS share went to contoso/embed#1",
        ),
        (31, "exited", "contoso/embed#0", "exit status 137 after 5 h 12 min"),
        (30, "started", "contoso/embed#0", "pid 48211: restart 1 after exit, backoff 2 s"),
        (
            12,
            "vram_exceeded",
            "hobbyists/playground#1",
            "watchdog: 13.1 GiB used of 12 GiB planned; stopped",
        ),
    ):
        host_event(engine, now - timedelta(minutes=minutes_ago), kind, target, message)


#: tenant -> (model, streamed requests) of the gateway traffic `seed_latency` writes
LATENCY_TRAFFIC = {"contoso": ("contoso-support", 40), "northwind": ("northwind-chat", 20)}


def seed_latency(store_url: str, now: datetime) -> None:
    """Usage records of the last few minutes with the latency the gateway measured: request k of
    n waits k ms in the queue, gets its first token after 100 + 10 k ms and a token every 20 + k
    ms; one more request per tenant is a whole reply (queue wait only)."""
    records = []
    for tenant, (model, count) in LATENCY_TRAFFIC.items():
        for k in range(count + 1):
            streamed = k < count
            records.append(
                UsageRecord(
                    request_id=f"latency-{tenant}-{k}",
                    tenant=tenant,
                    key_prefix="gpx_seeded",
                    model=model,
                    endpoint="chat.completions",
                    status=200,
                    prompt_tokens=120,
                    completion_tokens=60,
                    latency_s=1.5,
                    started_at=now - timedelta(minutes=5, seconds=k),
                    stream=streamed,
                    queue_wait_s=k / 1000,
                    ttft_s=(100 + 10 * k) / 1000 if streamed else None,
                    itl_s=(20 + k) / 1000 if streamed else None,
                )
            )
    engine = open_store(store_url)
    try:
        UsageRepository(engine).insert_many(records)
    finally:
        engine.dispose()
