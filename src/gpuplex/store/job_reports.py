"""What the hosts last saw of each job's process, for the runner: one row per job, replaced as the
host's view changes. A report names the attempt it is about, so a report of a run that was
preempted is never taken for the next one; it says when the host started the process and saw it
end (what the attempt is billed by), and how it ended (core.jobs.states.ProcessEnd).

Each host also says when it last reported and when it started (`host_reports`): the runner takes
nothing a host reports as current until that host has reported since the runner started.
Observations, like GPU samples: not audited."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from gpuplex.core.jobs.states import ProcessEnd
from gpuplex.store.columns import aware_utc
from gpuplex.store.db import store_errors
from gpuplex.store.tables import HostReportRow, JobReportRow


@dataclass(frozen=True, slots=True)
class JobReport:
    """`alive`: its process runs. Once it ended: `exit_code` as a shell gives it (None when
    unknown) and `note`, how it ended in words (killed by the VRAM watchdog, could not start),
    `end`, whose doing it was, and `ended_at`, when. `started_at`: when the host started it."""

    job_id: str
    attempt: int
    node: str
    alive: bool
    exit_code: int | None = None
    note: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    end: ProcessEnd | None = None


@dataclass(frozen=True, slots=True)
class HostReport:
    """When a node's host runtime last reported its jobs, and when that host runtime started."""

    node: str
    started_at: datetime
    reported_at: datetime


class JobReports:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def write(
        self,
        reports: Sequence[JobReport],
        *,
        now: datetime,
        host: tuple[str, datetime] | None = None,
    ) -> None:
        """Store each report in place of the job's previous one, and with `host` (its node and
        when its host runtime started) that this host reported now, all in one transaction: a
        runner that sees the host's report sees its jobs' reports too."""
        if not reports and host is None:
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
                row.started_at = _utc(report.started_at)
                row.ended_at = _utc(report.ended_at)
                row.end = report.end.value if report.end is not None else None
                row.reported_at = now
            if host is not None:
                node, started = host
                heard = session.get(HostReportRow, node)
                if heard is None:
                    heard = HostReportRow(node=node)
                    session.add(heard)
                heard.started_at = aware_utc(started)
                heard.reported_at = now

    def of(self, job_ids: Collection[str]) -> dict[str, JobReport]:
        """The reports of these jobs (those that have one)."""
        if not job_ids:
            return {}
        query = select(JobReportRow).where(JobReportRow.job_id.in_(list(job_ids)))
        with store_errors(self._engine), Session(self._engine) as session:
            return {row.job_id: _report(row) for row in session.scalars(query)}

    def hosts(self) -> dict[str, HostReport]:
        """Every node's host's last report, by node."""
        with store_errors(self._engine), Session(self._engine) as session:
            return {
                row.node: HostReport(row.node, row.started_at, row.reported_at)
                for row in session.scalars(select(HostReportRow))
            }


def _report(row: JobReportRow) -> JobReport:
    return JobReport(
        row.job_id,
        row.attempt,
        row.node,
        row.alive,
        row.exit_code,
        row.note,
        row.started_at,
        row.ended_at,
        _end(row.end),
    )


def _end(value: str | None) -> ProcessEnd | None:
    """How a stored report says its process ended; None for none (or a word this gpuplex does
    not know, from a newer one)."""
    try:
        return ProcessEnd(value) if value is not None else None
    except ValueError:
        return None


def _utc(at: datetime | None) -> datetime | None:
    return aware_utc(at) if at is not None else None
