"""What this host tells the job runner about the jobs placed on it: for each job that holds a
GPU here, whether its process runs, or how it ended. Pure: from the host's records.

A job the host has not started yet gets no report (the runner waits); a job leaving the GPU
(`preempting`, `stopping`) whose process is gone is reported not alive, which is what lets the
runner requeue or finish it. A job the host refused to run (its command cannot start here) is
reported ended, with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuplex.core.apply.model import LIVE_PHASES, WorkloadRecord
from gpuplex.core.jobs.placement import job_workload_name
from gpuplex.core.jobs.states import LEAVING_STATES
from gpuplex.core.plan.model import replica_label
from gpuplex.store.job_reports import JobReport
from gpuplex.store.jobs import Job


def placed_on(job: Job, node: str) -> bool:
    return job.placement is not None and job.placement.get("node") == node


def job_reports(
    node: str,
    holding: Sequence[Job],
    records: Sequence[WorkloadRecord],
    refused: Mapping[str, str],
) -> list[JobReport]:
    """Reports of the `holding` jobs placed on `node`; `refused`: job id -> why it cannot run."""
    by_label = {r.label: r for r in records}
    reports = []
    for job in holding:
        if not placed_on(job, node):
            continue
        if job.id in refused:
            reports.append(JobReport(job.id, job.attempts, node, False, None, refused[job.id]))
            continue
        record = by_label.get(replica_label(job.tenant, job_workload_name(job.id), 0))
        if record is None:
            if job.state in LEAVING_STATES:  # stopped, or never started: its GPU is free
                reports.append(JobReport(job.id, job.attempts, node, False))
            continue  # not started yet
        if record.phase in LIVE_PHASES:
            reports.append(JobReport(job.id, job.attempts, node, True))
        else:
            note = record.last_exit if record.last_exit_code is None else None
            reports.append(
                JobReport(job.id, job.attempts, node, False, record.last_exit_code, note)
            )
    return reports
