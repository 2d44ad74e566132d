"""What the hosts last saw of each job's process, for the runner: one row per job, replaced as the
host's view changes. A report names the attempt it is about, so a report of a run that was
preempted is never taken for the next one. Observations, like GPU samples: not audited."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from gpuplex.store.columns import aware_utc
from gpuplex.store.db import store_errors
from gpuplex.store.tables import JobReportRow


@dataclass(frozen=True, slots=True)
class JobReport:
    """`alive`: its process runs. Once it ended: `exit_code` as a shell gives it (None when
    unknown) and `note`, how it ended in words (killed by the VRAM watchdog, could not start)."""

    job_id: str
    attempt: int
    node: str
    alive: bool
    exit_code: int | None = None
    note: str | None = None


class JobReports:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def write(self, reports: Sequence[JobReport], *, now: datetime) -> None:
        """Store each report in place of the job's previous one (one transaction)."""
        if not reports:
            return
        now = aware_utc(now)
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            for report in reports:
                row = session.get(JobReportRow, report.job_id)
                if row is None:
                    row = JobReportRow(job_id=report.job_id)
                    session.add(row)
                row.attempt = report.attempt
                row.node = report.node
                row.alive = report.alive
                row.exit_code = report.exit_code
                row.note = report.note
                row.reported_at = now

    def of(self, job_ids: Collection[str]) -> dict[str, JobReport]:
        """The reports of these jobs (those that have one)."""
        if not job_ids:
            return {}
        query = select(JobReportRow).where(JobReportRow.job_id.in_(list(job_ids)))
        with store_errors(self._engine), Session(self._engine) as session:
            return {
                row.job_id: JobReport(
                    row.job_id, row.attempt, row.node, row.alive, row.exit_code, row.note
                )
                for row in session.scalars(query)
            }
