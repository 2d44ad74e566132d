"""What /proc says about a process: is this pid still the process we started (start time), and which
session it belongs to. Linux only, like the rest of the host runtime."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

PROC = Path("/proc")


def start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat: when the process started, in clock ticks after boot. Together
    with the pid it names one process, even after the pid is reused. None if it is gone or a zombie."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


def is_same_process(pid: int, ticks: int | None) -> bool:
    now = start_ticks(pid)
    return now is not None and (ticks is None or now == ticks)


def session_of(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def user_ids(name: str) -> tuple[int, int] | None:
    """(uid, primary gid) of a Unix user, or None if there is no such user."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return entry.pw_uid, entry.pw_gid
