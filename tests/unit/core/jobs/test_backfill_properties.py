"""Backfill with reservations over random job streams on two 8-GPU nodes, driven as the job runner
and a host would drive the lifecycle step (a step every 10 s; a process ends by itself when its
runtime is up, or is stopped at its max runtime and gone within its grace period):

- a reserved job's start is never delayed by a job that arrived later with no higher priority:
  it starts by the first start time it was promised, give or take the two steps a stop takes
  to be seen;
- no job waits forever: every job of a finite stream starts;
- no GPU ever holds two jobs."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings, strategies as st

from gpuplex.core.jobs.lifecycle import JobRecord
from gpuplex.core.jobs.states import FINISHED_STATES, HOLDING_STATES, LEAVING_STATES, JobState
from tests.unit.core.jobs.test_backfill import Cluster, two_nodes_spec

TICK_S = 10.0
#: a blocker stopped at its max runtime is stopped at the first step after it, and seen gone at
#: the next: its GPUs free up to two steps after its max runtime (and the promise counts its
#: grace period on top)
SLACK_S = 2 * TICK_S


@dataclass(frozen=True)
class Arrival:
    tick: int
    gpus: int
    max_runtime_s: int
    runs_s: int  # how long its process runs if not stopped (may pass its max runtime)
    priority: int
    tenant: str


def arrivals(tenants: tuple[str, ...]) -> st.SearchStrategy[list[Arrival]]:
    one = st.builds(
        Arrival,
        tick=st.integers(0, 40),
        gpus=st.sampled_from([1, 1, 1, 2, 4, 8]),
        max_runtime_s=st.integers(3, 60).map(lambda n: n * 10),
        runs_s=st.integers(1, 70).map(lambda n: n * 10),
        priority=st.integers(0, 1),
        tenant=st.sampled_from(tenants),
    )
    return st.lists(one, min_size=1, max_size=30).map(lambda xs: sorted(xs, key=lambda a: a.tick))


@dataclass
class Run:
    promised: dict[str, float]  # job -> the first start time a reservation promised it
    promised_at: dict[str, float]  # job -> when
    started: dict[str, float]
    submitted: dict[str, float]


def drive(cluster: Cluster, stream: list[Arrival]) -> Run:
    run = Run({}, {}, {}, {})
    runs = {f"j{n:03d}": a for n, a in enumerate(stream)}
    pending = list(runs.items())
    last_tick = max(a.tick for a in stream) + sum(a.max_runtime_s for a in stream) // 10 + 50
    for tick in range(last_tick):
        while pending and pending[0][1].tick <= tick:
            job_id, a = pending.pop(0)
            cluster.submit(
                job_id,
                a.gpus,
                a.tenant,
                max_runtime_s=a.max_runtime_s,
                priority=a.priority,
            )
            run.submitted[job_id] = cluster.now
        for job_id, record in list(cluster.jobs.items()):  # the host: processes end
            if record.state in LEAVING_STATES:  # stopped: SIGTERM, gone within its grace
                cluster.stop(job_id)
            elif record.state in HOLDING_STATES and _ran_its_course(
                record, cluster.now, runs[job_id]
            ):
                cluster.end(job_id)
        result = cluster.step()
        for change in result.transitions:
            if change.state is JobState.STARTING:
                run.started.setdefault(change.job_id, cluster.now)
        reservation = result.reservation
        if reservation is not None and reservation.start_s is not None:
            run.promised.setdefault(reservation.job_id, reservation.start_s)
            run.promised_at.setdefault(reservation.job_id, cluster.now)
        held = [
            (r.placement.node, i)
            for r in cluster.jobs.values()
            if r.state in HOLDING_STATES and r.placement is not None
            for i in r.placement.gpu_indices
        ]
        assert len(held) == len(set(held)), held
        if not pending and all(r.state in FINISHED_STATES for r in cluster.jobs.values()):
            break
        cluster.now += TICK_S
    return run


def _ran_its_course(record: JobRecord, now: float, arrival: Arrival) -> bool:
    return record.started_s is not None and now - record.started_s >= arrival.runs_s


def check_promises(run: Run, stream: list[Arrival]) -> None:
    by_id = {f"j{n:03d}": a for n, a in enumerate(stream)}
    for job_id, promise in run.promised.items():
        mine = by_id[job_id]
        overtaken = any(  # a later job the rules may put ahead of it
            run.submitted[other] >= run.submitted[job_id] and by_id[other].priority > mine.priority
            for other in run.submitted
            if other != job_id
        )
        if overtaken:
            continue
        assert job_id in run.started, f"{job_id} was promised {promise} and never started"
        assert run.started[job_id] <= promise + SLACK_S, (job_id, promise, run.started[job_id])


@settings(max_examples=150, deadline=None)
@given(arrivals(("acme",)))
def test_one_tenant_reserved_jobs_start_when_promised_and_every_job_starts(
    stream: list[Arrival],
) -> None:
    cluster = Cluster(two_nodes_spec())
    run = drive(cluster, stream)
    assert set(run.started) == set(run.submitted), "a job waited for ever"
    check_promises(run, stream)


@settings(max_examples=100, deadline=None)
@given(arrivals(("acme", "globex")))
def test_two_tenants_every_job_starts_and_no_gpu_is_held_twice(stream: list[Arrival]) -> None:
    cluster = Cluster(two_nodes_spec(tenants=(("acme", 8), ("globex", 8))))
    run = drive(cluster, stream)
    assert set(run.started) == set(run.submitted), "a job waited for ever"
