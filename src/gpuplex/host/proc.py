"""What /proc says about a process: is this pid still the process we started (start time), which
session it belongs to, and which processes of a group still run. Linux only, like the rest of the host
runtime."""

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


def group_has_running_process(pgid: int) -> bool:
    """Whether a process of the group still runs. Zombies do not count: they have ended and wait only
    for their parent to reap them; once the supervisor that started them is gone that parent is init
    (or a subreaper), which in some containers reaps seconds late."""
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":  # field 5: the process group
            return True
    return False


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


def pid_list(pids: list[int], most: int = 10) -> str:
    """`12, 34 and 5 more`: pids for a message, never a screenful."""
    shown = ", ".join(str(pid) for pid in pids[:most])
    return shown + (f" and {len(pids) - most} more" if len(pids) > most else "")
