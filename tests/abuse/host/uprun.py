"""Run `gpuplex up` as a process the way an operator does, read its banner as it prints, and find
every process of its instance (by cgroup, command line and environment)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplex.host.state import StateDir
from tests.e2e.gateway.stack import cannot_run_gateway
from tests.ports import free_port as free_port  # imported from here by many tests

KEY_LINE = re.compile(r"^  (?P<tenant>[a-z0-9-]+): (?P<key>gpx_\S+)  \((?P<models>[^)]*)\)$")


def small_spec(gateway_port: int, model_port: int) -> dict[str, Any]:
    """One tenant, one served model on one simulated GPU: the smallest `up`."""
    return {
        "version": 1,
        "fleet": {"nodes": [{"name": "box", "gpus": [{"model": "H100-80GB", "count": 1}]}]},
        "tenants": [
            {
                "name": "solo",
                "isolation": "dedicated",
                "workloads": [
                    {
                        "name": "chat",
                        "gpu": {"count": 1},
                        "serve": {"model": "solo-chat", "port": model_port},
                        "command": ["serve", "--port", "{port}"],
                    }
                ],
            }
        ],
        # health checks every 0.5 s: the banner waits for the gateway to see the server
        "gateway": {"port": gateway_port, "health_interval_s": 0.5},
    }


class UpRun:
    """One `gpuplex up` process on a state directory that unprivileged users can pass through."""

    def __init__(self, base: Path, spec: dict[str, Any], state_dir: Path | None = None) -> None:
        self.base = base
        self.spec_path = base / "gpuplex.yaml"
        self.spec_path.write_text(yaml.safe_dump(spec))
        self.state_dir = state_dir or base / "up"
        self.port = free_port()
        self.gateway_url = f"http://127.0.0.1:{spec['gateway']['port']}"
        self.lines: list[str] = []
        self.process: subprocess.Popen[str] | None = None
        self.reader = threading.Thread()
        self.groups: set[int] = set()  # the process groups of every `up` started

    def start(self, *extra: str, port: int | None = None) -> subprocess.Popen[str]:
        argv = [sys.executable, "-m", "gpuplex.cli", "up", str(self.spec_path)]
        argv += ["--state-dir", str(self.state_dir), "--driver", "sim"]
        argv += ["--port", str(port or self.port), *extra]
        self.lines = []
        process = subprocess.Popen(  # noqa: S603 - our own CLI
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            # PYTHONFAULTHANDLER: a hung `up` prints every thread's stack on SIGABRT (`wait`)
            env={**os.environ, "COLUMNS": "300", "NO_COLOR": "1", "PYTHONFAULTHANDLER": "1"},
            start_new_session=True,  # its process group: what it forks without a session of its own
        )
        self.process = process
        self.groups.add(process.pid)
        self.reader = threading.Thread(target=self._read, args=(process,), daemon=True)
        self.reader.start()
        return process

    def wait(self, timeout_s: float) -> int:
        """Its exit status, once it has exited and all its output is read. Still running after
        `timeout_s`: an AssertionError with where each of its threads was (SIGABRT: Python's
        fault handler prints them) and what it printed."""
        assert self.process is not None
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            left = instance_processes(self.state_dir, self.groups)
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)
            self.reader.join(10)
            raise AssertionError(
                f"up (pid {self.process.pid}) still ran {timeout_s:g} s later; its processes "
                f"then: {left}; its output, with its threads' stacks at the end:\n{self.output()}"
            ) from None
        self.reader.join(10)
        return code

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        with process.stdout:
            for line in process.stdout:
                self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for_banner(self, timeout_s: float = 90) -> dict[str, str]:
        """tenant -> demo key, once the banner's example has been printed."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(line.startswith("print(reply.choices") for line in self.lines):
                found = (KEY_LINE.match(line) for line in self.lines)
                return {m["tenant"]: m["key"] for m in found if m}
            assert self.process is not None
            if self.process.poll() is not None:
                time.sleep(0.2)  # the last lines
                raise AssertionError(f"up exited {self.process.returncode}:\n{self.output()}")
            time.sleep(0.05)
        raise AssertionError(f"no banner in {timeout_s:g} s:\n{self.output()}")

    def kill(self) -> None:
        """SIGKILL its process group if it still runs (a test's clean-up after a failure)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.wait(10)

    def stop(self, sig: int = signal.SIGINT, timeout_s: float = 90) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.wait(timeout_s)

    def chat(self, key: str, model: str) -> tuple[int, dict[str, Any]]:
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
        request = urllib.request.Request(  # noqa: S310 - loopback
            f"{self.gateway_url}/v1/chat/completions",
            data=body.encode(),
            headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"{}")


def instance_processes(state_dir: Path, groups: Collection[int] = ()) -> list[str]:
    """Live processes of the instance at `state_dir`: in its cgroups, in one of the process
    `groups` (those of its `up` processes), or naming its directory on their command line or in
    their environment (tenants: GPUPLEX_SIM_DIR, HOME)."""
    instance = StateDir(state_dir / "host").instance
    marker = str(state_dir)
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            stat = (proc / "stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] == "Z":
                continue
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (proc / "environ").read_bytes().decode(errors="replace")
            cgroups = (proc / "cgroup").read_text()
        except OSError:
            continue
        in_group = int(stat.rsplit(")", 1)[1].split()[2]) in groups  # field 5: the group
        if f"gpuplex/{instance}/" in cgroups or in_group or marker in command or marker in environ:
            found.append(f"{proc.name}: {command[:200]}")
    return found


def instance_cgroup_pids(state_dir: Path) -> list[int]:
    """The pids in the instance's cgroups. A cgroup removed while the walk passes it (the
    instance stopping) is walked past: the walk starts again, up to a few times."""
    instance = StateDir(state_dir / "host").instance
    for _ in range(10):
        try:
            return _cgroup_pids(instance)
        except FileNotFoundError:
            continue
    return _cgroup_pids(instance)


def _cgroup_pids(instance: str) -> list[int]:
    pids: list[int] = []
    for procs in Path("/sys/fs/cgroup").glob(f"**/gpuplex/{instance}/**/cgroup.procs"):
        pids += [int(pid) for pid in procs.read_text().split()]
    return pids


def shared_base() -> Path:
    """A folder unprivileged users (the gateway's, the tenants') can pass through."""
    base = Path(tempfile.mkdtemp(prefix="gpuplex-up-abuse-", dir="/tmp"))
    base.chmod(0o711)
    return base


def remove(base: Path) -> None:
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def up_base() -> Iterator[Path]:
    """A shared_base for one test's `gpuplex up`, removed after; skipped where the gateway cannot
    run (as root it needs a Python and setpriv to run as nobody)."""
    why_not = cannot_run_gateway()
    if why_not:
        pytest.skip(why_not)
    folder = shared_base()
    try:
        yield folder
    finally:
        remove(folder)
