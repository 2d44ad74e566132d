"""The jobs' lifecycle step by step on one server, as the host reports processes: admitted jobs
are placed and start; a claim inside a guarantee preempts a borrower, which stops (out of the live
plan) and is queued again; cancelled and timed-out jobs hold their GPU until their process is
gone; exit codes end jobs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuplex.core.jobs.lifecycle import JobRecord, LifecycleStep, Transition, step
from gpuplex.core.jobs.placement import job_workload_name
from gpuplex.core.jobs.states import JobState, ProcessEnd
from gpuplex.core.plan import Plan, make_plan
from gpuplex.core.queues.tree import QueueTree, queue_tree
from gpuplex.core.spec import GpuplexSpec, validate_spec
from gpuplex.core.spec.jobs import JobSpec


def spec() -> GpuplexSpec:
    data: dict[str, Any] = {
        "fleet": {
            "nodes": [{"name": "n0", "gpus": [{"model": "H100-80GB", "count": 2, "mig": "off"}]}]
        },
        "tenants": [
            {"name": "contoso", "isolation": "dedicated"},
            {"name": "fabrikam", "isolation": "dedicated"},
        ],
        "queues": {
            "preemption": {"min_runtime_s": 0, "grace_s": 5},
            "organisations": [
                {
                    "name": "acme",
                    "teams": [
                        {
                            "name": "research",
                            "tenants": [
                                {"name": "contoso", "guarantee": {"gpus": 1}},
                                {"name": "fabrikam"},
                            ],
                        }
                    ],
                }
            ],
        },
    }
    parsed = validate_spec(data)
    assert isinstance(parsed, GpuplexSpec), parsed
    return parsed


class World:
    """The store's view of the jobs, moved by each step's transitions and the host's reports."""

    def __init__(self) -> None:
        self.spec = spec()
        self.plan: Plan = make_plan(self.spec)
        tree = queue_tree(self.spec)
        assert tree is not None
        self.tree: QueueTree = tree
        self.jobs: dict[str, JobRecord] = {}
        self.now = 1000.0

    def submit(self, job_id: str, tenant: str, **fields: Any) -> None:
        job = JobSpec(tenant=tenant, gpu={"count": 1}, command=["train"], **fields)  # type: ignore[arg-type]
        self.jobs[job_id] = JobRecord(job_id, job, JobState.QUEUED, submitted_s=self.now)

    def step(self, unheard: frozenset[str] = frozenset()) -> LifecycleStep:
        jobs = list(self.jobs.values())
        result = step(self.spec, self.plan, self.tree, jobs, self.now, unheard)
        for t in result.transitions:
            self.jobs[t.job_id] = applied(self.jobs[t.job_id], t, self.now)
        self.live = result.live_plan
        self.now += 1
        return result

    def report(self, job_id: str, **fields: Any) -> None:
        self.jobs[job_id] = replace(self.jobs[job_id], **fields)

    def state(self, job_id: str) -> JobState:
        return self.jobs[job_id].state

    def live_jobs(self) -> set[str]:
        return {p.workload for p in self.live.placements if p.workload.startswith("job-")}


def applied(record: JobRecord, t: Transition, now: float) -> JobRecord:
    """The record as the store has it after `t` (and the host's report of the attempt it
    ended gone with it, as the runner takes reports only for the job's current attempt)."""
    if t.state is JobState.QUEUED:
        return JobRecord(
            record.id,
            record.job,
            JobState.QUEUED,
            record.submitted_s,
            cancel_requested=record.cancel_requested,
            attempt=record.attempt + 1,
            failures=record.failures + (1 if t.counts_failure else 0),
            not_before_s=t.not_before_s,
        )
    return replace(
        record,
        state=t.state,
        placement=t.placement or record.placement,
        started_s=now if t.state is JobState.STARTING else record.started_s,
        not_before_s=None,
        preempted_for=t.preempted_for,
        stopping_to=t.stopping_to,
    )


def test_a_guarantee_reclaims_a_borrowed_gpu_and_the_borrower_is_queued_again() -> None:
    world = World()
    world.submit("f1", "fabrikam")
    world.submit("f2", "fabrikam")
    world.step()
    assert (world.state("f1"), world.state("f2")) == (JobState.STARTING, JobState.STARTING)
    assert world.live_jobs() == {job_workload_name("f1"), job_workload_name("f2")}
    world.report("f1", alive=True)
    world.report("f2", alive=True)
    world.step()
    assert world.state("f1") is JobState.RUNNING
    world.submit("c1", "contoso")
    result = world.step()
    victims = [t for t in result.transitions if t.state is JobState.PREEMPTING]
    assert [t.preempted_for for t in victims] == ["c1"]
    victim = victims[0].job_id
    assert job_workload_name(victim) not in world.live_jobs()  # out of the plan: the host stops it
    assert result.waiting["c1"] == f"preempting {victim} for it; it starts when they stop"
    # still stopping (its grace period): nothing changes, nothing more is preempted
    result = world.step()
    assert result.transitions == ()
    assert result.waiting["c1"].startswith("waiting for the work preempted for it to stop")
    world.report(victim, alive=False)
    result = world.step()
    assert world.state(victim) is JobState.QUEUED
    assert world.state("c1") is JobState.STARTING
    assert result.waiting[victim] == "the cluster is short of 1 GPU for it"


def test_a_cancelled_job_holds_its_gpu_until_its_process_is_gone() -> None:
    world = World()
    world.submit("c1", "contoso")
    world.submit("c2", "contoso")
    world.submit("c3", "contoso")
    world.step()
    for job_id in ("c1", "c2"):
        world.report(job_id, alive=True)
    world.step()
    world.report("c1", cancel_requested=True)
    world.step()
    assert world.state("c1") is JobState.STOPPING
    assert job_workload_name("c1") not in world.live_jobs()
    assert world.state("c3") is JobState.QUEUED  # c1's GPU is not free yet
    world.report("c1", alive=False)
    world.step()
    assert world.state("c1") is JobState.CANCELLED
    assert world.state("c3") is JobState.STARTING


def test_max_runtime_and_exit_codes_end_jobs() -> None:
    world = World()
    world.submit("slow", "contoso", max_runtime_s=10)
    world.submit("ok", "fabrikam")
    world.step()
    world.report("slow", alive=True)
    world.report("ok", alive=True)
    world.step()
    world.now += 20
    world.report("ok", exit_code=0)
    world.step()
    assert world.state("ok") is JobState.SUCCEEDED
    assert world.state("slow") is JobState.STOPPING
    assert world.jobs["slow"].stopping_to is JobState.TIMED_OUT
    world.report("slow", alive=False)
    world.step()
    assert world.state("slow") is JobState.TIMED_OUT
    world.submit("bad", "fabrikam")
    world.step()
    world.report("bad", alive=True, exit_code=3)
    world.step()
    assert world.state("bad") is JobState.FAILED


def test_a_job_that_ends_without_an_exit_code_fails_with_how_it_ended() -> None:
    world = World()
    world.submit("watched", "contoso")
    world.step()
    world.report("watched", alive=True)
    world.step()
    assert world.state("watched") is JobState.RUNNING
    world.report("watched", alive=False, exit_note="stopped by the VRAM watchdog")
    result = world.step()
    assert world.state("watched") is JobState.FAILED
    assert [t.reason for t in result.transitions] == ["stopped by the VRAM watchdog"]
    assert world.live_jobs() == set()


def running_world(*jobs: tuple[str, str, dict[str, Any]]) -> World:
    """A world where each of `jobs` (id, tenant, job file fields) is running."""
    world = World()
    for job_id, tenant, fields in jobs:
        world.submit(job_id, tenant, **fields)
    world.step()
    for job_id, _, _ in jobs:
        world.report(job_id, alive=True, process_started_s=world.now - 0.5)
    world.step()
    assert all(world.state(j) is JobState.RUNNING for j, _, _ in jobs)
    return world


def test_a_failed_job_is_retried_up_to_its_backoff_limit_with_doubling_waits() -> None:
    world = running_world(("r", "contoso", {"backoff_limit": 2, "backoff_initial_s": 10}))
    ended = world.now - 3
    world.report("r", alive=False, exit_code=3, ended_s=ended, end=ProcessEnd.EXITED)
    result = world.step()
    (change,) = result.transitions
    assert (change.state, change.exit_code, change.counts_failure) == (JobState.QUEUED, 3, True)
    assert change.not_before_s == ended + 10  # the wait counts from when it ended
    assert change.ended_s == ended
    assert change.reason == "exited 3; retry 1 of 2 after 10 s; queued again as attempt 2"
    assert result.waiting["r"].startswith("retry 1 of 2 after a failure: not before ")
    world.step()
    assert world.state("r") is JobState.QUEUED  # not before its time
    world.now = ended + 10
    world.step()
    assert world.state("r") is JobState.STARTING
    assert world.jobs["r"].attempt == 1
    world.report("r", alive=True)
    world.step()
    world.report("r", alive=False, exit_code=1, end=ProcessEnd.EXITED)
    second = world.step().transitions[0]
    assert second.not_before_s == world.now - 1 + 20  # doubled
    world.now += 20
    world.step()
    world.report("r", alive=False, exit_code=1, end=ProcessEnd.EXITED)
    final = world.step().transitions[0]
    assert (final.state, final.reason) == (JobState.FAILED, "exited 1; no retries left (2)")
    assert world.jobs["r"].failures == 2


def test_a_stop_by_gpuplex_or_a_lost_process_requeues_without_using_a_retry() -> None:
    world = running_world(("s", "contoso", {}), ("l", "fabrikam", {}))
    world.report("s", alive=False, exit_code=143, end=ProcessEnd.STOPPED, exit_note="host down")
    world.report("l", alive=False, end=ProcessEnd.LOST)
    changes = {t.job_id: t for t in world.step().transitions if t.state is JobState.QUEUED}
    assert changes["s"].reason == (
        "stopped when gpuplex stopped (host down); queued again as attempt 2"
    )
    assert changes["s"].exit_code == 143
    assert changes["l"].reason.startswith("lost: its process is gone and nothing recorded")
    assert not any(t.counts_failure for t in changes.values())
    assert all(t.not_before_s is None for t in changes.values())
    assert {world.jobs[j].failures for j in ("s", "l")} == {0}


def test_a_preempted_job_that_ended_by_itself_ends_as_its_exit_status_says() -> None:
    world = running_world(("f1", "fabrikam", {}), ("f2", "fabrikam", {}))
    world.submit("c1", "contoso")
    victim = next(t.job_id for t in world.step().transitions if t.state is JobState.PREEMPTING)
    world.report(victim, alive=False, exit_code=0, end=ProcessEnd.EXITED)
    world.step()
    assert world.state(victim) is JobState.SUCCEEDED  # never run a second time


def test_nothing_is_decided_on_a_node_whose_host_has_not_reported_since_the_runner_started() -> (
    None
):
    world = running_world(("f1", "fabrikam", {}), ("f2", "fabrikam", {}))
    world.report("f1", alive=False, exit_code=0, end=ProcessEnd.EXITED)  # an old report, say
    world.submit("c1", "contoso")  # would reclaim a GPU
    result = world.step(unheard=frozenset({"n0"}))
    assert result.transitions == ()  # neither the exit, nor a preemption, nor a start
    assert result.waiting["c1"] == "waiting for host n0's first report since the job runner started"
    assert world.live_jobs() == {job_workload_name("f1"), job_workload_name("f2")}
    world.step()  # heard: f1 succeeded, and c1 takes its GPU without preempting f2
    assert world.state("f1") is JobState.SUCCEEDED
    assert world.state("f2") is JobState.RUNNING
    assert world.state("c1") is JobState.STARTING


def test_the_attempt_that_ends_carries_its_exit_code_and_times() -> None:
    world = running_world(("ok", "contoso", {}))
    world.report("ok", alive=False, exit_code=0, ended_s=world.now - 2, end=ProcessEnd.EXITED)
    (change,) = world.step().transitions
    assert (change.state, change.exit_code) == (JobState.SUCCEEDED, 0)
    assert change.started_s == world.jobs["ok"].process_started_s
    assert change.ended_s is not None
