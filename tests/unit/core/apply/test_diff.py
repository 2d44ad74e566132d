"""diff over replicas on healthy GPUs: start, keep, restart, stop; health and VRAM verdicts."""

from __future__ import annotations

import pytest

from gpuplex.core.apply.actions import StartWorkload, StopWorkload, VramStop
from gpuplex.core.apply.diff import diff, forget_removed
from gpuplex.core.apply.model import DesiredHost, Phase, WorkloadDesired, WorkloadRecord
from gpuplex.core.plan.model import Mode
from tests.unit.core.apply.factories import (
    binding,
    gpu_desired,
    health,
    host,
    mig_slice,
    record,
    settled,
    summary,
    wanted,
)

API = wanted("api", binding(Mode.DEDICATED, 0), health=health(failure_threshold=3))
SHARE0 = wanted("share", binding(Mode.TIMESLICE, 1, memory_mib=10_000))
SHARE1 = wanted("share", binding(Mode.TIMESLICE, 1, memory_mib=10_000), replica=1)
SLICE = wanted("slice", binding(Mode.MIG, 2, mig=mig_slice("1g.10gb", 0), memory_mib=9984))
CLIENT = wanted("client", binding(Mode.MPS, 3, memory_mib=4096, thread_percent=25))
GPUS = [
    gpu_desired(0),
    gpu_desired(1),
    gpu_desired(2, mig=[mig_slice("1g.10gb", 0)]),
    gpu_desired(3, mps=True),
]
ALL = [API, SHARE0, SHARE1, SLICE, CLIENT]
BASE = host(GPUS, ALL)

MOVED = SHARE0.model_copy(update={"binding": binding(Mode.TIMESLICE, 0, memory_mib=10_000)})
EDITED = SHARE0.model_copy(update={"argv": ["serve", "share", "--v2"]})


def running(*replicas: WorkloadDesired, phase: Phase = Phase.RUNNING) -> list[WorkloadRecord]:
    return [record(r, phase) for r in replicas]


def replaced(
    records: list[WorkloadRecord], label: str, new: WorkloadRecord
) -> list[WorkloadRecord]:
    return [new if r.label == label else r for r in records]


EVERYONE = running(*ALL)
OTHERS = [API, SHARE1, SLICE, CLIENT]

CASES = [
    pytest.param(
        BASE,
        [],
        0.0,
        [("start", w.label) for w in ALL],
        id="nothing-running-starts-all",
    ),
    pytest.param(BASE, EVERYONE, 0.0, [], id="all-running-nothing-to-do"),
    pytest.param(BASE, running(*ALL, phase=Phase.STARTING), 0.0, [], id="starting-is-live"),
    pytest.param(
        host(GPUS, [API, MOVED, SHARE1, SLICE, CLIENT]),
        EVERYONE,
        0.0,
        [("stop", "acme/share#0", False), ("start", "acme/share#0")],
        id="binding-changed-restarts-cleanly",
    ),
    pytest.param(
        host(GPUS, [API, EDITED, SHARE1, SLICE, CLIENT]),
        EVERYONE,
        0.0,
        [("stop", "acme/share#0", False), ("start", "acme/share#0")],
        id="spec-changed-restarts-cleanly",
    ),
    pytest.param(
        host(GPUS, [API, SHARE0, SLICE, CLIENT]),
        EVERYONE,
        0.0,
        [("stop", "acme/share#1", False)],
        id="removed-is-stopped",
    ),
    pytest.param(
        host(GPUS, OTHERS),
        [*running(*OTHERS), record(SHARE0, Phase.COMPLETED)],
        0.0,
        [],
        id="removed-and-down-is-left",
    ),
    pytest.param(
        BASE,
        [*running(*OTHERS), record(SHARE0, Phase.BACKOFF, next_start_at_s=100.0)],
        99.9,
        [],
        id="backoff-waits",
    ),
    pytest.param(
        BASE,
        [*running(*OTHERS), record(SHARE0, Phase.BACKOFF, next_start_at_s=100.0)],
        100.0,
        [("start", "acme/share#0")],
        id="backoff-over-restarts",
    ),
    pytest.param(
        host(GPUS, [API, EDITED, SHARE1, SLICE, CLIENT]),
        [*running(*OTHERS), record(SHARE0, Phase.BACKOFF, next_start_at_s=100.0)],
        1.0,
        [("start", "acme/share#0")],
        id="backoff-with-a-new-spec-starts-now",
    ),
    pytest.param(
        BASE, [*running(*OTHERS), record(SHARE0, Phase.FAILED)], 1e9, [], id="failed-waits"
    ),
    pytest.param(
        host(GPUS, [API, EDITED, SHARE1, SLICE, CLIENT]),
        [*running(*OTHERS), record(SHARE0, Phase.FAILED)],
        0.0,
        [("start", "acme/share#0")],
        id="failed-restarts-on-a-new-spec",
    ),
    pytest.param(
        BASE, [*running(*OTHERS), record(SHARE0, Phase.COMPLETED)], 1e9, [], id="completed-stays"
    ),
    pytest.param(
        BASE,
        replaced(EVERYONE, API.label, record(API, health_failures=3, healthy_at_s=0.0)),
        0.0,
        [("stop", "acme/api#0", True)],
        id="health-threshold-reached",
    ),
    pytest.param(
        BASE,
        replaced(EVERYONE, API.label, record(API, Phase.STARTING, started_at_s=0.0)),
        599.0,
        [],
        id="still-starting-within-the-start-timeout",
    ),
    pytest.param(
        BASE,
        replaced(EVERYONE, API.label, record(API, Phase.STARTING, started_at_s=0.0)),
        600.0,
        [("stop", "acme/api#0", True)],
        id="never-ready-by-the-start-timeout",
    ),
    pytest.param(
        BASE,
        replaced(EVERYONE, API.label, record(API, health_failures=2)),
        0.0,
        [],
        id="health-below-threshold",
    ),
]


@pytest.mark.parametrize(("desired", "records", "now", "expected"), CASES)
def test_diff(
    desired: DesiredHost,
    records: list[WorkloadRecord],
    now: float,
    expected: list[tuple[object, ...]],
) -> None:
    assert summary(diff(desired, settled(desired, records), now)) == expected


def test_stop_and_restart_reasons() -> None:
    moved = host(GPUS, [API, MOVED, SHARE1, SLICE, CLIENT])
    stop, start = diff(moved, settled(moved, EVERYONE), 0.0)
    assert isinstance(stop, StopWorkload)
    assert stop.reason == "moves from gpu 1 timeslice to gpu 0 timeslice"
    assert isinstance(start, StartWorkload)
    assert start.desired == MOVED
    backoff = record(
        SHARE0, Phase.BACKOFF, next_start_at_s=5.0, restarts=2, last_exit="exit code 1"
    )
    [restart] = diff(BASE, settled(BASE, replaced(EVERYONE, SHARE0.label, backoff)), 5.0)
    assert isinstance(restart, StartWorkload)
    assert restart.reason == "restart 3 after exit code 1"


@pytest.mark.parametrize(
    ("replica", "used_mib", "expected"),
    [
        (SHARE0, 11_000, []),
        (SHARE0, 11_001, [("vram", "acme/share#0")]),
        (SLICE, 80_000, []),
        (CLIENT, 80_000, []),
        (API, 80_000, []),
    ],
)
def test_vram_watchdog_polices_timeslice_only(
    replica: WorkloadDesired, used_mib: int, expected: list[tuple[object, ...]]
) -> None:
    seen = settled(BASE, EVERYONE).model_copy(
        update={"gpu_memory_by_label": {replica.label: used_mib}}
    )
    actions = diff(BASE, seen, 0.0)
    assert summary(actions) == expected
    for action in actions:
        assert isinstance(action, VramStop)
        assert (action.planned_mib, action.observed_mib, action.limit_mib) == (
            10_000,
            11_001,
            11_000,
        )


def test_vram_tolerance_comes_from_the_observation() -> None:
    seen = settled(BASE, EVERYONE).model_copy(
        update={"gpu_memory_by_label": {SHARE1.label: 10_600}, "vram_tolerance_percent": 5}
    )
    assert summary(diff(BASE, seen, 0.0)) == [("vram", "acme/share#1")]


def test_forget_removed_keeps_planned_and_live_records() -> None:
    desired = host(GPUS, [API, SHARE0])
    records = [
        record(API, Phase.FAILED),
        record(SHARE0, Phase.BACKOFF),
        record(SHARE1, Phase.RUNNING),  # removed but still running: diff will stop it
        record(SLICE, Phase.COMPLETED),  # removed and down: forgotten
        record(CLIENT, Phase.FAILED),
    ]
    kept = forget_removed(records, desired)
    assert [r.label for r in kept] == ["acme/api#0", "acme/share#0", "acme/share#1"]
