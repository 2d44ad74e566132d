"""The roll-up job (Metering.catch_up) as the reconciler runs it, with the clock moved by hand:
late inputs (the gateway writes a request's usage record when the request ends, and its mover
moves it seconds later) are counted by a later pass, and resuming never counts a window twice."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest

from gpuplex.core.meter import REQUESTS, MeterWindow
from gpuplex.core.plan import Plan
from gpuplex.core.serve.usage import UsageRecord
from gpuplex.server.metering import LATE_S
from tests.integration.server.conftest import SPEC_YAML, T0, TENANT_A, Api

MINUTE = timedelta(minutes=1)


def record(request_id: str, started_after: timedelta) -> UsageRecord:
    return UsageRecord(
        request_id=request_id,
        tenant=TENANT_A,
        key_prefix="abcd1234",
        model="alphaco-chat",
        endpoint="chat.completions",
        status=200,
        prompt_tokens=10,
        completion_tokens=20,
        latency_s=90.0,
        started_at=T0 + started_after,
    )


def requests_counted(api: Api) -> Decimal:
    lines = api.ctx.metering.lines(MeterWindow(T0, T0 + timedelta(hours=2)))
    return sum(
        (line.quantity for line in lines if line.tenant == TENANT_A and line.metric == REQUESTS),
        Decimal(0),
    )


def test_a_usage_record_written_after_its_window_was_rolled_up_is_counted(api: Api) -> None:
    api.clock.advance(5 * MINUTE)
    api.ctx.usage.insert_many([record("on-time", timedelta(seconds=30))])
    assert api.ctx.metering.catch_up(api.clock.utc_now()).windows == 5  # 1-minute windows
    assert requests_counted(api) == 1
    # a streamed request that started in the first window ends (and is moved) minutes later
    api.ctx.usage.insert_many([record("late", timedelta(seconds=40))])
    api.clock.advance(3 * MINUTE)
    api.ctx.metering.catch_up(api.clock.utc_now())
    assert requests_counted(api) == 2


def test_a_record_later_than_the_late_allowance_needs_a_rollup_of_its_range(api: Api) -> None:
    api.clock.advance(5 * MINUTE)
    api.ctx.metering.catch_up(api.clock.utc_now())
    api.clock.advance(timedelta(seconds=LATE_S))
    api.ctx.metering.catch_up(api.clock.utc_now())
    api.ctx.usage.insert_many([record("very-late", timedelta(seconds=40))])
    api.clock.advance(MINUTE)
    api.ctx.metering.catch_up(api.clock.utc_now())
    assert requests_counted(api) == 0  # beyond LATE_S: docs/control-plane.md says to re-roll
    api.ctx.metering.roll_up_range(T0, T0 + 5 * MINUTE)
    assert requests_counted(api) == 1


def test_passes_resume_without_counting_a_window_twice(api: Api) -> None:
    for _ in range(30):
        api.clock.advance(MINUTE + timedelta(seconds=7))
        api.ctx.metering.catch_up(api.clock.utc_now())
    rolled_to = api.ctx.rollups.last_window_end("allocation")
    assert rolled_to is not None
    lines = api.ctx.metering.lines(MeterWindow(T0, T0 + timedelta(days=1)))
    fleet = sum((line.quantity for line in lines if line.metric == "fleet_gpu_seconds"), Decimal(0))
    assert fleet == 2 * Decimal((rolled_to - T0).total_seconds())  # two GPUs, each second once


def test_each_revisions_plan_is_validated_once_over_many_passes(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    for _ in range(3):
        api.clock.advance(MINUTE)
        api.apply(SPEC_YAML + f"# {api.clock.utc_now().isoformat()}\n")
    validated: list[object] = []
    real = Plan.model_validate

    def counting(obj: object, **kwargs: object) -> Plan:
        validated.append(obj)
        return real(obj)

    monkeypatch.setattr(Plan, "model_validate", counting)
    for _ in range(5):
        api.clock.advance(MINUTE)
        api.ctx.metering.catch_up(api.clock.utc_now())
    assert len(validated) == 4  # the four revisions, once each, not once per pass


def test_a_statement_is_summed_again_only_after_a_rollup_wrote(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.clock.advance(5 * MINUTE)
    api.ctx.metering.catch_up(api.clock.utc_now())
    applied = api.ctx.current.get()
    assert applied is not None
    period = MeterWindow(T0, T0 + timedelta(days=1))
    summed: list[MeterWindow] = []
    real = api.ctx.rollups.totals

    def counting(start: datetime, end: datetime) -> dict[tuple[str, str, str, str], Decimal]:
        summed.append(MeterWindow(start, end))
        return real(start, end)

    monkeypatch.setattr(api.ctx.rollups, "totals", counting)
    first = api.ctx.metering.fleet_statement(period, applied)
    assert api.ctx.metering.fleet_statement(period, applied) is first
    assert len(summed) == 1

    api.ctx.usage.insert_many([record("late", timedelta(seconds=40))])
    api.ctx.metering.roll_up_range(T0, T0 + MINUTE)  # same windows, new rows
    again = api.ctx.metering.fleet_statement(period, applied)

    assert len(summed) == 2
    assert again is not first


def test_a_pass_within_the_first_window_after_the_first_apply_rolls_up_nothing(api: Api) -> None:
    api.clock.advance(timedelta(seconds=20))  # the spec was applied at T0; no window is whole yet
    result = api.ctx.metering.catch_up(api.clock.utc_now())
    assert result.windows == 0
    assert api.ctx.metering.plan_intervals(T0, T0) == []


def test_a_rollup_of_a_range_before_the_first_revision_rolls_up_nothing(api: Api) -> None:
    before = {
        "start": (T0 - timedelta(hours=2)).isoformat(),
        "end": (T0 - timedelta(hours=1)).isoformat(),
    }
    reply = api.post("/meter/rollup", json=before)
    assert reply.status_code == 200, reply.text
    assert reply.json()["rows"] == 0
