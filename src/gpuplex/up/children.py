"""The processes `gpuplex up` starts: each in its own session with its output in a log file,
stopped with SIGTERM (then SIGKILL) when `up` ends. As root, the gateway runs as an unprivileged
user (it never runs as root), with an interpreter and files that user can read."""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuplex.clock import now_s, sleep_s
from gpuplex.errors import HostActionError
from gpuplex.host.interpreter import python_for_others
from gpuplex.host.ports import port_taken
from gpuplex.settings import full_environment, inherited_environment

#: Whom the gateway runs as when `up` runs as root: its own system user where the operator made
#: one (`useradd --system gpuplex`), else nobody, which other services may share.
GATEWAY_USERS = ("gpuplex", "nobody")


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def alive(self) -> bool:
        return self.process.poll() is None

    def last_lines(self, count: int = 5) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-count:])


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
    return Child(name, process, log_path)


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
            with urllib.request.urlopen(url, timeout=1):  # noqa: S310 (loopback, our own)
                return True
        except urllib.error.HTTPError:
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


def _signal(child: Child, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.process.pid, sig)
