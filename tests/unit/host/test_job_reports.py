"""What a host reports of the jobs placed on it, from its records: nothing for a job it has not
started, alive while it runs, its exit status (a signal as 128 + N) once it ended, gone for a
job leaving its GPU, the reason for a job it refused, and nothing about other nodes' jobs; and
the runner takes a report only for the attempt it is about."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from gpuplex.core.apply.model import ExitStatus, Phase, WorkloadRecord
from gpuplex.core.apply.restart import after_exit
from gpuplex.core.jobs.states import JobState
from gpuplex.core.plan.model import Mode, Placement
from gpuplex.core.spec.jobs import JobSpec
from gpuplex.host.job_reports import job_reports
from gpuplex.server.job_runner import job_record
from gpuplex.store.job_reports import JobReport
from gpuplex.store.jobs import Job
from tests.unit.core.apply.factories import binding, record as replica_record, restart, wanted

NOW = datetime(2026, 11, 26, tzinfo=UTC)


def job(job_id: str, state: JobState, node: str = "box", attempts: int = 0) -> Job:
    spec = JobSpec(tenant="acme", gpu={"count": 1}, command=["train"])  # type: ignore[arg-type]
    placement = Placement(
        tenant="acme",
        workload=f"job-{job_id}",
        replica=0,
        mode=Mode.DEDICATED,
        node=node,
        gpu_indices=[0],
        gpu_model="H100-80GB",
        memory_mib=81920,
        compute_percent=100,
        reason="placed",
    ).model_dump(mode="json")
    return Job(
        id=job_id,
        tenant="acme",
        name=None,
        spec=spec,
        priority=0,
        state=state,
        reason="",
        submitted_at=NOW,
        started_at=None,
        finished_at=None,
        attempts=attempts,
        exit_code=None,
        placement=placement,
        actor="t",
        cancel_requested=False,
    )


def record(job_id: str, phase: Phase, **fields: Any) -> WorkloadRecord:
    desired = wanted(f"job-{job_id}", binding(Mode.DEDICATED, 0), restart=restart(policy="never"))
    return replica_record(desired, phase, **fields)


def test_each_job_on_this_node_is_reported_as_its_process_stands() -> None:
    killed = after_exit(record("j3", Phase.RUNNING), ExitStatus(signal=9), 100.0)
    watched = after_exit(
        record("j4", Phase.RUNNING), ExitStatus(note="stopped by the VRAM watchdog"), 100.0
    )
    reports = job_reports(
        "box",
        [
            job("j0", JobState.STARTING),  # not started yet: no report
            job("j1", JobState.RUNNING, attempts=2),
            job("j2", JobState.PREEMPTING),  # stopped: its record is gone
            job("j3", JobState.RUNNING),
            job("j4", JobState.RUNNING),
            job("j5", JobState.STARTING),  # refused here
            job("j6", JobState.RUNNING, node="elsewhere"),
        ],
        [record("j1", Phase.RUNNING, pid=7), killed, watched, record("j6", Phase.RUNNING)],
        {"j5": "the command `train` is not on the replica's PATH"},
    )
    assert reports == [
        JobReport("j1", 2, "box", True),
        JobReport("j2", 0, "box", False),
        JobReport("j3", 0, "box", False, 137, None),
        JobReport("j4", 0, "box", False, None, "stopped by the VRAM watchdog"),
        JobReport("j5", 0, "box", False, None, "the command `train` is not on the replica's PATH"),
    ]


def test_the_runner_takes_a_report_only_for_the_attempt_it_is_about() -> None:
    stale = JobReport("j1", 0, "box", False, 1, None)  # the run before it was preempted
    fresh = job_record(job("j1", JobState.STARTING, attempts=1), stale)
    assert (fresh.alive, fresh.exit_code) == (None, None)
    current = job_record(job("j1", JobState.RUNNING, attempts=1), replace(stale, attempt=1))
    assert (current.alive, current.exit_code) == (False, 1)
    stopping = job_record(job("j1", JobState.STOPPING), None)
    assert stopping.stopping_to is JobState.TIMED_OUT  # not cancelled: past its max runtime
