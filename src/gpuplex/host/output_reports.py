"""What the host reports to the store of what it sees, beside its jobs' processes (follow.py): the
tail of each job's output and the host runtime's events. The control plane answers a job's logs
and its event views from the store only, so control plane and host may run on different
machines, sharing nothing but the store.

A job's log files are read (log_tail.py: bounded, never through a link) at most every
`every_s` while its process runs, when they changed since the last report, and once more when its
process ended (before the host says so: a job the runner has moved on has its whole tail stored).
Events are read from where the last report stopped in events.jsonl; on start, those newer than
the node's newest stored event are reported (so none is lost across a restart, nor stored twice).
"""

from __future__ import annotations

import math
import os
from collections.abc import Collection, Sequence
from pathlib import Path

from gpuplex.clock import monotonic_s, utc_now
from gpuplex.core.jobs.placement import job_workload_name
from gpuplex.host.log_tail import MAX_LOG_BYTES, LogTail, read_tail
from gpuplex.host.logs import log_files
from gpuplex.host.state import Event, StateDir
from gpuplex.store.host_events import HostEvent, HostEvents
from gpuplex.store.job_logs import JobLogs, JobLogTail, StreamTail
from gpuplex.store.jobs import Job

#: A file as last seen (inode, size, change time); None: not there
Seen = tuple[int, int, int] | None


def event_tenant(target: str) -> str | None:
    """The tenant a host event is about: events name a replica `tenant/workload#n`, or something
    of the node's own (`GPU 3`, `revision 4`, `job j...`: None, for platform callers only)."""
    return target.split("/", 1)[0] if "/" in target else None


class OutputReporter:
    def __init__(
        self, dirs: StateDir, logs: JobLogs, events: HostEvents, every_s: float = 2.0
    ) -> None:
        self._dirs = dirs
        self._logs = logs
        self._events = events
        self._every_s = every_s
        self._seen: dict[str, tuple[Seen, Seen]] = {}  # job id -> its files at the last report
        self._read_at: dict[str, float] = {}  # job id -> monotonic time of the last read
        self._offset: int | None = None  # where in events.jsonl the next report starts

    def report(self, node: str, jobs: Sequence[Job], ended: Collection[str]) -> None:
        """Report `node`'s new events, and the output of `jobs` (those on this node) that is due:
        of those whose process ended (`ended`, by id) at once. Raises the store's error (the
        next call tries again)."""
        self._report_events(node)
        self._report_logs(node, jobs, ended)

    def _report_logs(self, node: str, jobs: Sequence[Job], ended: Collection[str]) -> None:
        now = monotonic_s()
        tails: list[JobLogTail] = []
        seen: dict[str, tuple[Seen, Seen]] = {}
        for job in jobs:
            due = job.id in ended or now - self._read_at.get(job.id, -math.inf) >= self._every_s
            if not due:
                continue
            stdout, stderr = log_files(
                self._dirs.logs, job.tenant, f"{job_workload_name(job.id)}-0"
            )
            files = (_seen(stdout), _seen(stderr))
            if files == self._seen.get(job.id, (None, None)):
                continue  # nothing new (or nothing yet)
            tail = JobLogTail(job.id, node, _stream(stdout), _stream(stderr))
            tails.append(tail)
            seen[job.id] = files
        self._logs.write(tails, now=utc_now())
        self._seen.update(seen)
        self._read_at.update(dict.fromkeys(seen, now))
        here = {job.id for job in jobs}
        self._seen = {k: v for k, v in self._seen.items() if k in here}
        self._read_at = {k: v for k, v in self._read_at.items() if k in here}

    def _report_events(self, node: str) -> None:
        if self._offset is None:
            newest = self._events.newest_at(node)
            found, offset = self._dirs.events_since(0)
            found = [e for e in found if newest is None or e.at > newest]
        else:
            found, offset = self._dirs.events_since(self._offset)
        self._events.append(node, [_host_event(node, e) for e in found])
        self._offset = offset


def _host_event(node: str, event: Event) -> HostEvent:
    tenant = event_tenant(event.target)
    return HostEvent(node, event.at, event.kind, event.target, tenant, event.message)


def _stream(path: Path) -> StreamTail:
    read: LogTail = read_tail(path, MAX_LOG_BYTES)  # every line of the last MAX_LOG_BYTES
    return StreamTail(tuple(read.lines), read.truncated, read.refused)


def _seen(path: Path) -> Seen:
    try:
        status = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return (status.st_ino, status.st_size, status.st_ctime_ns)
