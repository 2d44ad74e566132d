"""What this host tells the job runner about the jobs placed on it, and which of them it runs.
Pure: from the host's records and the finished runs it keeps (host/finished.py).

A host runs a `starting` job once, for the attempt the store names, and a `running` one only while
it has its process: never one whose attempt already ran here, and never a `running` job it has no
process of (that one is reported `lost`, with the reason). For each job that holds a GPU here it
reports whether its process runs (and since when), or how it ended: when, with what exit status,
and whose doing it was (core.jobs.states.ProcessEnd). A job leaving its GPU (`preempting`,
`stopping`) whose process is gone is reported not alive, which is what lets the runner requeue or
finish it. A job the host refused to run (its command cannot start here) is reported ended, with
the reason. A job it has not started yet gets no report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from gpuplex.core.apply.model import LIVE_PHASES, FinishedRun, Phase, WorkloadRecord
from gpuplex.core.jobs.live import attempt_of
from gpuplex.core.jobs.placement import job_workload_name
from gpuplex.core.jobs.states import LEAVING_STATES, JobState, ProcessEnd
from gpuplex.core.plan.model import replica_label
from gpuplex.store.job_reports import JobReport
from gpuplex.store.jobs import Job

#: Why a running job with no process here and no record of how it ended is lost.
NO_PROCESS = "no process of it runs on its host, and nothing recorded how it ended"


def placed_on(job: Job, node: str) -> bool:
    return job.placement is not None and job.placement.get("node") == node


def job_label(job: Job) -> str:
    return replica_label(job.tenant, job_workload_name(job.id), 0)


def runs_here(job: Job, records: Sequence[WorkloadRecord], finished: Sequence[FinishedRun]) -> bool:
    """Whether the host runs `job` now: a `running` one only while its process for the store's
    attempt runs here; a `starting` one until that attempt has run here."""
    label = job_label(job)
    record = _current(job, next((r for r in records if r.label == label), None))
    if record is not None:
        return record.phase in LIVE_PHASES
    if job.state is not JobState.STARTING:
        return False
    return _finished(job, {f.label: f for f in finished}) is None


def job_reports(
    node: str,
    holding: Sequence[Job],
    records: Sequence[WorkloadRecord],
    finished: Sequence[FinishedRun],
    refused: Mapping[str, str],
) -> list[JobReport]:
    """Reports of the `holding` jobs placed on `node`; `refused`: job id -> why it cannot run."""
    by_label = {r.label: r for r in records}
    runs = {f.label: f for f in finished}
    reports = []
    for job in holding:
        if not placed_on(job, node):
            continue
        if job.id in refused:
            reports.append(
                JobReport(
                    job.id, job.attempts, node, False, None, refused[job.id], end=ProcessEnd.EXITED
                )
            )
            continue
        record = _current(job, by_label.get(job_label(job)))
        run = _finished(job, runs)
        if record is not None and (record.phase in LIVE_PHASES or record.phase is Phase.STOPPING):
            started = _utc(record.started_at_s)
            reports.append(JobReport(job.id, job.attempts, node, True, started_at=started))
        elif run is not None:
            reports.append(_ended(job, node, run))
        elif record is not None:  # ended, known only from its record
            note = record.last_exit if record.last_exit_code is None else None
            reports.append(
                JobReport(
                    job.id,
                    job.attempts,
                    node,
                    False,
                    record.last_exit_code,
                    note,
                    _utc(record.started_at_s),
                    end=ProcessEnd.EXITED,
                )
            )
        elif job.state in LEAVING_STATES:  # stopped, or never started: its GPU is free
            reports.append(JobReport(job.id, job.attempts, node, False))
        elif job.state is JobState.RUNNING:
            reports.append(
                JobReport(job.id, job.attempts, node, False, None, NO_PROCESS, end=ProcessEnd.LOST)
            )
        # starting, not started yet: nothing to say
    return reports


def done_with(node: str, holding: Sequence[Job], finished: Sequence[FinishedRun]) -> set[str]:
    """The replicas whose finished run the control plane no longer needs: no job holding a GPU
    on `node` is at that run's attempt any more (it moved on: requeued or finished)."""
    wanted = {(job_label(j), j.attempts) for j in holding if placed_on(j, node)}
    labels = {label for label, _ in wanted}
    return {
        f.label
        for f in finished
        if (f.label, f.attempt) not in wanted and not (f.attempt is None and f.label in labels)
    }


def _current(job: Job, record: WorkloadRecord | None) -> WorkloadRecord | None:
    """`record` if it is of the job's current attempt (a record from before attempts were named
    counts as one)."""
    if record is None:
        return None
    attempt = attempt_of(record.desired.env)
    return record if attempt is None or attempt == job.attempts else None


def _finished(job: Job, runs: Mapping[str, FinishedRun]) -> FinishedRun | None:
    run = runs.get(job_label(job))
    if run is None or (run.attempt is not None and run.attempt != job.attempts):
        return None
    return run


def _ended(job: Job, node: str, run: FinishedRun) -> JobReport:
    note: str | None
    if run.stopped_by is not None:
        end, note = ProcessEnd.STOPPED, run.stopped_by
    elif run.lost:
        end, note = ProcessEnd.LOST, run.note
    else:
        end, note = ProcessEnd.EXITED, run.note if run.exit_code is None else None
    return JobReport(
        job.id,
        job.attempts,
        node,
        False,
        run.exit_code,
        note,
        _utc(run.started_at_s),
        _utc(run.ended_at_s),
        end,
    )


def _utc(seconds: float | None) -> datetime | None:
    return datetime.fromtimestamp(seconds, UTC) if seconds is not None else None
