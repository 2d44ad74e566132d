"""The processes `gpuplex up` starts: each in its own session with its output in a log file,
stopped with SIGTERM (then SIGKILL) when `up` ends. As root, the gateway runs as an unprivileged
user (it never runs as root), with an interpreter and files that user can read.

A child that dies while `up` runs is started again (`restart`), after a wait that starts at
RESTARTS.backoff_initial_s and doubles; more than RESTARTS.max_restarts crashes of one child within
RESTARTS.window_s and `up` gives up (`Crashes`)."""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuplex.clock import now_s, sleep_s
from gpuplex.core.apply.restart import backoff_delay_s
from gpuplex.core.spec.runtime import RestartSpec
from gpuplex.errors import HostActionError
from gpuplex.host.interpreter import python_for_others
from gpuplex.host.ports import port_taken
from gpuplex.host.proc import group_has_running_process
from gpuplex.http_client import call
from gpuplex.settings import full_environment, inherited_environment

#: Whom the gateway runs as when `up` runs as root: its own system user where the operator made
#: one (`useradd --system gpuplex`), else nobody, which other services may share.
GATEWAY_USERS = ("gpuplex", "nobody")


#: How `up` restarts a child that died: 1 s, 2 s, 4 s ... at most 30 s; a sixth crash within two
#: minutes and it gives up.
RESTARTS = RestartSpec(backoff_initial_s=1.0, backoff_max_s=30.0, max_restarts=5, window_s=120.0)


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    #: how it was started, to start it again the same way
    argv: list[str] | None = None
    extra_env: dict[str, str] | None = None
    run_as: RunAs | None = None
    lifeline: dict[str, str] | None = None

    def alive(self) -> bool:
        return self.process.poll() is None

    def last_lines(self, count: int = 5) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-count:])


@dataclass
class Crashes:
    """When one child crashed lately (`now_s()` seconds), and what to do about the next crash."""

    at_s: list[float]

    def after_crash(self, now: float) -> float | None:
        """Record a crash at `now`: the wait before starting the child again, or None when it
        crashed too often lately to try again."""
        self.at_s = [t for t in self.at_s if t > now - RESTARTS.window_s] + [now]
        if len(self.at_s) > RESTARTS.max_restarts:
            return None
        return backoff_delay_s(RESTARTS, len(self.at_s))


@dataclass(frozen=True, slots=True)
class RunAs:
    """Whom a child runs as: None for the current user."""

    uid: int
    gid: int
    name: str


def unprivileged_user() -> RunAs | None:
    """As root: the unprivileged user the gateway runs as; otherwise None (run as oneself)."""
    if os.geteuid() != 0:
        return None
    for name in GATEWAY_USERS:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return RunAs(entry.pw_uid, entry.pw_gid, name)
    raise HostActionError(
        f"running as root, and none of the users {', '.join(GATEWAY_USERS)} exists to run the "
        "gateway as (it never runs as root): create one with `useradd --system gpuplex`"
    )


def python_command(run_as: RunAs | None) -> tuple[list[str], dict[str, str]]:
    """How to start `python -m gpuplex.cli` as `run_as` (see host/interpreter.py)."""
    if run_as is None:
        return [sys.executable, "-m", "gpuplex.cli"], {}
    python, env = python_for_others()
    return [python, "-m", "gpuplex.cli"], env | ({"HOME": "/"} if env else {})


def start(
    name: str,
    argv: list[str],
    log_dir: Path,
    extra_env: dict[str, str] | None = None,
    run_as: RunAs | None = None,
    *,
    lifeline: dict[str, str] | None = None,
) -> Child:
    """`lifeline` (lifecycle.child_environment) is added to whatever environment the child gets."""
    log_path = log_dir / f"{name}.log"
    # with extra variables: only those and the harmless inherited ones (no secrets pass)
    env = None if extra_env is None else inherited_environment() | extra_env
    if lifeline:
        env = (full_environment() if env is None else env) | lifeline
    with log_path.open("ab") as log:
        process = subprocess.Popen(  # noqa: S603 (our own commands, no shell)
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            user=run_as.uid if run_as else None,
            group=run_as.gid if run_as else None,
            extra_groups=[] if run_as else None,
        )
    return Child(name, process, log_path, argv, extra_env, run_as, lifeline)


def restart(child: Child) -> Child:
    """Start a child that died again, as it was started (the same command, environment and
    user), after stopping what is left of its process group."""
    if child.argv is None:
        raise HostActionError(f"the {child.name} was not started by `up`: it cannot be restarted")
    _stop_leftovers(child)
    return start(
        child.name,
        child.argv,
        child.log_path.parent,
        child.extra_env,
        child.run_as,
        lifeline=child.lifeline,
    )


def check_ports_free(listeners: dict[str, tuple[str, int]]) -> None:
    """Refuse to start when something already listens where a listener of ours will: ours would
    fail to bind, and the other process would answer its readiness check (and be sent the demo
    key by --check)."""
    for name, (host, port) in listeners.items():
        if port_taken(host, port):
            raise HostActionError(
                f"{host}:{port}, where the {name} listens, is already in use (another gpuplex up?); "
                "stop what listens there or choose another port"
            )


def wait_ready(url: str, alive: Callable[[], bool], timeout_s: float) -> bool:
    """Poll `url` until it answers (any HTTP status), or what serves it dies, or time runs out."""
    deadline = now_s() + timeout_s
    while now_s() < deadline:
        if not alive():
            return False
        try:
            call("GET", url, timeout_s=1, deadline_s=1, max_bytes=0)  # loopback, our own
            return True
        except OSError:
            sleep_s(0.2)
    return False


def stop(children: list[Child], timeout_s: float = 10) -> None:
    for child in children:
        if child.alive():
            _signal(child, signal.SIGTERM)
    deadline = now_s() + timeout_s
    for child in children:
        try:
            child.process.wait(timeout=max(0.1, deadline - now_s()))
        except subprocess.TimeoutExpired:
            _signal(child, signal.SIGKILL)
            child.process.wait()


def _stop_leftovers(child: Child, timeout_s: float = 5.0) -> None:
    """Stop what a dead child forked that outlived it, in its process group (a gateway's workers
    would hold its port): SIGTERM, then SIGKILL after `timeout_s`."""
    group = child.process.pid
    if not group_has_running_process(group):
        return
    _signal(child, signal.SIGTERM)
    deadline = now_s() + timeout_s
    while group_has_running_process(group) and now_s() < deadline:
        sleep_s(0.1)
    _signal(child, signal.SIGKILL)


def _signal(child: Child, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.process.pid, sig)
