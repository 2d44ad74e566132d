"""Processes gpuplex started itself (tenant replicas, MPS daemons): spawned in their own session, so a
signal to gpuplex never reaches them, and reaped here so none lingers as a zombie. A process adopted
after a restart of gpuplex is not our child: it is watched through /proc instead."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import IO

from gpuplex.core.apply.model import ExitStatus
from gpuplex.host.proc import is_same_process, start_ticks


class Children:
    def __init__(self) -> None:
        self._popen: dict[int, subprocess.Popen[bytes]] = {}

    def spawn(
        self,
        argv: list[str],
        env: dict[str, str],
        stdout: IO[bytes] | int = subprocess.DEVNULL,
        stderr: IO[bytes] | int = subprocess.DEVNULL,
        cwd: Path | None = None,
    ) -> tuple[int, int | None]:
        """Start `argv` in a new session; return its pid and /proc start ticks."""
        child = subprocess.Popen(  # noqa: S603 - argv comes from the operator's spec, never a shell string
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
        )
        self._popen[child.pid] = child
        return child.pid, start_ticks(child.pid)

    def exit_status(self, pid: int, ticks: int | None) -> ExitStatus | None:
        """None while the process runs; how it ended once it has (exact for our own children)."""
        child = self._popen.get(pid)
        if child is not None:
            code = child.poll()
            if code is None:
                return None
            del self._popen[pid]
            if code < 0:
                return ExitStatus(signal=-code, note=_signal_name(-code))
            return ExitStatus(code=code)
        if is_same_process(pid, ticks):
            return None
        return ExitStatus(note="exit status unknown (adopted after a restart of gpuplex)")

    def wait(self, pid: int, timeout_s: float) -> bool:
        child = self._popen.get(pid)
        if child is None:
            return False
        try:
            child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def is_child(self, pid: int) -> bool:
        return pid in self._popen


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
