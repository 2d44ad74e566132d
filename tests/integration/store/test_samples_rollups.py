"""GPU samples and usage roll-ups on SQLite and PostgreSQL: batches in, windows out; a roll-up of a
window replaces that window's rows of its source, so re-running it never counts twice."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import Engine

from gpuplex.core.meter import GpuSample
from gpuplex.store.rollups import RollupRepository, UsageRollup
from gpuplex.store.samples import SampleRepository

T0 = datetime(2025, 3, 1, tzinfo=UTC)
HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Line:
    """The shape of gpuplex.core.meter's MeterLine."""

    tenant: str
    source: str
    metric: str
    dimension: str
    quantity: Decimal


def sample(at: datetime, tenant: str = "acme", **changes: object) -> GpuSample:
    fields: dict[str, object] = {
        "at": at,
        "node": "box",
        "gpu_index": 0,
        "tenant": tenant,
        "workload": "chat",
        "replica": 0,
        "memory_used_mib": 10_240,
        "utilization_percent": 37.5,
        "source": "sim",
    }
    return GpuSample(**(fields | changes))  # type: ignore[arg-type]


def test_samples_go_in_as_a_batch_and_come_back_by_window(engine: Engine) -> None:
    samples = SampleRepository(engine)
    batch = [
        sample(T0),
        sample(T0 + timedelta(seconds=10), "globex", gpu_uuid="GPU-1", utilization_percent=None),
        sample(T0 + HOUR),  # the window's end: out
        sample(T0 - timedelta(seconds=1)),  # before it: out
    ]
    assert samples.append(batch) == 4
    assert samples.append([]) == 0
    assert samples.window(T0, T0 + HOUR) == batch[:2]
    assert samples.window(T0, T0 + HOUR, tenant="globex") == [batch[1]]
    assert samples.window(T0, T0 + HOUR)[0].at.tzinfo is UTC
    assert samples.delete_before(T0) == 1
    assert len(samples.window(T0 - HOUR, T0 + 2 * HOUR)) == 3


def test_a_sample_comes_back_as_it_went_in_but_its_gpu_model(engine: Engine) -> None:
    """The store keeps every field of the one GpuSample type but the model, which metering fills
    in from the plan; any other field it dropped would show here."""
    samples = SampleRepository(engine)
    stored = sample(T0, gpu_uuid="GPU-7", utilization_percent=None, source="dcgm")
    samples.append([replace(stored, gpu_model="H100-80GB")])
    assert samples.window(T0, T0 + HOUR) == [stored]
    assert samples.latest() == (T0, [stored])


def lines(source: str, gpu_seconds: str) -> list[Line]:
    return [
        Line("acme", source, "gpu_seconds", "H100-80GB/mig-3g.40gb", Decimal(gpu_seconds)),
        Line("acme", source, "instance_seconds", "H100-80GB/mig-3g.40gb", Decimal("3600")),
        Line("globex", source, "gpu_seconds", "H100-80GB/dedicated", Decimal("3600.000001")),
    ]


def test_replacing_a_window_is_idempotent(engine: Engine) -> None:
    rollups = RollupRepository(engine)
    assert rollups.replace_window(T0, T0 + HOUR, "allocation", lines("allocation", "1542.86")) == 3
    once = rollups.query(None, T0, T0 + HOUR)
    rollups.replace_window(T0, T0 + HOUR, "allocation", lines("allocation", "1542.86"))
    assert rollups.query(None, T0, T0 + HOUR) == once
    assert len(once) == 3
    assert once[0] == UsageRollup(
        T0,
        T0 + HOUR,
        "acme",
        "allocation",
        "gpu_seconds",
        "H100-80GB/mig-3g.40gb",
        Decimal("1542.86"),
    )
    assert once[2].quantity == Decimal("3600.000001")  # exact, as text


def test_a_new_roll_up_of_a_window_replaces_only_that_window_and_source(engine: Engine) -> None:
    rollups = RollupRepository(engine)
    rollups.replace_window(T0, T0 + HOUR, "allocation", lines("allocation", "1"))
    rollups.replace_window(T0 + HOUR, T0 + 2 * HOUR, "allocation", lines("allocation", "2"))
    rollups.replace_window(T0, T0 + HOUR, "measured", lines("measured", "3"))
    rollups.replace_window(T0, T0 + HOUR, "allocation", lines("allocation", "4")[:1])
    rows = rollups.query("acme", T0, T0 + 2 * HOUR, metric="gpu_seconds")
    assert [(r.window_start, r.source, r.quantity) for r in rows] == [
        (T0, "allocation", Decimal("4")),
        (T0, "measured", Decimal("3")),
        (T0 + HOUR, "allocation", Decimal("2")),
    ]
    assert len(rollups.query(None, T0, T0 + HOUR, source="allocation")) == 1
    assert rollups.query(None, T0, T0 + HOUR, source="gateway") == []
    assert len(rollups.query("globex", T0, T0 + 2 * HOUR)) == 2  # allocation's first hour: gone
    assert rollups.query(None, T0 + timedelta(minutes=1), T0 + 2 * HOUR, source="measured") == []
    assert rollups.last_window_end("allocation") == T0 + 2 * HOUR
    assert rollups.last_window_end("gateway") is None


def test_an_empty_roll_up_clears_the_window(engine: Engine) -> None:
    rollups = RollupRepository(engine)
    rollups.replace_window(T0, T0 + HOUR, "gateway", lines("gateway", "1"))
    assert rollups.replace_window(T0, T0 + HOUR, "gateway", []) == 0
    assert rollups.query(None, T0, T0 + HOUR) == []


@pytest.mark.parametrize(
    ("start", "end", "source", "bad_lines", "says"),
    [
        (T0, T0, "allocation", [], "empty window"),
        (T0, T0 + HOUR, "guess", [], "unknown source"),
        (T0, T0 + HOUR, "allocation", lines("measured", "1"), "roll up per source"),
        (T0, T0 + HOUR, "allocation", lines("allocation", "1") * 2, "two lines"),
    ],
)
def test_bad_roll_ups_are_refused_and_change_nothing(
    engine: Engine,
    start: datetime,
    end: datetime,
    source: str,
    bad_lines: list[Line],
    says: str,
) -> None:
    rollups = RollupRepository(engine)
    rollups.replace_window(T0, T0 + HOUR, "allocation", lines("allocation", "1"))
    with pytest.raises(ValueError, match=says):
        rollups.replace_window(start, end, source, bad_lines)
    assert len(rollups.query(None, T0, T0 + HOUR)) == 3


def test_latest_by_replica_sums_memory_over_gpus_and_averages_utilization(engine: Engine) -> None:
    samples = SampleRepository(engine)
    assert samples.latest_by_replica() == (None, {})
    then, now = T0, T0 + timedelta(seconds=10)
    samples.append(
        [
            sample(then, memory_used_mib=1),
            sample(now, gpu_index=0, memory_used_mib=1000, utilization_percent=40.0),
            sample(now, gpu_index=1, memory_used_mib=500, utilization_percent=None),
            sample(now, gpu_index=2, memory_used_mib=24, utilization_percent=60.0),
            sample(now, "globex", workload="train", replica=3, utilization_percent=None),
        ]
    )
    sampled_at, latest = samples.latest_by_replica()
    assert sampled_at == now
    assert latest == {("acme", "chat", 0): (1524, 50.0), ("globex", "train", 3): (10_240, None)}
    samples.append([sample(now + timedelta(seconds=10), "globex", workload="train", replica=3)])
    assert samples.latest_by_replica("acme") == (now, {("acme", "chat", 0): (1524, 50.0)})
    assert samples.latest_by_replica("nobody") == (None, {})


def test_totals_sum_each_key_over_the_windows_inside_the_range(engine: Engine) -> None:
    rollups = RollupRepository(engine)
    start = datetime(2026, 11, 1, tzinfo=UTC)
    for hour, quantity in enumerate(("1.5", "2.25", "100")):
        window = start + timedelta(hours=hour)
        lines = [
            Line("acme", "allocation", "gpu_seconds", "H100-80GB/mps", Decimal(quantity)),
            Line("", "allocation", "fleet_gpu_seconds", "H100-80GB", Decimal(7200)),
        ]
        rollups.replace_window(window, window + timedelta(hours=1), "allocation", lines)

    totals = rollups.totals(start, start + timedelta(hours=2))  # the third window is outside

    assert totals == {
        ("acme", "allocation", "gpu_seconds", "H100-80GB/mps"): Decimal("3.75"),
        ("", "allocation", "fleet_gpu_seconds", "H100-80GB"): Decimal(14400),
    }
