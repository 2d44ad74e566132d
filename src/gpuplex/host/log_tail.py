"""Reading a job's log files, for the tail the host reports to the store (host/output_reports.py),
bounded and without following links.

A job's process writes its own output, so what lies in its log folder is not to be trusted: only a
plain file with one link is read (never a symbolic link, a FIFO, a device, or a hard link to a file
elsewhere), the tenant's folder itself is opened without following a link, and only the last
`MAX_LOG_BYTES` of each file are read, each line cut at `MAX_LINE_CHARS`. A file that is not read
says why in the reply's note; it never waits (a FIFO is opened non-blocking) and never reads a
file outside the tenant's folder.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

#: The most bytes read from the end of each of a job's log files per request.
MAX_LOG_BYTES = 1024 * 1024
#: The longest line answered; the rest of a longer one is cut.
MAX_LINE_CHARS = 8 * 1024
#: How a cut line ends.
CUT = " [cut]"


@dataclass(frozen=True, slots=True)
class LogTail:
    lines: list[str]
    #: why the file was not read, when it exists but is not a plain file of its own
    refused: str | None = None
    #: whether the file holds more than was read
    truncated: bool = False


def read_tail(path: Path, tail: int) -> LogTail:
    """The last `tail` lines of `path` (at most `MAX_LOG_BYTES` read from its end); no lines for
    a file that is not there yet."""
    try:
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return LogTail([])
    except OSError:
        return LogTail([], refused="the job's log folder is a link or not a folder: not read")
    try:
        fd = os.open(
            path.name,
            os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY,
            dir_fd=folder,
        )
    except FileNotFoundError:
        return LogTail([])
    except OSError as error:
        why = "a link" if error.errno == errno.ELOOP else "unreadable"
        return LogTail([], refused=f"{path.name} is {why}: not read")
    finally:
        os.close(folder)
    with contextlib.closing(os.fdopen(fd, "rb")) as handle:
        status = os.fstat(handle.fileno())
        if not stat.S_ISREG(status.st_mode) or status.st_nlink != 1:
            return LogTail([], refused=f"{path.name} is not a plain file of its own: not read")
        start = max(0, status.st_size - MAX_LOG_BYTES)
        handle.seek(start)
        data = handle.read(MAX_LOG_BYTES)
    lines = data.decode("utf-8", errors="replace").split("\n")
    if start > 0:
        lines = lines[1:]  # the first one is only the end of a line
    if lines and lines[-1] == "":
        lines.pop()
    kept = [_cut(line.removesuffix("\r")) for line in lines[-tail:]]
    return LogTail(kept, truncated=start > 0)


def _cut(line: str) -> str:
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + CUT
