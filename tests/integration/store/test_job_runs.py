"""Job runs in the store on SQLite and PostgreSQL: entering `starting` with a placement opens a
run (the job's attempt, the node, the exact GPU share), leaving the holding states closes it in the
same step, a requeued job opens a second run, never two at once; runs are read per job and by the
time they overlap (open ones included), per tenant if asked; a placement that is not one, or a
share that would bill nothing, is refused with nothing changed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import Engine

from gpuplex.core.jobs.states import JobState
from gpuplex.core.plan.model import MigSlicePlan, Mode, Placement
from gpuplex.core.spec.jobs import JobSpec
from gpuplex.errors import JobStateError
from gpuplex.store.jobs import JobRepository

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def job_of(tenant: str, name: str | None = None) -> JobSpec:
    return JobSpec.model_validate(
        {"tenant": tenant, "name": name, "gpu": {"memory_gib": 10}, "command": ["sleep", "60"]}
    )


def placed(
    job_id: str,
    node: str = "n1",
    *,
    tenant: str = "acme",
    mode: Mode = Mode.DEDICATED,
    percent: int = 100,
    profile: str | None = None,
) -> dict[str, object]:
    mig = (
        MigSlicePlan(profile=profile, profile_id=9, start_slot=0, size_slots=4) if profile else None
    )
    return Placement(
        tenant=tenant,
        workload=f"job-{job_id}",
        replica=0,
        mode=mode,
        node=node,
        gpu_indices=[0],
        gpu_model="H100-80GB",
        mig=mig,
        memory_mib=40960,
        compute_percent=percent,
        reason="free capacity",
    ).model_dump(mode="json")


def test_a_run_opens_when_placed_and_closes_when_the_job_ends(engine: Engine) -> None:
    jobs = JobRepository(engine)
    job = jobs.submit(job_of("acme", "train"), now=T0, actor="alice")
    where = placed(job.id, mode=Mode.MIG, percent=43, profile="3g.40gb")
    jobs.transition(job.id, JobState.STARTING, "admitted", now=T0 + MINUTE, placement=where)
    [opened] = jobs.runs_of(job.id)
    assert (opened.tenant, opened.name, opened.attempt, opened.node) == ("acme", "train", 0, "n1")
    assert (opened.placement, opened.gpu_share) == (where, Decimal("0.43"))
    assert (opened.started_at, opened.ended_at, opened.end_state) == (T0 + MINUTE, None, None)
    jobs.transition(job.id, JobState.RUNNING, "started", now=T0 + 2 * MINUTE)
    assert jobs.runs_of(job.id) == [opened]  # still the one open run
    jobs.transition(job.id, JobState.SUCCEEDED, "exited 0", now=T0 + 9 * MINUTE, exit_code=0)
    [closed] = jobs.runs_of(job.id)
    assert (closed.ended_at, closed.end_state) == (T0 + 9 * MINUTE, JobState.SUCCEEDED)
    assert closed.interval().dimension == "H100-80GB/mig:3g.40gb"


def test_a_requeued_job_runs_again_as_its_next_attempt(engine: Engine) -> None:
    jobs = JobRepository(engine)
    job = jobs.submit(job_of("acme"), now=T0, actor="alice")
    jobs.transition(job.id, JobState.STARTING, "admitted", now=T0, placement=placed(job.id, "n1"))
    jobs.transition(job.id, JobState.RUNNING, "started", now=T0 + MINUTE)
    jobs.transition(job.id, JobState.PREEMPTING, "reclaimed", now=T0 + 2 * MINUTE)
    jobs.transition(job.id, JobState.QUEUED, "preempted", now=T0 + 3 * MINUTE)
    third = Decimal(1) / 3
    jobs.transition(
        job.id,
        JobState.STARTING,
        "admitted again",
        now=T0 + 5 * MINUTE,
        placement=placed(job.id, "n2", mode=Mode.TIMESLICE, percent=0),
        gpu_share=third,
    )
    first, second = jobs.runs_of(job.id)
    assert (first.attempt, first.node, first.ended_at, first.end_state) == (
        0,
        "n1",
        T0 + 3 * MINUTE,
        JobState.QUEUED,
    )
    assert (second.attempt, second.node, second.gpu_share, second.ended_at) == (
        1,
        "n2",
        third,  # exact, through the store's text
        None,
    )
    jobs.transition(job.id, JobState.STOPPING, "past its max runtime", now=T0 + 6 * MINUTE)
    jobs.transition(job.id, JobState.TIMED_OUT, "stopped", now=T0 + 7 * MINUTE)
    assert [r.end_state for r in jobs.runs_of(job.id)] == [JobState.QUEUED, JobState.TIMED_OUT]
    assert all(r.ended_at is not None for r in jobs.runs_of(job.id))


def test_a_start_that_fails_before_running_closes_its_run(engine: Engine) -> None:
    jobs = JobRepository(engine)
    job = jobs.submit(job_of("acme"), now=T0, actor="alice")
    jobs.transition(job.id, JobState.STARTING, "admitted", now=T0, placement=placed(job.id))
    jobs.transition(job.id, JobState.FAILED, "could not start", now=T0 + MINUTE)
    [run] = jobs.runs_of(job.id)
    assert (run.ended_at, run.end_state) == (T0 + MINUTE, JobState.FAILED)


def test_runs_are_read_by_the_time_they_overlap_and_per_tenant(engine: Engine) -> None:
    jobs = JobRepository(engine)
    ended = jobs.submit(job_of("acme"), now=T0, actor="a")
    jobs.transition(ended.id, JobState.STARTING, "go", now=T0, placement=placed(ended.id))
    jobs.transition(ended.id, JobState.CANCELLED, "cancelled", now=T0 + 10 * MINUTE)
    running = jobs.submit(job_of("globex"), now=T0, actor="b")
    jobs.transition(
        running.id,
        JobState.STARTING,
        "go",
        now=T0 + 20 * MINUTE,
        placement=placed(running.id, tenant="globex"),
    )

    def ids(start: datetime, end: datetime, tenant: str | None = None) -> list[str]:
        return [r.job_id for r in jobs.runs(start, end, tenant)]

    assert ids(T0, T0 + MINUTE) == [ended.id]
    assert ids(T0 + 10 * MINUTE, T0 + 20 * MINUTE) == []  # ended at the start, began at the end
    assert ids(T0 + 9 * MINUTE, T0 + 21 * MINUTE) == [ended.id, running.id]
    assert ids(T0 + 400 * MINUTE, T0 + 401 * MINUTE) == [running.id]  # open: still holding
    assert ids(T0, T0 + 30 * MINUTE, "acme") == [ended.id]
    assert ids(T0, T0 + 30 * MINUTE, "globex") == [running.id]
    assert ids(T0 - 10 * MINUTE, T0) == []


def test_a_transition_without_a_placement_opens_no_run(engine: Engine) -> None:
    jobs = JobRepository(engine)
    job = jobs.submit(job_of("acme"), now=T0, actor="alice")
    jobs.transition(job.id, JobState.STARTING, "admitted", now=T0)
    jobs.transition(job.id, JobState.CANCELLED, "cancelled", now=T0 + MINUTE)
    assert jobs.runs_of(job.id) == []


@pytest.mark.parametrize(
    ("placement", "share", "message"),
    [
        pytest.param({"node": "n1"}, None, "not a plan placement", id="not-a-placement"),
        pytest.param(
            placed("j", mode=Mode.TIMESLICE, percent=0), None, "bill nothing", id="unnamed-share"
        ),
        pytest.param(placed("j"), Decimal(0), "bill nothing", id="zero-share"),
        pytest.param(placed("j"), Decimal("0." + "1" * 40), "digits", id="too-many-digits"),
    ],
)
def test_a_run_that_would_bill_wrongly_is_refused_with_nothing_changed(
    engine: Engine, placement: dict[str, object], share: Decimal | None, message: str
) -> None:
    jobs = JobRepository(engine)
    job = jobs.submit(job_of("acme"), now=T0, actor="alice")
    with pytest.raises(JobStateError, match=message):
        jobs.transition(
            job.id, JobState.STARTING, "admitted", now=T0, placement=placement, gpu_share=share
        )
    assert jobs.runs_of(job.id) == []
    after = jobs.get(job.id)
    assert after is not None
    assert (after.state, after.placement) == (JobState.QUEUED, None)
    assert [e.state for e in jobs.events(job.id)] == [JobState.QUEUED]
