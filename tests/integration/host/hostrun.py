"""Drive the host runtime the way an operator does: real `gpuplex host ...` processes, real tenant
processes (gpuplex.sim.workload), simulated GPUs. Everything a test starts is stopped afterwards."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuplex.host.interpreter import python_for_others
from tests.ports import free_port_block as free_port_block  # imported from here by other tests

PYTHON = sys.executable
#: Tenants run as unprivileged users when the tests run as root: their interpreter must be one
#: those users can run (host/interpreter.py), with TENANT_ENV in each workload's environment
#: (spec() adds it).
TENANT_PYTHON, TENANT_ENV = python_for_others() if os.geteuid() == 0 else (PYTHON, {})
WORKLOAD = [TENANT_PYTHON, "-m", "gpuplex.sim.workload"]


def healthy(port: int, timeout_s: float = 1.0) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    try:
        connection.request("GET", "/health")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def post(port: int, path: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request("POST", path)
        return connection.getresponse().status
    finally:
        connection.close()


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def server(tenant: str, port: int, *extra: str, **fields: Any) -> dict[str, Any]:
    """One tenant with one inference workload `svc` served by the stand-in workload."""
    workload: dict[str, Any] = {
        "name": "svc",
        "gpu": fields.pop("gpu", {"count": 1}),
        "serve": {"model": f"{tenant}-model", "port": port},
        "command": [*WORKLOAD, "--port", "{port}", *extra],
        "health": {
            "interval_s": 0.1,
            "timeout_s": 0.5,
            "failure_threshold": 3,
            "start_timeout_s": 30,
        },
        "restart": fields.pop(
            "restart", {"backoff_initial_s": 0.3, "backoff_max_s": 2, "stop_grace_s": 2}
        ),
    }
    workload.update(fields.pop("workload", {}))
    return {"name": tenant, **fields, "workloads": [workload]}


def spec(tenants: list[dict[str, Any]], gpus: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    for tenant in tenants:
        for workload in tenant.get("workloads", []):
            if workload.get("command", [None])[0] == TENANT_PYTHON:
                workload["env"] = TENANT_ENV | workload.get("env", {})
    return {
        "version": 1,
        "fleet": {"nodes": [{"name": "box", "gpus": gpus}]},
        "tenants": tenants,
        **top,
    }


@dataclass
class Host:
    """A state directory and the gpuplex processes working on it."""

    root: Path
    supervisors: list[subprocess.Popen[bytes]] = field(default_factory=list)
    env: dict[str, str] | None = None  # the environment gpuplex runs with (None: this one)

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    def write_spec(self, document: dict[str, Any], name: str = "gpuplex.yaml") -> Path:
        path = self.root / name
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        return path

    def run_cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`gpuplex <args>`, without --state-dir (validate, plan)."""
        return subprocess.run(  # noqa: S603 - our own CLI
            [PYTHON, "-m", "gpuplex.cli", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=self.env,
        )

    def gpuplex(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(  # noqa: S603 - our own CLI
            [PYTHON, "-m", "gpuplex.cli", *args, "--state-dir", str(self.state_dir)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=self.env,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"gpuplex {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            )
        return done

    def apply(self, spec_file: Path, *more: str) -> str:
        return self.gpuplex("host", "apply", str(spec_file), "--driver", "sim", *more).stdout

    def start_supervisor(
        self, spec_file: Path | None = None, interval_s: float = 0.1
    ) -> subprocess.Popen[bytes]:
        argv = [PYTHON, "-m", "gpuplex.cli", "host", "run"]
        if spec_file is not None:
            argv.append(str(spec_file))
        argv += [
            "--state-dir",
            str(self.state_dir),
            "--driver",
            "sim",
            "--interval",
            str(interval_s),
        ]
        with (self.root / f"supervisor-{len(self.supervisors)}.log").open("wb") as log:
            process = subprocess.Popen(  # noqa: S603
                argv, stdout=log, stderr=subprocess.STDOUT, env=self.env
            )
        self.supervisors.append(process)
        return process

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.gpuplex("host", "status", "-o", "json").stdout)
        return result

    def replicas(self) -> dict[str, dict[str, Any]]:
        return {r["label"]: r for r in self.status()["replicas"]}

    def state(self) -> dict[str, Any]:
        path = self.state_dir / "state.json"
        if not path.exists():
            return {"records": [], "mps_daemons": []}
        result: dict[str, Any] = json.loads(path.read_text())
        return result

    def record(self, label: str) -> dict[str, Any] | None:
        for record in self.state()["records"]:
            desired = record["desired"]
            if f"{desired['tenant']}/{desired['workload']}#{desired['replica']}" == label:
                return dict(record)
        return None

    def pid_of(self, label: str) -> int | None:
        record = self.record(label)
        return None if record is None else record.get("pid")

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        path = self.state_dir / "events.jsonl"
        if not path.exists():
            return []
        found = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [e for e in found if kind is None or e["kind"] == kind]

    def phase(self, label: str) -> str | None:
        record = self.record(label)
        return None if record is None else str(record["phase"])

    def close(self) -> None:
        for process in self.supervisors:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        if (self.state_dir / "state.json").exists():
            # and the tenant users this test's instance made: a host has room for ~900
            self.gpuplex("host", "down", "--forget-users", check=False)
        for record in self.state()["records"] + self.state()["mps_daemons"]:
            pid = record.get("pid")
            if pid and alive(pid):
                os.kill(pid, signal.SIGKILL)


def host_fixture(tmp_path: Path) -> Iterator[Host]:
    """A Host in a folder of its own that the tenants' users can pass through (pytest's tmp_path
    is under a 700 folder); `tmp_path` names it, for reading in a failure's output."""
    root = Path(tempfile.mkdtemp(prefix=f"gpuplex-host-{tmp_path.name}-"))
    root.chmod(0o711)
    host = Host(root)
    try:
        yield host
    finally:
        host.close()
        shutil.rmtree(root, ignore_errors=True)
