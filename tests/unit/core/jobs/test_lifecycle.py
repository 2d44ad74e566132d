"""The jobs' lifecycle step by step on one server, as the host reports processes: admitted jobs
are placed and start; a claim inside a guarantee preempts a borrower, which stops (out of the live
plan) and is queued again; cancelled and timed-out jobs hold their GPU until their process is
gone; exit codes end jobs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpuplex.core.jobs.lifecycle import JobRecord, LifecycleStep, Transition, step
from gpuplex.core.jobs.placement import job_workload_name
from gpuplex.core.jobs.states import JobState
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

    def step(self) -> LifecycleStep:
        result = step(self.spec, self.plan, self.tree, list(self.jobs.values()), self.now)
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
    if t.state is JobState.QUEUED:
        return JobRecord(record.id, record.job, JobState.QUEUED, record.submitted_s)
    return replace(
        record,
        state=t.state,
        placement=t.placement or record.placement,
        started_s=now if t.state is JobState.STARTING else record.started_s,
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
