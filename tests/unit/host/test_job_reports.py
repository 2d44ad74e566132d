"""What a host reports of the jobs placed on it, from its records and the runs it keeps: nothing
for a job it has not started, alive (since when) while it runs or drains, how it ended (when, its
exit status, whose doing: its own, gpuplex's stop, or lost), gone for a job leaving its GPU, the
reason for a job it refused, and nothing about other nodes' jobs; which jobs it runs (once per
attempt); and the runner takes a report only for the attempt it is about."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from gpuplex.core.apply.model import FinishedRun, Phase, WorkloadRecord
from gpuplex.core.jobs.live import attempt_env
from gpuplex.core.jobs.states import JobState, ProcessEnd
from gpuplex.core.plan.model import Mode, Placement
from gpuplex.core.spec.jobs import JobSpec
from gpuplex.host.job_reports import NO_PROCESS, done_with, job_reports, runs_here
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


def record(job_id: str, phase: Phase, attempt: int = 0, **fields: Any) -> WorkloadRecord:
    desired = wanted(
        f"job-{job_id}",
        binding(Mode.DEDICATED, 0),
        restart=restart(policy="never"),
        env=attempt_env(attempt),
    )
    return replica_record(desired, phase, **fields)


def finished(job_id: str, attempt: int = 0, **fields: Any) -> FinishedRun:
    return FinishedRun(
        label=f"acme/job-{job_id}#0", attempt=attempt, started_at_s=90.0, ended_at_s=100.0, **fields
    )


AT_90 = datetime.fromtimestamp(90.0, UTC)
AT_100 = datetime.fromtimestamp(100.0, UTC)


def test_each_job_on_this_node_is_reported_as_its_process_stands() -> None:
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
            job("j7", JobState.RUNNING),  # stopped by gpuplex itself (host down)
            job("j8", JobState.RUNNING),  # no process here, no record of how it ended
            job("j9", JobState.RUNNING, attempts=1),  # only an earlier attempt's end is known
            job("ja", JobState.PREEMPTING),  # stopping: still draining
        ],
        [
            record("j1", Phase.RUNNING, attempt=2, pid=7, started_at_s=90.0),
            record("j6", Phase.RUNNING),
            record("ja", Phase.STOPPING, pid=8, started_at_s=90.0),
        ],
        [
            finished("j3", exit_code=137, note="SIGKILL"),
            finished("j4", note="stopped by the VRAM watchdog"),
            finished("j7", exit_code=143, stopped_by="gpuplex host down"),
            finished("j9", attempt=0, exit_code=1),
        ],
        {"j5": "the command `train` is not on the replica's PATH"},
    )
    assert reports == [
        JobReport("j1", 2, "box", True, started_at=AT_90),
        JobReport("j2", 0, "box", False),
        JobReport("j3", 0, "box", False, 137, None, AT_90, AT_100, ProcessEnd.EXITED),
        JobReport(
            "j4",
            0,
            "box",
            False,
            None,
            "stopped by the VRAM watchdog",
            AT_90,
            AT_100,
            ProcessEnd.EXITED,
        ),
        JobReport(
            "j5",
            0,
            "box",
            False,
            None,
            "the command `train` is not on the replica's PATH",
            end=ProcessEnd.EXITED,
        ),
        JobReport(
            "j7", 0, "box", False, 143, "gpuplex host down", AT_90, AT_100, ProcessEnd.STOPPED
        ),
        JobReport("j8", 0, "box", False, None, NO_PROCESS, end=ProcessEnd.LOST),
        JobReport("j9", 1, "box", False, None, NO_PROCESS, end=ProcessEnd.LOST),
        JobReport("ja", 0, "box", True, started_at=AT_90),
    ]


def test_a_host_runs_a_job_once_per_attempt_and_never_a_running_one_it_has_no_process_of() -> None:
    ended = [finished("j1", attempt=0, exit_code=0)]
    # starting: run it, unless this attempt already ran here (ended while the runner was away)
    assert runs_here(job("j1", JobState.STARTING, attempts=1), [], ended)
    assert not runs_here(job("j1", JobState.STARTING, attempts=0), [], ended)
    assert not runs_here(job("j1", JobState.STARTING), [record("j1", Phase.COMPLETED)], [])
    # running: only while its process for this attempt runs here
    assert runs_here(job("j2", JobState.RUNNING), [record("j2", Phase.RUNNING)], [])
    assert not runs_here(job("j2", JobState.RUNNING), [], [])
    assert not runs_here(job("j2", JobState.RUNNING, attempts=1), [record("j2", Phase.RUNNING)], [])


def test_a_finished_run_is_kept_until_the_job_has_moved_on() -> None:
    runs = [finished("j1", attempt=0), finished("j2", attempt=0), finished("j3", attempt=1)]
    holding = [job("j1", JobState.RUNNING), job("j3", JobState.RUNNING, attempts=2)]
    # j1 is still at the attempt that ended (the runner has not taken it yet); j2 finished or
    # went back to the queue; j3 is at a later attempt
    assert done_with("box", holding, runs) == {"acme/job-j2#0", "acme/job-j3#0"}


def test_the_runner_takes_a_report_only_for_the_attempt_it_is_about() -> None:
    stale = JobReport("j1", 0, "box", False, 1, None)  # the run before it was preempted
    fresh = job_record(job("j1", JobState.STARTING, attempts=1), stale)
    assert (fresh.alive, fresh.exit_code) == (None, None)
    current = job_record(job("j1", JobState.RUNNING, attempts=1), replace(stale, attempt=1))
    assert (current.alive, current.exit_code) == (False, 1)
    stopping = job_record(job("j1", JobState.STOPPING), None)
    assert stopping.stopping_to is JobState.TIMED_OUT  # not cancelled: past its max runtime
