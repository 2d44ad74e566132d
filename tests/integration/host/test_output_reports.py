"""What the host runtime reports of its output to the store (host/output_reports.py), read back
as the control plane reads it: events once each, across a restart of the host too, and bounded
when a flood came; a job's log tail when its files changed, at most on the reporting cadence
while it runs and at once when its process ended, never through a link."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine

from gpuplex.core.spec.jobs import JobSpec
from gpuplex.host.log_tail import MAX_LOG_BYTES
from gpuplex.host.logs import log_paths
from gpuplex.host.output_reports import OutputReporter, event_tenant
from gpuplex.host.state import Event, StateDir
from gpuplex.store.host_events import HostEvents
from gpuplex.store.job_logs import JobLogs
from gpuplex.store.jobs import Job, JobRepository
from tests.integration.store.conftest import new_sqlite_store, store_templates

__all__ = ["new_sqlite_store", "store_templates"]  # fixtures

T0 = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
HOUR_S = 3600.0


@pytest.fixture
def engine(tmp_path: Path, new_sqlite_store: Callable[[Path], Engine]) -> Iterator[Engine]:
    opened = new_sqlite_store(tmp_path / "store" / "gpuplex.db")
    yield opened
    opened.dispose()


@pytest.fixture
def dirs(tmp_path: Path) -> StateDir:
    made = StateDir(tmp_path / "host")
    made.create()
    return made


def reporter(dirs: StateDir, engine: Engine, every_s: float = 0.0) -> OutputReporter:
    return OutputReporter(dirs, JobLogs(engine), HostEvents(engine), every_s)


def a_job(engine: Engine, tenant: str = "acme") -> Job:
    spec = JobSpec.model_validate(
        {"tenant": tenant, "gpu": {"memory_gib": 10}, "command": ["sleep", "60"]}
    )
    return JobRepository(engine).submit(spec, now=T0, actor="alice")


def happened(dirs: StateDir, minute: int, target: str = "acme/chat#0") -> None:
    at = T0 + timedelta(minutes=minute)
    dirs.append_event(Event(at=at, kind="started", target=target, message=f"m{minute}"))


def messages(engine: Engine) -> list[str]:
    return [e.message for e in HostEvents(engine).recent(100)]


def test_events_are_reported_once_each_and_a_restarted_host_adds_only_newer_ones(
    dirs: StateDir, engine: Engine
) -> None:
    first = reporter(dirs, engine)
    happened(dirs, 1)
    happened(dirs, 2, "GPU 0")
    first.report("n1", [], ())
    first.report("n1", [], ())
    assert messages(engine) == ["m2", "m1"]
    stored = HostEvents(engine).recent(2)
    assert [(e.node, e.tenant) for e in stored] == [("n1", None), ("n1", "acme")]
    happened(dirs, 3)
    first.report("n1", [], ())
    assert messages(engine) == ["m3", "m2", "m1"]
    happened(dirs, 4)  # written while no host reported: the next one takes it, and only it
    reporter(dirs, engine).report("n1", [], ())
    assert messages(engine) == ["m4", "m3", "m2", "m1"]


def test_a_line_being_written_waits_and_a_flood_is_read_from_its_newest(
    dirs: StateDir, engine: Engine
) -> None:
    happened(dirs, 1)
    path = dirs.root / "events.jsonl"
    whole = path.stat().st_size
    with path.open("a") as out:
        out.write('{"at": "2026-03-10T12:02:00Z", "kind"')  # cut: still being written
    events, offset = dirs.events_since(0)
    assert ([e.message for e in events], offset) == (["m1"], whole)
    with path.open("a") as out:
        out.write(': "started", "target": "GPU 1", "message": "m2"}\n')
    events, offset = dirs.events_since(offset)
    assert [e.message for e in events] == ["m2"]
    for minute in range(3, 40):
        happened(dirs, minute)
    events, end = dirs.events_since(offset, max_bytes=1000)
    assert 0 < len(events) < 37
    assert events[-1].message == "m39"
    assert end == path.stat().st_size
    path.write_text("")  # a new, shorter file is read from its start
    happened(dirs, 50)
    assert [e.message for e in dirs.events_since(end)[0]] == ["m50"]


def test_event_tenants_are_the_replicas_tenant_and_none_for_the_nodes_own() -> None:
    assert event_tenant("acme/chat#0") == "acme"
    assert event_tenant("GPU 3") is None
    assert event_tenant("job j00000001") is None


def test_a_running_jobs_output_is_reported_on_the_cadence_and_at_once_when_it_ends(
    dirs: StateDir, engine: Engine
) -> None:
    job = a_job(engine)
    logs = JobLogs(engine)
    slow = reporter(dirs, engine, every_s=HOUR_S)
    slow.report("n1", [job], ())
    assert logs.of(job.id) is None  # no files yet: nothing to say
    stdout, stderr = log_paths(dirs.logs, "acme", f"job-{job.id}-0")
    stdout.write_text("step 1\n")
    slow.report("n1", [job], ())
    first = logs.of(job.id)
    assert first is not None
    assert (first.node, first.stdout.lines, first.stderr.lines) == ("n1", ("step 1",), ())
    with stdout.open("a") as out:
        out.write("step 2\n")
    stderr.write_text("done\n")
    slow.report("n1", [job], ())
    assert logs.of(job.id) == first  # not due yet: an hour between reads of a running job
    slow.report("n1", [job], {job.id})  # its process ended: read at once
    last = logs.of(job.id)
    assert last is not None
    assert (last.stdout.lines, last.stderr.lines) == (("step 1", "step 2"), ("done",))
    slow.report("n1", [job], {job.id})
    assert logs.of(job.id) == last  # unchanged files are not written again


def test_a_tail_is_bounded_and_a_link_is_never_followed(
    dirs: StateDir, engine: Engine, tmp_path: Path
) -> None:
    job, other = a_job(engine), a_job(engine, "bravo")
    stdout, stderr = log_paths(dirs.logs, "acme", f"job-{job.id}-0")
    secret = tmp_path / "secret.txt"
    secret.write_text("the other tenant's secret\n")
    stdout.symlink_to(secret)
    with stderr.open("w") as out:
        for n in range(2 * MAX_LOG_BYTES // 10):
            out.write(f"l {n:07d}\n")  # 10 bytes each: twice the bound
    log_paths(dirs.logs, "bravo", f"job-{other.id}-0")[0].write_text("theirs\n")
    reporter(dirs, engine).report("n1", [job, other], ())
    mine = JobLogs(engine).of(job.id)
    assert mine is not None
    assert mine.stdout.lines == ()
    assert mine.stdout.refused is not None
    assert "link" in mine.stdout.refused
    assert mine.stderr.truncated
    # the bound is not a whole number of lines: the part of one it starts in is dropped
    assert len(mine.stderr.lines) == MAX_LOG_BYTES // 10
    assert mine.stderr.lines[-1] == f"l {2 * MAX_LOG_BYTES // 10 - 1:07d}"
    theirs = JobLogs(engine).of(other.id)
    assert theirs is not None
    assert theirs.stdout.lines == ("theirs",)
