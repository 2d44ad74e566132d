"""The usage spool (append, rotate, seal, fsync loop) and its mover (claim, read, insert, delete)."""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading
import time
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from gpuplex.clock import now_s
from gpuplex.core.serve.usage import UsageRecord
from gpuplex.errors import StoreError
from gpuplex.gateway.spool import UsageSpool
from gpuplex.gateway.spool_mover import MoveReport, SpoolMover, parse_segment


def record(n: int, prefix: str = "req") -> UsageRecord:
    return UsageRecord(
        request_id=f"{prefix}-{n:06d}",
        tenant="acme",
        key_prefix="gpx_abcd",
        model="llama",
        endpoint="chat.completions",
        status=200,
        prompt_tokens=n,
        completion_tokens=2 * n,
        latency_s=0.25,
        started_at=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
    )


def line(n: int, prefix: str = "req") -> bytes:
    return orjson.dumps(record(n, prefix).to_json_dict()) + b"\n"


class FakeSink:
    """Idempotent by request_id, like the store; keeps every record handed to it, duplicates too."""

    def __init__(self) -> None:
        self.received: list[UsageRecord] = []
        self.batch_sizes: list[int] = []
        self.fail_next = False
        self._lock = threading.Lock()

    def insert_many(self, records: Sequence[UsageRecord]) -> int:
        with self._lock:
            if self.fail_next:
                self.fail_next = False
                raise StoreError("store unreachable")  # as the store raises it
            known = {r.request_id for r in self.received}
            self.received.extend(records)
            self.batch_sizes.append(len(records))
            return len({r.request_id for r in records} - known)

    def ids(self) -> Counter[str]:
        return Counter(r.request_id for r in self.received)


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def is_locked(path: Path) -> bool:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


# -- the spool ---------------------------------------------------------------------------------


def test_append_writes_whole_lines_to_a_locked_open_segment(tmp_path: Path) -> None:
    spool = UsageSpool(tmp_path, "w1")
    for n in range(3):
        spool.append(record(n))
    path = spool.active_path
    assert path is not None
    assert path.name.startswith("w1-")
    assert path.suffix == ".open"
    assert path.read_bytes() == line(0) + line(1) + line(2)
    assert is_locked(path)
    spool.close()
    assert names(tmp_path) == [path.with_suffix(".jsonl").name]
    assert not is_locked(path.with_suffix(".jsonl"))


def test_a_full_segment_is_retired_at_once_and_sealed_by_sync(tmp_path: Path) -> None:
    spool = UsageSpool(tmp_path, "w1", segment_max_bytes=len(line(0)) * 2)
    for n in range(5):
        spool.append(record(n))
    # two full segments wait for the fsync thread, still `.open` and locked; one is active
    assert [name.endswith(".open") for name in names(tmp_path)] == [True, True, True]
    assert all(is_locked(p) for p in tmp_path.iterdir())
    assert spool.dirty
    spool.sync()
    assert not spool.dirty
    sealed = [tmp_path / n for n in names(tmp_path) if n.endswith(".jsonl")]
    assert [p.read_bytes() for p in sealed] == [line(0) + line(1), line(2) + line(3)]
    assert not any(is_locked(p) for p in sealed)
    active = spool.active_path
    assert active is not None
    assert active.read_bytes() == line(4)
    assert is_locked(active)
    spool.close()


def test_an_old_segment_rotates_and_an_empty_spool_makes_no_files(tmp_path: Path) -> None:
    spool = UsageSpool(tmp_path, "w1", segment_max_age_s=2.0)
    assert not spool.rotate_if_due(now_s() + 100)
    assert names(tmp_path) == []
    spool.append(record(1))
    assert not spool.rotate_if_due(now_s())
    assert spool.rotate_if_due(now_s() + 2.5)
    assert spool.active_path is None
    spool.sync()
    assert [n.endswith(".jsonl") for n in names(tmp_path)] == [True]
    spool.append(record(2))  # opens the next segment
    spool.close()
    assert len(names(tmp_path)) == 2
    assert all(n.endswith(".jsonl") for n in names(tmp_path))


def test_restarted_writers_with_the_same_id_never_share_a_segment(tmp_path: Path) -> None:
    first, second = UsageSpool(tmp_path, "w7"), UsageSpool(tmp_path, "w7")
    first.append(record(1))
    second.append(record(2))
    assert first.active_path != second.active_path
    first.close()
    second.close()
    assert len(names(tmp_path)) == 2


@pytest.mark.parametrize("writer_id", ["", "a/b", "w.1", "../x"])
def test_writer_ids_that_could_escape_or_confuse_names_are_refused(
    tmp_path: Path, writer_id: str
) -> None:
    with pytest.raises(ValueError, match="writer_id"):
        UsageSpool(tmp_path, writer_id)


def test_the_fsync_loop_rotates_aged_segments_and_seals_them(tmp_path: Path) -> None:
    spool = UsageSpool(tmp_path, "w1", fsync_interval_s=0.01, segment_max_age_s=0.02)

    async def scenario() -> list[str]:
        stop = asyncio.Event()
        loop_task = asyncio.create_task(spool.run_fsync_loop(stop))
        spool.append(record(1))
        for _ in range(200):
            await asyncio.sleep(0.01)
            if names(tmp_path) and all(n.endswith(".jsonl") for n in names(tmp_path)):
                break
        stop.set()
        await asyncio.wait_for(loop_task, 1)
        return names(tmp_path)

    sealed = asyncio.run(scenario())
    assert len(sealed) == 1
    assert sealed[0].endswith(".jsonl")
    assert (tmp_path / sealed[0]).read_bytes() == line(1)


def test_a_line_cut_short_by_a_full_disk_ends_its_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spool = UsageSpool(tmp_path, "w1")
    spool.append(record(1))
    real_write = os.write
    calls: list[int] = []

    def disk_fills(fd: int, data: bytes) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data)[:10])
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(os, "write", disk_fills)
        with pytest.raises(OSError, match="No space"):
            spool.append(record(2))  # not acknowledged: the gateway fails the request
    spool.append(record(3))  # goes to a fresh segment, not glued onto the torn line
    spool.close()
    sealed = [(tmp_path / n).read_bytes() for n in names(tmp_path)]
    assert sealed == [line(1) + line(2)[:10], line(3)]
    sink = FakeSink()
    assert SpoolMover(tmp_path, sink).move_once().bad_lines == 1
    assert sorted(sink.ids()) == [record(1).request_id, record(3).request_id]


# -- the mover ---------------------------------------------------------------------------------


def test_the_mover_moves_sealed_segments_and_deletes_them(tmp_path: Path) -> None:
    spool = UsageSpool(tmp_path, "w1", segment_max_bytes=len(line(0)) * 3)
    for n in range(7):
        spool.append(record(n))
    spool.close()
    sink = FakeSink()
    report = SpoolMover(tmp_path, sink).move_once()
    assert report == MoveReport(segments_moved=3, records_moved=7, records_new=7, bad_lines=0)
    assert sorted(sink.ids()) == [record(n).request_id for n in range(7)]
    assert sink.received[0] == record(0)
    assert names(tmp_path) == []
    assert SpoolMover(tmp_path, sink).move_once() == MoveReport()


def test_the_mover_leaves_a_live_writers_open_segment_alone(tmp_path: Path) -> None:
    spool = UsageSpool(tmp_path, "w1")
    spool.append(record(1))
    sink = FakeSink()
    mover = SpoolMover(tmp_path, sink)
    assert mover.move_once() == MoveReport()
    assert spool.active_path is not None
    assert spool.active_path.read_bytes() == line(1)
    spool.append(record(2))  # the writer goes on undisturbed
    spool.close()
    assert mover.move_once().records_new == 2


def test_the_mover_takes_over_a_dead_writers_open_segment(tmp_path: Path) -> None:
    # a killed writer leaves an unlocked `.open` segment: its last line may be torn
    (tmp_path / "w9-dead-000001.open").write_bytes(line(1) + line(2) + line(3)[:20])
    sink = FakeSink()
    report = SpoolMover(tmp_path, sink).move_once()
    assert report == MoveReport(segments_moved=1, records_moved=2, records_new=2, bad_lines=1)
    assert names(tmp_path) == []


def test_bad_lines_are_skipped_counted_and_logged_with_file_and_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    no_tenant = orjson.dumps({k: v for k, v in record(9).to_json_dict().items() if k != "tenant"})
    data = line(1) + b"{not json\n" + b"\n" + b"[1, 2]\n" + no_tenant + b"\n" + line(2) + b'{"req'
    (tmp_path / "w1-x-000001.jsonl").write_bytes(data)
    sink = FakeSink()
    report = SpoolMover(tmp_path, sink).move_once()
    assert report == MoveReport(segments_moved=1, records_moved=2, records_new=2, bad_lines=4)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        "usage spool w1-x-000001.jsonl line 2: not a usage record, skipped",
        "usage spool w1-x-000001.jsonl line 4: not a usage record, skipped",
        "usage spool w1-x-000001.jsonl line 5: not a usage record, skipped",
        "usage spool w1-x-000001.jsonl line 7: torn last line (5 bytes), skipped",
    ]
    assert parse_segment(b"", "empty") == ([], 0)


def test_a_crash_between_insert_and_delete_only_inserts_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spool = UsageSpool(tmp_path, "w1", segment_max_bytes=len(line(0)) * 2)
    for n in range(4):
        spool.append(record(n))
    spool.close()
    sink = FakeSink()

    class Killed(BaseException):
        pass

    def crash(path: object) -> None:
        raise Killed("killed after the insert, before the delete")

    with monkeypatch.context() as patch:
        patch.setattr(os, "unlink", crash)
        with pytest.raises(Killed):
            SpoolMover(tmp_path, sink).move_once()
    assert len(names(tmp_path)) == 2  # nothing deleted
    report = SpoolMover(tmp_path, sink).move_once()
    assert report.segments_moved == 2
    assert report.records_moved == 4
    assert report.records_new == 2  # the first segment's two were in the sink already
    assert len(sink.received) == 6
    assert sorted(sink.ids()) == [record(n).request_id for n in range(4)]
    assert names(tmp_path) == []


def test_a_segment_the_sink_refused_stays_for_the_next_pass(tmp_path: Path) -> None:
    (tmp_path / "w1-x-000001.jsonl").write_bytes(line(1) + line(2))
    sink = FakeSink()
    sink.fail_next = True
    with pytest.raises(StoreError):
        SpoolMover(tmp_path, sink).move_once()
    assert names(tmp_path) == ["w1-x-000001.jsonl"]
    assert not is_locked(tmp_path / "w1-x-000001.jsonl")
    assert SpoolMover(tmp_path, sink).move_once().records_new == 2


def test_records_go_to_the_sink_in_batches(tmp_path: Path) -> None:
    (tmp_path / "w1-x-000001.jsonl").write_bytes(b"".join(line(n) for n in range(7)))
    sink = FakeSink()
    assert SpoolMover(tmp_path, sink, batch_size=3).move_once().records_new == 7
    assert sink.batch_sizes == [3, 3, 1]


def test_racing_movers_and_a_live_writer_move_every_record_exactly_once(tmp_path: Path) -> None:
    sink = FakeSink()
    spool = UsageSpool(tmp_path, "w1", segment_max_bytes=len(line(0)) * 3)
    for n in range(90):  # sealed segments waiting before the movers start
        spool.append(record(n, "old"))
    spool.sync()
    writing = threading.Event()
    writing.set()

    def mover() -> None:
        one = SpoolMover(tmp_path, sink)
        while writing.is_set():
            one.move_once()

    threads = [threading.Thread(target=mover) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        for n in range(300):  # the live writer creates, fills and seals segments meanwhile
            spool.append(record(n))
            if n % 5 == 0:
                spool.sync()
        spool.close()
    finally:
        writing.clear()
        for thread in threads:
            thread.join(timeout=10)
    SpoolMover(tmp_path, sink).move_once()
    counts = sink.ids()
    assert len(counts) == 390
    assert set(counts.values()) == {1}  # no mover moved a segment another one moved
    assert names(tmp_path) == []


def test_the_move_loop_retries_after_a_failed_pass(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "w1-x-000001.jsonl").write_bytes(line(1))
    sink = FakeSink()
    sink.fail_next = True
    stop = threading.Event()
    loop = threading.Thread(target=SpoolMover(tmp_path, sink).run, args=(stop, 0.01))
    loop.start()
    deadline = time.monotonic() + 5
    while not sink.received and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    loop.join(5)
    assert not loop.is_alive()
    assert sink.ids() == Counter({record(1).request_id: 1})
    assert any("store unreachable" in r.getMessage() for r in caplog.records)
    assert names(tmp_path) == []


def test_the_move_loop_ends_with_a_last_pass_when_told_to_stop_going(tmp_path: Path) -> None:
    sink = FakeSink()
    passes: list[int] = []

    def keep_going() -> bool:  # the parent "dies" after the first pass; a segment appears then
        passes.append(1)
        if len(passes) == 2:
            (tmp_path / "w1-x-000001.jsonl").write_bytes(line(1))
        return len(passes) < 2

    SpoolMover(tmp_path, sink).run(threading.Event(), 0.01, keep_going)
    assert sink.ids() == Counter({record(1).request_id: 1})
    assert names(tmp_path) == []
