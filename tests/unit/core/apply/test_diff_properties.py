"""Properties of diff over random specs and plans: it converges, it is idempotent, and it never
stops a replica that runs as desired on a healthy GPU."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings, strategies as st

from gpuplex.core.apply.actions import (
    CreateMigInstance,
    DestroyMigInstance,
    HostAction,
    StartMpsDaemon,
    StartWorkload,
    StopMpsDaemon,
    StopWorkload,
    VramStop,
)
from gpuplex.core.apply.desired import desired_host
from gpuplex.core.apply.diff import HostObservation, diff
from gpuplex.core.apply.model import DesiredHost, Phase, WorkloadRecord
from gpuplex.core.plan import make_plan
from gpuplex.core.plan.model import Mode
from gpuplex.core.spec import GpuplexSpec
from tests.unit.core.apply.factories import matching_gpus, record, settled
from tests.unit.core.plan.specs import specs

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


RANK: dict[type, int] = {
    StopWorkload: 0,
    VramStop: 0,
    DestroyMigInstance: 1,
    CreateMigInstance: 2,
    StartMpsDaemon: 3,
    StopMpsDaemon: 3,
    StartWorkload: 4,
}


def runnable(spec: GpuplexSpec) -> GpuplexSpec:
    """The spec with a command and a health check on every workload."""
    raw: dict[str, Any] = spec.model_dump(mode="json")
    for tenant in raw["tenants"]:
        for workload in tenant["workloads"]:
            workload["command"] = ["run", workload["name"], "{replica}"]
            workload["health"] = {"failure_threshold": 2}
    return GpuplexSpec.model_validate(raw)


@st.composite
def desired_hosts(draw: st.DrawFn) -> DesiredHost:
    spec = runnable(draw(specs(max_nodes=2)))
    plan = make_plan(spec)
    node = draw(st.sampled_from([n.name for n in spec.fleet.nodes]))
    desired = desired_host(spec, plan, node)
    assert desired.notes == []
    return desired


def is_start(action: HostAction) -> bool:
    return isinstance(action, StartWorkload)


def stopped_labels(actions: list[HostAction]) -> set[str]:
    return {a.label for a in actions if isinstance(a, StopWorkload | VramStop)}


@SETTINGS
@given(data=st.data(), desired=desired_hosts())
def test_starting_what_is_missing_converges_in_one_step(
    data: st.DataObject, desired: DesiredHost
) -> None:
    labels = [w.label for w in desired.workloads]
    up = data.draw(st.sets(st.sampled_from(labels)) if labels else st.just(set[str]()))
    records = [record(w) for w in desired.workloads if w.label in up]
    actions = diff(desired, settled(desired, records), 100.0)
    assert [a.desired.label for a in actions if isinstance(a, StartWorkload)] == [
        label for label in labels if label not in up
    ]
    assert [a for a in actions if not is_start(a)] == []

    started = [record(a.desired, Phase.RUNNING) for a in actions if isinstance(a, StartWorkload)]
    again = diff(desired, settled(desired, [*records, *started]), 101.0)
    assert again == []


@SETTINGS
@given(data=st.data(), desired=desired_hosts())
def test_never_stops_a_replica_that_runs_as_desired_on_a_fine_gpu(
    data: st.DataObject, desired: DesiredHost
) -> None:
    labels = [w.label for w in desired.workloads]
    gpus = [g.index for g in desired.gpus]
    mps_gpus = [g.index for g in desired.gpus if g.mps]

    def subset(items: list[Any]) -> set[Any]:
        return data.draw(st.sets(st.sampled_from(items)) if items else st.just(set()))

    up, unhealthy, greedy = subset(labels), subset(labels), subset(labels)
    lost, dead_mps = subset(gpus), subset(mps_gpus)

    records: list[WorkloadRecord] = [
        record(w, health_failures=2 if w.label in unhealthy else 1, healthy_at_s=0.0)
        for w in desired.workloads
        if w.label in up
    ]
    base = settled(desired, records)
    seen: HostObservation = base.model_copy(
        update={
            "gpus": [
                g.model_copy(update={"lost": g.index in lost}) for g in matching_gpus(desired)
            ],
            "mps_alive": {i: i not in dead_mps for i in base.mps_alive},
            "gpu_memory_by_label": {
                w.label: w.binding.memory_mib * 2 + 1 if w.label in greedy else w.binding.memory_mib
                for w in desired.workloads
            },
        }
    )
    actions = diff(desired, seen, 100.0)
    stopped = stopped_labels(actions)
    started = {a.desired.label for a in actions if isinstance(a, StartWorkload)}
    for w in desired.workloads:
        on_lost = bool(lost & set(w.binding.gpu_indices))
        mps_died = w.binding.mode is Mode.MPS and w.binding.gpu_indices[0] in dead_mps
        over = w.binding.mode is Mode.TIMESLICE and w.label in greedy
        fine = not (on_lost or mps_died or w.label in unhealthy or over)
        if w.label not in up:
            assert w.label not in stopped
            assert (w.label in started) == (not on_lost)
        elif fine:
            assert w.label not in stopped, (w.label, actions)
            assert w.label not in started
        else:
            assert w.label in stopped, (w.label, actions)
    assert all(not s.startswith("GPU") for s in stopped)
    ranks = [RANK[type(a)] for a in actions if type(a) in RANK]
    assert ranks == sorted(ranks), actions  # stops, then MIG, then MPS daemons, then starts
