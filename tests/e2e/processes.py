"""Which processes are still running for a test: those whose command line names a directory the
test made (a state directory, an output directory). Zombies have ended and do not count."""

from __future__ import annotations

from pathlib import Path


def running_processes_naming(directory: Path) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if str(directory) in command and state != "Z":
            found.append(f"{proc.name}: {command}")
    return found
