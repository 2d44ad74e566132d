"""Moves usage-spool segments into the store: every sealed segment, and the open segments of
writers that died (a kill -9 closes the dead process's descriptors, which releases its flock).

Claiming a segment is race-free among any number of movers (threads or processes) and writers:

1. open the segment by name, read-only; gone already: skip it (another mover deleted it, or its
   writer sealed it; the sealed name is found on a later pass);
2. flock it LOCK_EX | LOCK_NB; held: skip it (its writer is alive, or another mover has it);
3. check that the name still refers to the inode just locked; if not, skip it (another mover
   finished it and unlinked it, or its writer renamed `.open` -> `.jsonl`, between 1 and 2).

After 3 this mover owns the segment until it closes the descriptor: by the rule `spool` keeps too,
nobody renames or unlinks a segment without holding its flock and making check 3, and a writer
holds the flock on its `.open` segment from before its first line until after the rename to
`.jsonl`. So the lock is the claim; no `.moving` rename is needed, and nothing is left to clean up
when a mover dies holding one (its lock goes with it).

The mover then reads the segment through the locked descriptor, skips (counts and logs) any line
that does not decode, and a torn last line (no newline: its `append` never returned), hands the
records to the sink in batches of at most `batch_size`, and only after the sink returned unlinks
the segment, still holding the lock. A crash between the insert and the unlink leaves the segment
for the next mover, which inserts it again; the sink ignores request ids it has, so every record
counts once. A segment whose insert failed is never deleted.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson

from gpuplex.core.serve.usage import UsageRecord
from gpuplex.gateway.spool import OPEN_SUFFIX, SEALED_SUFFIX, names_inode
from gpuplex.retry import run_pass

log = logging.getLogger(__name__)

_READ_CHUNK_BYTES = 1024 * 1024


class UsageSink(Protocol):
    def insert_many(self, records: Sequence[UsageRecord]) -> int:
        """Store the records whose request_id is not stored yet; return how many were new."""
        ...


@dataclass(frozen=True, slots=True)
class MoveReport:
    segments_moved: int = 0
    records_moved: int = 0  # handed to the sink, duplicates included
    records_new: int = 0  # the sink did not have them yet
    bad_lines: int = 0  # undecodable or torn lines skipped


class SpoolMover:
    def __init__(self, directory: Path, sink: UsageSink, batch_size: int = 1000) -> None:
        if batch_size <= 0:
            raise ValueError("batch_size must be > 0")
        self.directory = directory
        self.sink = sink
        self.batch_size = batch_size

    def move_once(self) -> MoveReport:
        """Move every segment that can be claimed now. Blocks on the disk and the sink: run it in
        an executor from async code. A sink error propagates; its segment stays for a later pass."""
        segments = records = new = bad = 0
        for path in self._candidates():
            moved = self._move_segment(path)
            if moved is None:
                continue
            segments += 1
            records += moved.records_moved
            new += moved.records_new
            bad += moved.bad_lines
        return MoveReport(segments, records, new, bad)

    def run(
        self,
        stop: threading.Event,
        interval_s: float = 1.0,
        keep_going: Callable[[], bool] = lambda: True,
    ) -> None:
        """Move segments every `interval_s` until `stop` is set or `keep_going()` says no, then make
        one last pass (for what the workers sealed as they stopped)."""
        while not stop.is_set() and keep_going():
            self._pass(interval_s)
            stop.wait(interval_s)
        self._pass(interval_s)

    def _pass(self, interval_s: float) -> None:
        """One `move_once`; a failure is logged, and its segments wait for the next pass."""
        job = f"usage spool {self.directory}: moving to the store"
        report = run_pass(self.move_once, job=job, retry_in_s=interval_s, log=log)
        if report is not None and report.segments_moved:
            log.debug("usage spool %s: moved %s", self.directory, report)

    def _candidates(self) -> list[Path]:
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return []
        names = sorted(
            entry.name
            for entry in entries
            if entry.name.endswith((SEALED_SUFFIX, OPEN_SUFFIX))
            and entry.is_file(follow_symlinks=False)
        )
        return [self.directory / name for name in names]

    def _move_segment(self, path: Path) -> MoveReport | None:
        """Claim, read, insert, unlink one segment; None when it could not be claimed."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return None
            if not names_inode(path, fd):
                return None
            records, bad_lines = parse_segment(_read_all(fd), path.name)
            new = 0
            for start in range(0, len(records), self.batch_size):
                new += self.sink.insert_many(records[start : start + self.batch_size])
            os.unlink(path)
            return MoveReport(1, len(records), new, bad_lines)
        finally:
            os.close(fd)


def parse_segment(data: bytes, name: str) -> tuple[list[UsageRecord], int]:
    """The records of one segment and the number of lines skipped (logged with `name` and the
    line number): lines that are not a usage record, and a last line without its newline."""
    lines = data.split(b"\n")
    torn = lines.pop()  # b"" when the segment ends with a newline, as every complete one does
    records: list[UsageRecord] = []
    bad_lines = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        record = _decode(line)
        if record is None:
            bad_lines += 1
            log.warning("usage spool %s line %d: not a usage record, skipped", name, number)
        else:
            records.append(record)
    if torn:
        bad_lines += 1
        log.warning(
            "usage spool %s line %d: torn last line (%d bytes), skipped",
            name,
            len(lines) + 1,
            len(torn),
        )
    return records, bad_lines


def _decode(line: bytes) -> UsageRecord | None:
    try:
        data: Any = orjson.loads(line)
        if not isinstance(data, dict):
            return None
        return UsageRecord.from_json_dict(data)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    while chunk := os.read(fd, _READ_CHUNK_BYTES):
        chunks.append(chunk)
    return b"".join(chunks)
