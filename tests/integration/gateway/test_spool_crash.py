"""kill -9 of a gateway worker loses no usage record it acknowledged: two writer processes share a
spool; each prints a request id right after `append` returns (standing in for the client seeing
its 200). One is killed while the other goes on, the mover runs, the second is killed, the mover
runs again: every printed id is in the store exactly once."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from gpuplex.core.serve.usage import UsageRecord
from gpuplex.gateway.spool_mover import SpoolMover

WRITER = """
import asyncio, sys
from datetime import UTC, datetime
from pathlib import Path
from gpuplex.core.serve.usage import UsageRecord
from gpuplex.gateway.spool import UsageSpool

async def main(directory: Path, name: str) -> None:
    spool = UsageSpool(directory, name, fsync_interval_s=0.005, segment_max_bytes=4096,
                       segment_max_age_s=0.01)
    stop = asyncio.Event()
    fsync = asyncio.create_task(spool.run_fsync_loop(stop))
    n = 0
    while True:
        request_id = f"{name}-{n:07d}"
        spool.append(UsageRecord(request_id, "acme", "gpx_abcd", "llama", "chat.completions",
                                 200, 3, 5, 0.01, datetime.now(UTC)))
        sys.stdout.write(request_id + "\\n")
        sys.stdout.flush()
        n += 1
        await asyncio.sleep(0)

asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
"""


class SqliteSink:
    """The store's contract in miniature: INSERT OR IGNORE on a request_id primary key."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path)
        self.db.execute("CREATE TABLE usage (request_id TEXT PRIMARY KEY, tenant TEXT)")
        self.handed_over = 0

    def insert_many(self, records: Sequence[UsageRecord]) -> int:
        self.handed_over += len(records)
        with self.db:
            cursor = self.db.executemany(
                "INSERT OR IGNORE INTO usage VALUES (?, ?)",
                [(r.request_id, r.tenant) for r in records],
            )
        return cursor.rowcount

    def counts(self) -> dict[str, int]:
        rows = self.db.execute("SELECT request_id, count(*) FROM usage GROUP BY request_id")
        return dict(rows.fetchall())


def start_writer(spool_dir: Path, name: str) -> subprocess.Popen[str]:
    return subprocess.Popen(  # noqa: S603 - our interpreter and this file's own script
        [sys.executable, "-c", WRITER, str(spool_dir), name],
        stdout=subprocess.PIPE,
        text=True,
    )


def read_ids(stream: IO[str] | None, count: int) -> list[str]:
    assert stream is not None
    ids = [stream.readline().strip() for _ in range(count)]
    assert all(ids), "the writer stopped early"
    return ids


def kill_and_drain(process: subprocess.Popen[str]) -> list[str]:
    """SIGKILL, then every id it printed before it died (each one was appended)."""
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=10) == -signal.SIGKILL
    assert process.stdout is not None  # read through its buffer: readline read ahead into it
    return process.stdout.read().split()


def test_kill_9_loses_no_acknowledged_record(tmp_path: Path) -> None:
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    sink = SqliteSink(tmp_path / "store.db")
    mover = SpoolMover(spool_dir, sink)
    first, second = start_writer(spool_dir, "w1"), start_writer(spool_dir, "w2")
    try:
        first_ids = read_ids(first.stdout, 1500)
        second_ids = read_ids(second.stdout, 300)
        first_ids += kill_and_drain(first)

        mover.move_once()  # the second writer is still appending meanwhile
        stored = sink.counts()
        assert [i for i in first_ids if i not in stored] == []
        assert any(name.endswith(".open") for name in _names(spool_dir))  # the live one's

        second_ids += read_ids(second.stdout, 300)
        second_ids += kill_and_drain(second)
    finally:
        for process in (first, second):
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)
            if process.stdout is not None:
                process.stdout.close()

    mover.move_once()
    stored = sink.counts()
    sink.db.close()
    assert [i for i in first_ids + second_ids if i not in stored] == []
    assert set(stored.values()) == {1}
    assert sink.handed_over == len(stored)  # no segment was moved twice
    assert len(first_ids) == len(set(first_ids)) >= 1500
    assert _names(spool_dir) == []


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())
