"""GPU samples on their way into the store and out of it: a GPU whose samples add up to more than
its memory is refused (logged, counted, the rest of the batch stored), and raw samples are pruned
once rolled up and older than the retention, without changing what the roll-ups say."""

from __future__ import annotations

import logging
from datetime import timedelta
from decimal import Decimal

import pytest

from gpuplex.core.meter import BUSY_GPU_SECONDS, MEMORY_MIB_SECONDS, GpuSample, MeterWindow
from gpuplex.server.metering import LATE_S
from gpuplex.server.metrics.collector import exposition, metrics_registry
from gpuplex.server.metrics.sample_metrics import SampleIntakeStats
from gpuplex.server.run import Reconciler
from gpuplex.server.sample_intake import store_samples
from gpuplex.server.sample_retention import prune_samples
from gpuplex.settings import ServerSettings
from tests.integration.server.conftest import T0, TENANT_A, TENANT_B, Api

HOUR = timedelta(hours=1)
H100_MIB = 81559


def sample(
    after: timedelta, memory_mib: int, gpu_index: int = 0, tenant: str = TENANT_A
) -> GpuSample:
    return GpuSample(
        tenant=tenant,
        workload="chat" if tenant == TENANT_A else "embed",
        replica=0,
        node="node-one",
        gpu_index=gpu_index,
        at=T0 + after,
        memory_used_mib=memory_mib,
        utilization_percent=50.0,
        source="sim",
    )


def test_a_gpu_above_its_memory_is_refused_logged_and_counted(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    stats = SampleIntakeStats()
    wrong = [sample(timedelta(0), 114688), sample(timedelta(0), 2048, tenant=TENANT_B)]
    fine = sample(timedelta(0), 0, gpu_index=1)
    with caplog.at_level(logging.WARNING, "gpuplex.server.samples"):
        assert store_samples(api.ctx, [*wrong, fine], stats) == 1
    assert api.ctx.samples.window(T0, T0 + HOUR) == [fine]
    (logged,) = caplog.records
    assert "node node-one GPU 0" in logged.getMessage()
    assert f"116736 MiB on a {H100_MIB} MiB GPU" in logged.getMessage()
    (family,) = stats.families()
    assert [(s.labels, s.value) for s in family.samples] == [({"reason": "above_capacity"}, 2)]
    # the server's /metrics reports the process's counter
    assert b'gpuplex_gpu_samples_refused_total{reason="above_capacity"}' in exposition(
        metrics_registry(api.ctx)
    )


def measured(api: Api, start: timedelta, end: timedelta) -> dict[str, Decimal]:
    lines = api.ctx.metering.lines(MeterWindow(T0 + start, T0 + end))
    return {
        x.metric: x.quantity
        for x in lines
        if x.tenant == TENANT_A and x.metric in (MEMORY_MIB_SECONDS, BUSY_GPU_SECONDS)
    }


def three_hours_of_samples(api: Api) -> None:
    batch = [sample(timedelta(seconds=s), 1000 + s % 7) for s in range(0, 3 * 3600, 10)]
    assert store_samples(api.ctx, batch) == len(batch)


def test_pruning_keeps_what_the_roll_ups_say(api: Api) -> None:
    three_hours_of_samples(api)
    api.clock.advance(3 * HOUR)
    api.ctx.metering.catch_up(api.clock.utc_now())
    before = measured(api, timedelta(0), 3 * HOUR)
    assert before[BUSY_GPU_SECONDS] == Decimal(3 * 3600) / 2  # half busy, all along

    # retention 1 h: windows from T0+2h on keep their samples, and the 60 s that reach into them
    deleted = prune_samples(api.ctx, api.clock.utc_now(), retention_s=3600)
    assert deleted == len(range(0, 2 * 3600 - 60, 10))
    assert api.ctx.samples.pruned_before() == T0 + 2 * HOUR
    assert api.ctx.samples.window(T0, T0 + 2 * HOUR - timedelta(seconds=60)) == []
    assert prune_samples(api.ctx, api.clock.utc_now(), retention_s=3600) == 0  # nothing more is due

    # every window rolled up again: the pruned ones keep their measured lines, the rest are
    # recomputed from samples that are all still there
    api.ctx.metering.roll_up_range(T0, T0 + 3 * HOUR)
    assert measured(api, timedelta(0), 3 * HOUR) == before
    assert measured(api, 2 * HOUR, 3 * HOUR)[BUSY_GPU_SECONDS] == Decimal(3600) / 2


def test_samples_of_windows_not_yet_rolled_up_are_never_pruned(api: Api) -> None:
    three_hours_of_samples(api)
    api.clock.advance(HOUR)
    api.ctx.metering.catch_up(api.clock.utc_now())  # rolled up to T0+1h only
    api.clock.advance(2 * HOUR)
    prune_samples(api.ctx, api.clock.utc_now(), retention_s=60)
    kept_from = T0 + HOUR - timedelta(seconds=LATE_S + 60)
    assert api.ctx.samples.window(T0, kept_from) == []
    assert len(api.ctx.samples.window(kept_from, T0 + 3 * HOUR)) == len(
        range(int((kept_from - T0).total_seconds()), 3 * 3600, 10)
    )
    api.ctx.metering.catch_up(api.clock.utc_now())
    assert measured(api, timedelta(0), 3 * HOUR)[BUSY_GPU_SECONDS] == Decimal(3 * 3600) / 2


def test_the_reconciler_prunes_with_the_configured_retention(api: Api) -> None:
    three_hours_of_samples(api)
    api.clock.advance(3 * HOUR)
    settings = ServerSettings(store_url="unused", sample_retention_days=1 / 24)
    Reconciler(api.ctx, settings).pass_once()
    assert api.ctx.samples.pruned_before() == T0 + 2 * HOUR
    week = Reconciler(api.ctx, ServerSettings(store_url="unused"))
    api.clock.advance(HOUR)
    week.pass_once()  # 7 days by default: nothing more goes
    assert api.ctx.samples.pruned_before() == T0 + 2 * HOUR
