"""Jobs in the store on SQLite and PostgreSQL: submit (audited, first event), read back as
validated, listed per tenant and state with no tenant seeing another's, cancelled (a queued job at
once, a running one marked for the runner, a finished one refused), and moved through the state
machine with an event and an audit entry per step, moves it forbids refused with nothing changed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine

from gpuplex.core.jobs.states import JobState
from gpuplex.core.plan.model import Mode, Placement
from gpuplex.core.spec.jobs import JobSpec
from gpuplex.errors import JobStateError, NotFoundError
from gpuplex.store.audit import AuditLog, verify_audit
from gpuplex.store.jobs import SYSTEM_ACTOR, JobRepository, new_job_id

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def job_of(tenant: str, **fields: object) -> JobSpec:
    return JobSpec.model_validate(
        {"tenant": tenant, "gpu": {"memory_gib": 10}, "command": ["sleep", "60"], **fields}
    )


def placed_on(node: str, tenant: str = "acme", job_id: str = "j1") -> dict[str, object]:
    """A whole H100 on `node`, as the runner records a job's placement."""
    return Placement(
        tenant=tenant,
        workload=f"job-{job_id}",
        replica=0,
        mode=Mode.DEDICATED,
        node=node,
        gpu_indices=[0],
        gpu_model="H100-80GB",
        memory_mib=81559,
        compute_percent=100,
        reason="free capacity",
    ).model_dump(mode="json")


def repository(engine: Engine, ids: list[str] | None = None) -> JobRepository:
    """The repository; with `ids`, drawing its ids from that list, so a test can name them."""
    if ids is None:
        return JobRepository(engine)
    source = iter(ids)
    return JobRepository(engine, new_id=lambda: next(source))


def test_a_new_job_id_is_a_short_dns_label() -> None:
    made = {new_job_id() for _ in range(200)}
    assert len(made) == 200
    for job_id in made:
        assert len(job_id) == 9
        assert job_id[0] == "j"
        int(job_id[1:], 16)
        assert job_id == job_id.lower()


def test_submit_stores_a_queued_job_with_its_event_and_an_audit_entry(engine: Engine) -> None:
    jobs = repository(engine, ["j00000001"])
    spec = job_of("acme", name="train", priority=5, env={"SEED": "1"}, max_runtime_s=600)
    job = jobs.submit(spec, now=T0, actor="alice")
    assert (job.id, job.tenant, job.name, job.priority) == ("j00000001", "acme", "train", 5)
    assert (job.state, job.attempts, job.cancel_requested) == (JobState.QUEUED, 0, False)
    assert (job.submitted_at, job.started_at, job.finished_at) == (T0, None, None)
    assert job.spec == spec
    assert jobs.get("j00000001") == job
    assert [(e.state, e.at) for e in jobs.events(job.id)] == [(JobState.QUEUED, T0)]
    [entry] = AuditLog(engine).entries("job.submit")
    assert (entry.actor, entry.target, entry.tenant) == ("alice", "acme/j00000001", "acme")
    assert "SEED" not in str(entry.after)  # the job's env stays out of the log
    assert verify_audit(engine).ok


def test_an_id_already_taken_is_drawn_again(engine: Engine) -> None:
    jobs = repository(engine, ["j00000001", "j00000001", "j00000002"])
    assert jobs.submit(job_of("acme"), now=T0, actor="a").id == "j00000001"
    assert jobs.submit(job_of("acme"), now=T0, actor="a").id == "j00000002"


def test_tenants_never_see_each_others_jobs(engine: Engine) -> None:
    jobs = repository(engine, ["j0000000a", "j0000000b", "j0000000c"])
    a1 = jobs.submit(job_of("acme"), now=T0, actor="a")
    b1 = jobs.submit(job_of("globex"), now=T0 + MINUTE, actor="b")
    a2 = jobs.submit(job_of("acme"), now=T0 + 2 * MINUTE, actor="a")
    assert [j.id for j in jobs.list("acme")] == [a2.id, a1.id]  # newest first
    assert [j.id for j in jobs.list("globex")] == [b1.id]
    assert jobs.get(b1.id, "acme") is None
    assert jobs.get(b1.id, "globex") == b1
    with pytest.raises(NotFoundError):
        jobs.request_cancel(b1.id, "acme", now=T0, actor="a")
    assert jobs.get(b1.id) == b1  # untouched


def test_list_by_state_and_the_runners_view_of_every_active_job(engine: Engine) -> None:
    jobs = repository(engine, ["j00000001", "j00000002", "j00000003"])
    first = jobs.submit(job_of("acme"), now=T0, actor="a")
    second = jobs.submit(job_of("globex"), now=T0 + MINUTE, actor="b")
    third = jobs.submit(job_of("acme"), now=T0 + 2 * MINUTE, actor="a")
    jobs.transition(first.id, JobState.STARTING, "admitted", now=T0 + MINUTE)
    jobs.request_cancel(third.id, "acme", now=T0 + MINUTE, actor="a")
    assert [j.id for j in jobs.list("acme", [JobState.QUEUED])] == []
    assert [j.id for j in jobs.list("acme", [JobState.STARTING, JobState.CANCELLED])] == [
        third.id,
        first.id,
    ]
    assert [j.id for j in jobs.active()] == [first.id, second.id]  # oldest first, all tenants


def test_a_queued_job_is_cancelled_at_once(engine: Engine) -> None:
    jobs = repository(engine)
    job = jobs.submit(job_of("acme"), now=T0, actor="alice")
    cancelled = jobs.request_cancel(job.id, "acme", now=T0 + MINUTE, actor="bob")
    assert (cancelled.state, cancelled.cancel_requested) == (JobState.CANCELLED, True)
    assert cancelled.finished_at == T0 + MINUTE
    assert "bob" in cancelled.reason
    assert [e.state for e in jobs.events(job.id)] == [JobState.QUEUED, JobState.CANCELLED]
    [entry] = AuditLog(engine).entries("job.cancel")
    assert entry.actor == "bob"
    assert entry.before["state"] == "queued"
    assert entry.after["state"] == "cancelled"
    with pytest.raises(JobStateError, match="nothing to cancel"):
        jobs.request_cancel(job.id, "acme", now=T0 + 2 * MINUTE, actor="bob")
    assert len(AuditLog(engine).entries("job.cancel")) == 1


def test_a_running_job_is_marked_and_left_to_the_runner(engine: Engine) -> None:
    jobs = repository(engine)
    job = jobs.submit(job_of("acme"), now=T0, actor="alice")
    jobs.transition(job.id, JobState.STARTING, "admitted", now=T0, placement=placed_on("n1"))
    jobs.transition(job.id, JobState.RUNNING, "started", now=T0 + MINUTE)
    marked = jobs.request_cancel(job.id, "acme", now=T0 + 2 * MINUTE, actor="bob")
    assert (marked.state, marked.cancel_requested) == (JobState.RUNNING, True)
    assert marked.finished_at is None
    stopped = jobs.transition(job.id, JobState.CANCELLED, "stopped", now=T0 + 3 * MINUTE)
    assert stopped.state is JobState.CANCELLED
    assert stopped.finished_at == T0 + 3 * MINUTE


def test_a_job_through_preemption_to_success(engine: Engine) -> None:
    jobs = repository(engine)
    job = jobs.submit(job_of("acme"), now=T0, actor="alice")
    placed = jobs.transition(
        job.id, JobState.STARTING, "admitted", now=T0, placement=placed_on("n1", job_id=job.id)
    )
    assert placed.placement == placed_on("n1", job_id=job.id)
    running = jobs.transition(job.id, JobState.RUNNING, "started", now=T0 + MINUTE)
    assert running.started_at == T0 + MINUTE
    jobs.transition(job.id, JobState.PREEMPTING, "reclaimed for j2", now=T0 + 2 * MINUTE)
    requeued = jobs.transition(job.id, JobState.QUEUED, "preempted", now=T0 + 3 * MINUTE)
    assert (requeued.attempts, requeued.placement, requeued.started_at) == (1, None, None)
    jobs.transition(job.id, JobState.STARTING, "admitted again", now=T0 + 4 * MINUTE)
    jobs.transition(job.id, JobState.RUNNING, "started", now=T0 + 5 * MINUTE)
    done = jobs.transition(job.id, JobState.SUCCEEDED, "exited 0", now=T0 + 9 * MINUTE, exit_code=0)
    assert (done.exit_code, done.finished_at, done.attempts) == (0, T0 + 9 * MINUTE, 1)
    assert [e.state.value for e in jobs.events(job.id)] == [
        "queued",
        "starting",
        "running",
        "preempting",
        "queued",
        "starting",
        "running",
        "succeeded",
    ]
    system = [e for e in AuditLog(engine).entries() if e.action.startswith("job.")]
    assert {e.actor for e in system if e.action != "job.submit"} == {SYSTEM_ACTOR}
    assert len(system) == 8
    assert verify_audit(engine).ok


@pytest.mark.parametrize(
    ("path", "refused"),
    [
        ([], JobState.RUNNING),  # queued -> running skips starting
        ([], JobState.SUCCEEDED),
        ([JobState.CANCELLED], JobState.QUEUED),  # finished: never moves again
        ([JobState.STARTING, JobState.RUNNING, JobState.TIMED_OUT], JobState.RUNNING),
    ],
)
def test_a_move_the_state_machine_forbids_changes_nothing(
    engine: Engine, path: list[JobState], refused: JobState
) -> None:
    jobs = repository(engine)
    job = jobs.submit(job_of("acme"), now=T0, actor="alice")
    for state in path:
        job = jobs.transition(job.id, state, "step", now=T0)
    entries = len(AuditLog(engine).entries())
    with pytest.raises(JobStateError):
        jobs.transition(job.id, refused, "not allowed", now=T0 + MINUTE)
    assert jobs.get(job.id) == job
    assert len(jobs.events(job.id)) == len(path) + 1
    assert len(AuditLog(engine).entries()) == entries


def test_an_unknown_job_is_not_found(engine: Engine) -> None:
    jobs = repository(engine)
    assert jobs.get("j12345678") is None
    with pytest.raises(NotFoundError):
        jobs.transition("j12345678", JobState.STARTING, "x", now=T0)
