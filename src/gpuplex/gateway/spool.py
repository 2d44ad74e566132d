"""The gateway's durable local usage spool: one JSON line per request, appended to a segment file.

Durability: `append` returns only after one completed `os.write` of the whole line on an O_APPEND
descriptor, so the record is in the kernel's page cache, which outlives a kill -9 of the gateway.
`fsync` (for power loss) happens in batches, every `fsync_interval_s`, in an executor thread, so
the event loop never waits on the disk. A record whose `append` raised was never acknowledged.

Segments, one directory shared by every gateway worker on the host:

    <writer_id>-<token>-<seq>.open    active: its writer holds an exclusive flock on it
    <writer_id>-<token>-<seq>.jsonl   sealed: fsynced, closed, ready for the store

`token` is random per `UsageSpool`, so a restarted worker that reuses a writer id (a reused pid)
never collides with the segments its dead predecessor left behind.

The locking rule shared with `spool_mover`: a segment file is renamed or unlinked only by a process
that holds its flock and has checked, after taking the lock, that the name still refers to the
locked inode. A writer creates a segment with O_EXCL, locks it, and then makes that check too:
had a mover taken an empty, not yet locked new segment for a dead writer's and removed it, the
writer notices and starts another instead of writing into an unlinked file. Rotation (size or age)
swaps in a new segment at once and leaves the old one to the fsync thread, which fsyncs it,
renames it to `.jsonl` and only then closes it (releasing the lock).

Readiness: the gateway forwards a request only when `ready()` says a record can be written (else it
answers 503 `usage_unavailable`): a reply without its usage record would be unbilled. `ready()` is
cheap enough for every request: it remembers the last write error and checks the free space
(statvfs, a reserve of `reserve_bytes`) at most once every `READY_CHECK_S`. A remembered error clears
when a probe file can be written again, so the gateway recovers by itself once space returns.

Threads: `append`, `rotate_if_due`, `ready` and `close` run on the event loop's thread; `sync` runs in an
executor thread. A small state lock guards the active/retired bookkeeping; descriptors are closed
only under the sync lock, so an fsync never meets a closed descriptor.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import math
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import orjson

from gpuplex.clock import SYSTEM_CLOCK, Clock
from gpuplex.core.serve.usage import UsageRecord
from gpuplex.ids import random_hex

log = logging.getLogger(__name__)

OPEN_SUFFIX = ".open"
SEALED_SUFFIX = ".jsonl"
_WRITER_ID = re.compile(r"[A-Za-z0-9_-]+")
_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
_MAX_OPEN_TRIES = 100
#: Free space below which the spool counts as full: room for thousands of records, so a request
#: admitted now still finds room for its record when its reply ends.
RESERVE_BYTES = 1024 * 1024
#: How long a readiness answer is reused: a statvfs per request would be cheap, but need not be.
READY_CHECK_S = 0.1


@dataclass(slots=True)
class _Segment:
    fd: int
    path: Path  # the `.open` name
    opened_s: float
    size_bytes: int = 0
    synced_bytes: int = 0


class UsageSpool:
    """Appends usage records to a local segment file; see the module docstring for the guarantees."""

    def __init__(
        self,
        directory: Path,
        writer_id: str,
        fsync_interval_s: float = 0.05,
        segment_max_bytes: int = 8 * 1024 * 1024,
        segment_max_age_s: float = 2.0,
        reserve_bytes: int = RESERVE_BYTES,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """`clock` times how long `ready()` answers from memory, and when a segment is due to
        rotate."""
        if not _WRITER_ID.fullmatch(writer_id):
            raise ValueError(f"writer_id {writer_id!r}: use letters, digits, '_' and '-' only")
        if fsync_interval_s <= 0 or segment_max_bytes <= 0 or segment_max_age_s <= 0:
            raise ValueError(
                "fsync_interval_s, segment_max_bytes and segment_max_age_s must be > 0"
            )
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.fsync_interval_s = fsync_interval_s
        self.segment_max_bytes = segment_max_bytes
        self.segment_max_age_s = segment_max_age_s
        self.reserve_bytes = reserve_bytes
        self._clock = clock
        self._prefix = f"{writer_id}-{random_hex(8)}"
        self._seq = 0
        self._active: _Segment | None = None
        self._retired: list[_Segment] = []
        self._state_lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._write_error: OSError | None = None  # the last append's failure, until a probe works
        self._ready_at_s = -math.inf  # when `_ready_cause` was worked out (monotonic)
        self._ready_cause: str | None = None

    @property
    def active_path(self) -> Path | None:
        """The segment `append` writes to now (None until the first append after a rotation)."""
        segment = self._active
        return segment.path if segment is not None else None

    @property
    def dirty(self) -> bool:
        """Whether some appended bytes are not fsynced yet, or a rotated segment awaits sealing."""
        with self._state_lock:
            active = self._active
            unsynced = active is not None and active.size_bytes > active.synced_bytes
            return unsynced or bool(self._retired)

    def append(self, record: UsageRecord) -> None:
        """Write one line; when this returns the record survives a kill -9 of this process.
        Raises OSError when the disk refuses it (the record is then not acknowledged)."""
        line = orjson.dumps(record.to_json_dict(), option=orjson.OPT_APPEND_NEWLINE)
        try:
            segment = self._active
            if segment is None:
                segment = self._open_segment()
        except OSError as exc:
            self._failed(exc)
            raise
        view = memoryview(line)
        try:
            while view:
                view = view[os.write(segment.fd, view) :]
        except BaseException as exc:
            if isinstance(exc, OSError):
                self._failed(exc)
            # a partial line must end its segment, or the next line would be glued onto it
            with self._state_lock:
                segment.size_bytes += len(line) - len(view)
                self._retire_active()
            raise
        with self._state_lock:
            segment.size_bytes += len(line)
            if segment.size_bytes >= self.segment_max_bytes:
                self._retire_active()

    def ready(self) -> str | None:
        """None when a record can be written now; else why not, in plain words (for the log, the
        503 and /healthz). Answers from memory for `READY_CHECK_S` after each check."""
        now = self._clock.monotonic_s()
        if now - self._ready_at_s < READY_CHECK_S:
            return self._ready_cause
        cause = self._check_ready()
        if cause != self._ready_cause:
            if cause is None:
                log.warning("usage spool %s: writable again; requests are served", self.directory)
            else:
                log.error("%s: requests get 503 usage_unavailable until it is fixed", cause)
        self._ready_at_s, self._ready_cause = now, cause
        return cause

    def rotate_if_due(self, now: float) -> bool:
        """Retire the active segment when it is older than `segment_max_age_s` and not empty."""
        with self._state_lock:
            segment = self._active
            if segment is None or segment.size_bytes == 0:
                return False
            if now - segment.opened_s < self.segment_max_age_s:
                return False
            self._retire_active()
            return True

    def sync(self) -> None:
        """fsync what was appended, and seal retired segments (fsync, rename to `.jsonl`, close).
        Blocks on the disk: call it from an executor thread, or at shutdown."""
        with self._sync_lock:
            with self._state_lock:
                retired, self._retired = self._retired, []
                active = self._active
                target_bytes = active.size_bytes if active is not None else 0
            failures: list[OSError] = []
            for segment in retired:
                try:
                    _seal(segment)
                except OSError as exc:  # closed anyway: a mover takes it over as a dead writer's
                    failures.append(exc)
            if failures:
                raise failures[0]
            if active is not None and target_bytes > active.synced_bytes:
                os.fsync(active.fd)  # a segment is closed only by _seal, under this same lock
                with self._state_lock:
                    active.synced_bytes = target_bytes

    def close(self) -> None:
        """Seal every segment of this spool. Blocks on the disk. A later `append` opens a new
        segment (call `close` again after it)."""
        with self._state_lock:
            if self._active is not None:
                self._retire_active()
        self.sync()

    async def run_fsync_loop(self, stop: asyncio.Event) -> None:
        """Every `fsync_interval_s` until `stop`: rotate an aged segment and fsync in an executor."""
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.fsync_interval_s)
            self.rotate_if_due(self._clock.now_s())
            if not self.dirty:
                continue
            try:
                await loop.run_in_executor(None, self.sync)
            except OSError as exc:
                log.error("usage spool %s: fsync failed, will retry: %s", self.directory, exc)
                self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        if self._write_error is None:
            log.error("usage spool %s: a record could not be written: %s", self.directory, exc)
        self._write_error = exc
        self._ready_at_s = -math.inf  # the next `ready()` looks again

    def _check_ready(self) -> str | None:
        where = f"the usage spool {self.directory}"
        try:
            fs = os.statvfs(self.directory)
        except OSError as exc:
            return f"{where} cannot be checked: {_describe(exc)}"
        if fs.f_flag & os.ST_RDONLY:
            return f"{where} is on a read-only file system (EROFS)"
        free_bytes = fs.f_bavail * fs.f_frsize
        if free_bytes < self.reserve_bytes:
            return (
                f"{where} is full (ENOSPC): {free_bytes // 1024} KiB free, less than the "
                f"{self.reserve_bytes // 1024} KiB kept in reserve; free space there"
            )
        if fs.f_files and not fs.f_favail:
            return f"{where} is full (ENOSPC): no free inodes; remove files there"
        if self._write_error is not None:
            try:
                self._probe()
            except OSError as exc:
                self._write_error = exc
                return f"{where} cannot be written: {_describe(exc)}"
            self._write_error = None
        return None

    def _probe(self) -> None:
        """Write and remove one small file (a dot name: the mover never reads it)."""
        path = self.directory / f".probe-{self._prefix}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, b"\n" * 512)
        finally:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(path)

    def _retire_active(self) -> None:
        """Caller holds the state lock."""
        if self._active is not None:
            self._retired.append(self._active)
            self._active = None

    def _open_segment(self) -> _Segment:
        """Create, lock and check a new `.open` segment (see the module docstring)."""
        for _ in range(_MAX_OPEN_TRIES):
            self._seq += 1
            path = self.directory / f"{self._prefix}-{self._seq:06d}{OPEN_SUFFIX}"
            try:
                fd = os.open(path, _OPEN_FLAGS, 0o600)
            except FileExistsError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)  # a mover took the empty file for a dead writer's: it removes it
                continue
            if names_inode(path, fd):
                segment = _Segment(fd=fd, path=path, opened_s=self._clock.now_s())
                with self._state_lock:
                    self._active = segment
                return segment
            os.close(fd)
        raise OSError(f"usage spool {self.directory}: could not create a segment")


def _seal(segment: _Segment) -> None:
    """fsync, rename `.open` -> `.jsonl` (an empty segment is removed), close: in that order, so
    a sealed segment is always complete and the flock is held through the rename."""
    try:
        if segment.synced_bytes < segment.size_bytes:
            os.fsync(segment.fd)
        if segment.size_bytes > 0:
            os.rename(segment.path, segment.path.with_suffix(SEALED_SUFFIX))
        else:
            os.unlink(segment.path)
    finally:
        os.close(segment.fd)  # releases the flock: a mover may take the segment now


def _describe(exc: OSError) -> str:
    """`No space left on device (ENOSPC)`: the words and the name an operator searches for."""
    name = errno.errorcode.get(exc.errno or 0)
    words = exc.strerror or str(exc)
    return f"{words} ({name})" if name else words


def names_inode(path: Path, fd: int) -> bool:
    """Whether `path` still names the file open on `fd` (it was not renamed or unlinked)."""
    try:
        by_name = os.stat(path)
    except FileNotFoundError:
        return False
    by_fd = os.fstat(fd)
    return (by_name.st_dev, by_name.st_ino) == (by_fd.st_dev, by_fd.st_ino)
