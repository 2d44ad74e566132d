"""Which processes are still running for a test: those whose command line names a directory the
test made (a state directory, an output directory), or holds a marker argument. Zombies have ended
and do not count."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def live_processes(matches: Callable[[list[bytes]], bool]) -> dict[int, str]:
    """pid -> command line of each live (not zombie) process whose argv `matches`."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and matches(argv):
            found[int(proc.name)] = b" ".join(argv).decode(errors="replace")
    return found


def running_processes_naming(directory: Path) -> list[str]:
    """ "pid: command line" of each live process whose command line names `directory`."""
    named = str(directory).encode()
    running = live_processes(lambda argv: named in b" ".join(argv))
    return [f"{pid}: {command}" for pid, command in running.items()]


def processes_with_argument(argument: str) -> list[int]:
    """The live processes that have `argument` as one whole argument."""
    wanted = argument.encode()
    return list(live_processes(lambda argv: wanted in argv))
