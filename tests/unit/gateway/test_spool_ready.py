"""`UsageSpool.ready()`: whether a usage record can be written now, and if not why, in words an
operator acts on. The gateway forwards nothing it could not bill, so this must turn false before a
record is lost (a write error, too little free space, a read-only file system) and true again by
itself once the cause is gone, while costing next to nothing per request."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from gpuplex.gateway.spool import READY_CHECK_S, RESERVE_BYTES, UsageSpool
from tests.clocks import ManualClock
from tests.unit.gateway.test_spool import line, names, record

#: A step of the clock `ready()` caches by that takes it past its cached answer.
PAST_THE_CACHE_S = READY_CHECK_S * 1.5


class FakeStatvfs:
    """`os.statvfs` with the free space, inodes and flags a test chooses; counts its calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.free_bytes = 100 * RESERVE_BYTES
        self.free_inodes = 1000
        self.read_only = False
        self.calls = 0
        monkeypatch.setattr(os, "statvfs", self)

    def __call__(self, path: Any) -> os.statvfs_result:
        self.calls += 1
        flags = os.ST_RDONLY if self.read_only else 0
        # (bsize, frsize, blocks, bfree, bavail, files, ffree, favail, flag, namemax)
        blocks = (4096, 1, 10**12, self.free_bytes, self.free_bytes)
        return os.statvfs_result((*blocks, 10**6, 1000, self.free_inodes, flags, 255))


def failing_writes(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    def refuse(fd: int, data: bytes) -> int:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, "write", refuse)


def test_a_healthy_spool_is_ready_and_makes_no_files(tmp_path: Path) -> None:
    spool = UsageSpool(tmp_path, "w1")
    assert spool.ready() is None
    assert names(tmp_path) == []  # no probe is written while nothing failed


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (errno.ENOSPC, "No space left on device (ENOSPC)"),
        (errno.EDQUOT, "(EDQUOT)"),
        (errno.EROFS, "Read-only file system (EROFS)"),
        (errno.EACCES, "Permission denied (EACCES)"),
    ],
)
def test_a_failed_append_keeps_raising_and_makes_the_spool_unready_until_writes_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, words: str
) -> None:
    clock = ManualClock(1000.0)
    spool = UsageSpool(tmp_path, "w1", clock=clock)
    spool.append(record(1))
    assert spool.ready() is None
    with monkeypatch.context() as patch:
        failing_writes(patch, code)
        for n in (2, 3):
            with pytest.raises(OSError, match=os.strerror(code)) as raised:
                spool.append(record(n))
            assert raised.value.errno == code
        cause = spool.ready()  # no wait for the cache: a failure is looked at at once
        assert cause is not None
        assert str(tmp_path) in cause
        assert words in cause
        clock.advance(PAST_THE_CACHE_S)
        assert spool.ready() == cause  # the probe fails too: still unready
    assert spool.ready() == cause  # within the cache time the answer is remembered
    clock.advance(PAST_THE_CACHE_S)
    assert spool.ready() is None  # the probe wrote: ready again, by itself
    spool.append(record(4))
    spool.close()
    assert [p for p in names(tmp_path) if p.startswith(".")] == []  # the probe is gone
    sealed = b"".join((tmp_path / n).read_bytes() for n in names(tmp_path))
    assert sealed == line(1) + line(4)


def test_a_segment_that_cannot_be_created_makes_the_spool_unready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(1000.0)
    spool = UsageSpool(tmp_path, "w1", clock=clock)
    real_open = os.open

    def no_inodes(path: Any, flags: int, mode: int = 0o777) -> int:
        if flags & os.O_CREAT:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_open(path, flags, mode)

    with monkeypatch.context() as patch:
        patch.setattr(os, "open", no_inodes)
        with pytest.raises(OSError, match="No space"):
            spool.append(record(1))
        cause = spool.ready()
    assert cause is not None
    assert "cannot be written" in cause
    assert "(ENOSPC)" in cause


def test_free_space_below_the_reserve_is_unready_before_any_write_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(1000.0)
    fs = FakeStatvfs(monkeypatch)
    spool = UsageSpool(tmp_path, "w1", clock=clock)
    assert spool.ready() is None
    fs.free_bytes = RESERVE_BYTES - 1
    clock.advance(PAST_THE_CACHE_S)
    cause = spool.ready()
    assert cause is not None
    assert f"the usage spool {tmp_path} is full (ENOSPC)" in cause
    assert "1023 KiB free" in cause
    fs.free_bytes = RESERVE_BYTES
    clock.advance(PAST_THE_CACHE_S)
    assert spool.ready() is None


def test_no_free_inodes_or_a_read_only_mount_is_unready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(1000.0)
    fs = FakeStatvfs(monkeypatch)
    spool = UsageSpool(tmp_path, "w1", clock=clock)
    fs.free_inodes = 0
    assert "no free inodes" in (spool.ready() or "")
    fs.free_inodes, fs.read_only = 1000, True
    clock.advance(PAST_THE_CACHE_S)
    assert "read-only file system (EROFS)" in (spool.ready() or "")


def test_a_missing_directory_is_unready_not_an_exception(tmp_path: Path) -> None:
    spool = UsageSpool(tmp_path / "spool", "w1")
    (tmp_path / "spool").rmdir()
    cause = spool.ready()
    assert cause is not None
    assert "cannot be checked" in cause
    assert "(ENOENT)" in cause


def test_ready_looks_at_the_disk_at_most_once_per_check_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(1000.0)
    fs = FakeStatvfs(monkeypatch)
    spool = UsageSpool(tmp_path, "w1", clock=clock)
    for _ in range(1000):
        assert spool.ready() is None
    assert fs.calls == 1
    clock.advance(PAST_THE_CACHE_S)
    spool.ready()
    assert fs.calls == 2


def test_the_cause_is_logged_once_when_it_starts_and_once_when_it_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock(1000.0)
    fs = FakeStatvfs(monkeypatch)
    spool = UsageSpool(tmp_path, "w1", clock=clock)
    fs.free_bytes = 0
    with caplog.at_level(logging.WARNING, logger="gpuplex.gateway.spool"):
        for _ in range(5):
            clock.advance(PAST_THE_CACHE_S)
            spool.ready()
        fs.free_bytes = 100 * RESERVE_BYTES
        clock.advance(PAST_THE_CACHE_S)
        spool.ready()
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "is full (ENOSPC)" in messages[0]
    assert "usage_unavailable" in messages[0]
    assert "writable again" in messages[1]
