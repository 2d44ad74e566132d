"""The tail of each job's output, as the host running it last read it (host/log_reports.py): the
control plane answers a job's logs from here and never reads the host's files, so the two may run
on different machines. One row per job, replaced as the host reads more; at most the last
MAX_LOG_BYTES of each stream (host/log_tail.py bounds it). Observations, like GPU samples: not
audited."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from gpuplex.store.columns import aware_utc
from gpuplex.store.db import store_errors
from gpuplex.store.tables import JobLogRow

STREAMS = ("stdout", "stderr")


@dataclass(frozen=True, slots=True)
class StreamTail:
    """The last lines of one stream; `truncated`: the file held more before them; `refused`: why
    the host did not read it (a link, not a plain file of its own)."""

    lines: tuple[str, ...] = ()
    truncated: bool = False
    refused: str | None = None


@dataclass(frozen=True, slots=True)
class JobLogTail:
    job_id: str
    node: str
    stdout: StreamTail = StreamTail()
    stderr: StreamTail = StreamTail()
    reported_at: datetime | None = None  # when the store took it; None on a tail not stored yet


class JobLogs:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def write(self, tails: Sequence[JobLogTail], *, now: datetime) -> None:
        """Store each tail in place of its job's previous one, all in one transaction."""
        if not tails:
            return
        now = aware_utc(now)
        with store_errors(self._engine), Session(self._engine) as session, session.begin():
            for tail in tails:
                row = session.get(JobLogRow, tail.job_id)
                if row is None:
                    row = JobLogRow(job_id=tail.job_id)
                    session.add(row)
                row.node = tail.node
                row.stdout = list(tail.stdout.lines)
                row.stderr = list(tail.stderr.lines)
                row.reading = {
                    name: {"truncated": stream.truncated, "refused": stream.refused}
                    for name, stream in zip(STREAMS, (tail.stdout, tail.stderr), strict=True)
                }
                row.reported_at = now

    def of(self, job_id: str) -> JobLogTail | None:
        """The job's tail as last reported; None when its host reported none yet."""
        with store_errors(self._engine), Session(self._engine) as session:
            row = session.get(JobLogRow, job_id)
            if row is None:
                return None
            reading = row.reading if isinstance(row.reading, dict) else {}
            return JobLogTail(
                row.job_id,
                row.node,
                _stream(row.stdout, reading.get("stdout")),
                _stream(row.stderr, reading.get("stderr")),
                row.reported_at,
            )


def _stream(lines: object, reading: object) -> StreamTail:
    kept = tuple(str(line) for line in lines) if isinstance(lines, list) else ()
    if not isinstance(reading, dict):
        return StreamTail(kept)
    refused = reading.get("refused")
    return StreamTail(
        kept, bool(reading.get("truncated")), refused if isinstance(refused, str) else None
    )
