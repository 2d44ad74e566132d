"""How `gpuplex up` starts and stops safely:

- one `up` per state directory: `up.lock` (flock) is taken before anything changes, and a second
  `up` on the same directory is refused with the first one's pid and ports, having changed
  nothing (no spec revision, no revoked key, no stopped tenant);
- SIGINT and SIGTERM only set a flag; start-up checks it between steps and in every wait, so a
  stop at any moment of start-up unwinds exactly what was started so far (an ExitStack), and a
  second Ctrl-C cannot cut that clean-up short;
- the processes `up` starts (host runtime, gateway) get SIGTERM from the kernel when `up` dies,
  even by kill -9 (`exit_with_parent`, via $GPUPLEX_PARENT_PID); the tenants, as always, outlive
  a gpuplex that is gone, and the next `up` adopts them."""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpuplex.errors import ErrorCode, GpuplexError, HostBusyError
from gpuplex.settings import environment_value
from gpuplex.signal_event import SignalEvent

PARENT_VARIABLE = "GPUPLEX_PARENT_PID"
_PR_SET_PDEATHSIG = 1


class StartInterrupted(GpuplexError):
    """SIGINT or SIGTERM arrived while `up` was starting; what had started was stopped."""

    code = ErrorCode.INTERRUPTED  # exit code 130, as the shell reports a program ended by SIGINT


class StopSignals:
    """From `catch()` on, SIGINT and SIGTERM set `event` instead of raising anywhere (through a
    SignalEvent: a handler that set a threading.Event itself could wait for itself forever)."""

    def __init__(self) -> None:
        self._signals = SignalEvent()
        self.event = self._signals.event

    def catch(self) -> StopSignals:
        self._signals.catch((signal.SIGINT, signal.SIGTERM))
        return self

    def checkpoint(self) -> None:
        if self._signals.is_set():
            raise StartInterrupted("interrupted while starting: everything started was stopped")


def refuse_if_running(root: Path) -> None:
    """Raise HostBusyError when an `up` holds `<root>/up.lock`; create nothing."""
    path = root / "up.lock"
    try:
        handle = path.open("r")
    except OSError:
        return  # no lock file: no up ever ran here (or it cannot be read: the lock will say)
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise HostBusyError(_busy_message(root, path)) from None


@contextmanager
def instance_lock(root: Path, listeners: dict[str, tuple[str, int]]) -> Iterator[None]:
    """Hold `<root>/up.lock` for the life of this `up`; refuse when another `up` holds it."""
    path = root / "up.lock"
    handle = open(path, "a+", opener=lambda p, f: os.open(p, f, 0o600))  # noqa: SIM115
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise HostBusyError(_busy_message(root, path)) from None
        handle.seek(0)
        handle.truncate()
        where = {name: f"{host}:{port}" for name, (host, port) in listeners.items()}
        handle.write(json.dumps({"pid": os.getpid(), "listens": where}))
        handle.flush()
        yield
    finally:
        handle.close()


def _busy_message(root: Path, path: Path) -> str:
    try:
        holder = json.loads(path.read_text())
        pid, listens = int(holder["pid"]), dict(holder["listens"])
    except (OSError, ValueError, KeyError, TypeError):
        return (
            f"another gpuplex up already runs with the state directory {root}; nothing was changed"
        )
    ports = ", ".join(f"the {name} on {where}" for name, where in listens.items())
    return (
        f"gpuplex up (pid {pid}) already runs with the state directory {root} ({ports}); "
        "nothing was changed: stop it first (Ctrl-C where it runs, or kill -TERM "
        f"{pid}), or give this one another --state-dir"
    )


def child_environment() -> dict[str, str]:
    """What a child of `up` needs to die with it."""
    return {PARENT_VARIABLE: str(os.getpid())}


def exit_with_parent() -> None:
    """In a child of `up` ($GPUPLEX_PARENT_PID set): ask the kernel for SIGTERM when the parent
    dies, and exit at once if it already has. Elsewhere: nothing."""
    wanted = environment_value(PARENT_VARIABLE)
    if not wanted or not wanted.isdigit():
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != int(wanted):  # the parent died before the request was made
        raise SystemExit(0)
