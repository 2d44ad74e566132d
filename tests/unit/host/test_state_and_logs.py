"""State files: atomic, readable back, a damaged file is an error that says what to do; the supervisor
lock admits one holder; logs rotate by copy-and-truncate while the writer keeps appending."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuplex.errors import HostStateError
from gpuplex.host.logs import rotate_if_large
from gpuplex.host.state import Event, HostState, StateDir, _last_lines


def test_state_round_trips_and_a_damaged_file_says_what_to_do(tmp_path: Path) -> None:
    dirs = StateDir(tmp_path / "state")
    dirs.create()
    assert dirs.read_state() == HostState()
    dirs.write_state(HostState(owned_mig={0: ["3g.40gb@4"]}))
    assert dirs.read_state().owned_mig == {0: ["3g.40gb@4"]}
    assert [p.name for p in dirs.root.iterdir() if p.name.endswith(".tmp")] == []
    (dirs.root / "state.json").write_text('{"format_version": 1, "records": 3}')
    with pytest.raises(HostStateError, match="Move it aside"):
        dirs.read_state()


def test_only_one_process_holds_the_supervisor_lock(tmp_path: Path) -> None:
    dirs = StateDir(tmp_path)
    dirs.create()
    held = dirs.try_lock()
    assert held is not None
    # flock locks belong to the open file: a second open in this process is refused like another process
    assert dirs.try_lock() is None
    assert dirs.lock_holder() == os.getpid()
    held.close()
    assert dirs.lock_holder() is None


def test_a_torn_last_event_line_is_skipped(tmp_path: Path) -> None:
    dirs = StateDir(tmp_path)
    dirs.create()
    (tmp_path / "events.jsonl").write_text(
        '{"at": "2026-11-22T05:00:00Z", "kind": "started", "target": "t/w#0", "message": "pid 1"}\n'
        '{"at": "2026-11-22T05:00:01Z", "kind": "exi'
    )
    assert [e.kind for e in dirs.events()] == ["started"]


@pytest.mark.parametrize("block_bytes", [7, 64, 65536])
def test_the_last_events_are_read_from_the_end(tmp_path: Path, block_bytes: int) -> None:
    dirs = StateDir(tmp_path)
    dirs.create()
    for n in range(50):
        dirs.append_event(
            Event(
                at=datetime(2026, 11, 22, 5, tzinfo=UTC),
                kind="started",
                target=f"t/w#{n}",
                message="ok",
            )
        )
    path = tmp_path / "events.jsonl"

    assert _last_lines(path, 3, block_bytes) == path.read_text().splitlines()[-3:]
    assert [e.target for e in dirs.events(last=3)] == ["t/w#47", "t/w#48", "t/w#49"]
    assert len(dirs.events(last=500)) == 50
    assert dirs.events(last=0) == []
    assert dirs.events() == dirs.events(last=50)


def test_logs_rotate_and_the_open_writer_carries_on(tmp_path: Path) -> None:
    log = tmp_path / "w-0.stdout.log"
    with log.open("ab") as writer:  # a replica's stdout: opened for append, like the launcher does
        writer.write(b"a" * 100)
        writer.flush()
        assert not rotate_if_large(log, max_bytes=200, keep=2)
        assert rotate_if_large(log, max_bytes=50, keep=2)
        writer.write(b"b" * 10)
        writer.flush()
        assert log.read_bytes() == b"b" * 10  # no hole of zeros: O_APPEND writes at the new end
        assert (tmp_path / "w-0.stdout.log.1").read_bytes() == b"a" * 100
        writer.write(b"c" * 60)
        writer.flush()
        assert rotate_if_large(log, max_bytes=50, keep=2)
        assert rotate_if_large(log, max_bytes=-1, keep=2)  # a third rotation drops the oldest
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "w-0.stdout.log",
        "w-0.stdout.log.1",
        "w-0.stdout.log.2",
    ]
    assert (tmp_path / "w-0.stdout.log.2").read_bytes() == b"b" * 10 + b"c" * 60
