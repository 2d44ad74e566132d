"""How a job's run ended, as the host keeps it: its end is the time its launching shell wrote its
exit status (a job that ended while gpuplex was down ended then, not when gpuplex came back), or
when the host saw it gone; the last run of each replica is kept until forgotten; and each run's
logs start with a header naming its attempt, written through no link."""

from __future__ import annotations

import os
from pathlib import Path

from gpuplex.core.apply.model import ExitStatus, Phase, WorkloadRecord
from gpuplex.core.jobs.live import attempt_env
from gpuplex.core.plan.model import Mode
from gpuplex.host.finished import (
    ended_at_s,
    exit_file,
    finished_run,
    forget,
    remember,
    status_unknown,
    write_header,
)
from gpuplex.host.state import HostState
from tests.unit.core.apply.factories import binding, record, restart, wanted


def job_record(attempt: int = 0, started_at_s: float = 1000.0) -> WorkloadRecord:
    desired = wanted(
        "job-j1",
        binding(Mode.DEDICATED, 0),
        restart=restart(policy="never"),
        env=attempt_env(attempt),
    )
    return record(desired, Phase.RUNNING, started_at_s=started_at_s)


def test_the_end_is_when_the_exit_status_was_written_else_when_it_was_seen(tmp_path: Path) -> None:
    run = job_record()
    assert ended_at_s(tmp_path, run, 2000.0) == 2000.0  # no exit file: when the host saw it
    path = exit_file(tmp_path, run.desired)
    path.parent.mkdir(parents=True)
    path.write_text("0\n")
    os.utime(path, (1500.0, 1500.0))
    assert ended_at_s(tmp_path, run, 2000.0) == 1500.0
    os.utime(path, (900.0, 900.0))  # an earlier run's file: not this run's end
    assert ended_at_s(tmp_path, run, 2000.0) == 2000.0


def test_the_last_run_of_each_replica_is_kept_until_forgotten() -> None:
    first = finished_run(job_record(0), ExitStatus(code=1), 1100.0)
    assert (first.attempt, first.exit_code, first.started_at_s, first.lost) == (0, 1, 1000.0, False)
    killed = finished_run(job_record(1), ExitStatus(signal=9), 1300.0, stopped_by="preempted")
    assert killed.exit_code == 137
    state = remember(remember(HostState(), first), killed)
    assert state.finished == [killed]  # one per replica: the last
    assert forget(state, {killed.label}).finished == []
    assert status_unknown(ExitStatus(note="exit status unknown (adopted after a restart)"))
    assert not status_unknown(ExitStatus(code=0))


def test_each_run_starts_its_logs_with_its_attempt_and_follows_no_link(tmp_path: Path) -> None:
    desired = job_record(1).desired
    write_header(tmp_path, desired, 0.0)
    stdout = tmp_path / "acme" / "job-j1-0.stdout.log"
    assert (
        stdout.read_text()
        == "----- gpuplex: job-j1 attempt 2 starts at 1970-01-01T00:00:00Z -----\n"
    )
    target = tmp_path / "elsewhere"
    target.write_text("")
    stderr = tmp_path / "acme" / "job-j1-0.stderr.log"
    stderr.unlink()
    stderr.symlink_to(target)
    write_header(tmp_path, desired, 0.0)
    assert target.read_text() == ""  # never written through the link
