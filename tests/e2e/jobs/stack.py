"""A control plane (`gpuplex server`) and a host runtime following its store (`gpuplex host run
--follow-store`) on simulated GPUs, as separate processes, and a small REST client: the jobs
lifecycle end to end, with a control plane that can be killed with -9 and started again.

The two share nothing but the store (a SQLite file in a folder of its own): the control plane's
home and the host's state folder are two folders, neither inside the other, as if on two
machines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml

from gpuplex.clock import utc_now
from gpuplex.store.db import open_store
from gpuplex.store.job_reports import JobReports
from gpuplex.store.tokens import TokenRepository
from tests.abuse.host.uprun import remove, shared_base
from tests.e2e.gateway.stack import free_port, stop
from tests.jobs_http import show_job, submit_job

T = TypeVar("T")


#: a job's command: sleeps, and exits 143 at once when stopped
SLEEPER = ["sh", "-c", "trap 'exit 143' TERM; sleep {s} & wait $!"]


def sleeper_job(gpus: int, seconds: float, **fields: Any) -> dict[str, Any]:
    """A job asking `gpus` whole GPUs that sleeps `seconds` (the REST API's job body)."""
    command = [*SLEEPER[:2], SLEEPER[2].format(s=seconds)]
    return {"gpu": {"count": gpus}, "command": command, **fields}


@contextmanager
def jobs_stack(spec: dict[str, Any]) -> Iterator[JobsStack]:
    """A stack on `spec` in a folder the tenants' users can pass through, stopped and removed
    after (a test's fixture)."""
    base = shared_base()
    running = JobsStack(base, spec)
    try:
        yield running
    finally:
        running.stop()
        remove(base)


def eventually(
    check: Callable[[], T | None],
    what: str,
    timeout_s: float = 60,
    explain: Callable[[], str] | None = None,
) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    detail = f"\n{explain()}" if explain is not None else ""
    raise AssertionError(f"{what}: not within {timeout_s} s{detail}")


@dataclass
class JobsStack:
    base: Path  # a folder the tenants' users can pass through
    spec: dict[str, Any]
    interval_s: float = 0.3
    port: int = field(default_factory=free_port)
    server: subprocess.Popen[bytes] | None = None
    host: subprocess.Popen[bytes] | None = None
    token: str = ""

    @property
    def store_url(self) -> str:
        return f"sqlite:///{self.base / 'store' / 'gpuplex.db'}"

    @property
    def state_dir(self) -> Path:
        """The host runtime's state folder."""
        return self.base / "host"

    @property
    def control_home(self) -> Path:
        """The control plane's home ($GPUPLEX_HOME): no path in common with the host's."""
        return self.base / "control"

    def start(self) -> None:
        (self.base / "store").mkdir(mode=0o700)
        spec_path = self.base / "gpuplex.yaml"
        spec_path.write_text(yaml.safe_dump(self.spec, sort_keys=False))
        engine = open_store(self.store_url)
        self.token, _ = TokenRepository(engine).create(
            name="e2e",
            role="platform-admin",
            tenant=None,
            expires_at=None,
            now=utc_now(),
            actor="t",
        )
        engine.dispose()
        self.start_server(spec_path)
        self.start_host()

    def start_host(self) -> None:
        argv = [sys.executable, "-m", "gpuplex.cli", "host", "run", "--follow-store"]
        argv += [self.store_url, "--state-dir", str(self.state_dir), "--driver", "sim"]
        argv += ["--interval", str(self.interval_s)]
        self.host = self._spawn("host", argv)

    def kill_host(self) -> None:
        """kill -9 the host runtime: the tenants' processes run on without it."""
        assert self.host is not None
        self.host.send_signal(signal.SIGKILL)
        self.host.wait(timeout=10)

    def start_server(self, spec_path: Path | None = None) -> None:
        argv = [sys.executable, "-m", "gpuplex.cli", "server", "--store", self.store_url]
        argv += ["--port", str(self.port), "--jobs-interval-s", str(self.interval_s)]
        if spec_path is not None:
            argv += ["--spec", str(spec_path)]
        self.control_home.mkdir(mode=0o700, exist_ok=True)
        self.server = self._spawn("server", argv, {"GPUPLEX_HOME": str(self.control_home)})
        eventually(self._healthy, "the control plane answering /healthz", 60)

    def kill_server(self) -> None:
        """kill -9 the control plane: no chance to finish what it was doing."""
        assert self.server is not None
        self.server.send_signal(signal.SIGKILL)
        self.server.wait(timeout=10)

    def stop(self) -> None:
        for process in (self.server, self.host):
            if process is not None and process.poll() is None:
                stop(process)
        if self.state_dir.exists():  # the tenants' processes: `host down` stops them all
            down = [sys.executable, "-m", "gpuplex.cli", "host", "down", "--state-dir"]
            subprocess.run(  # noqa: S603 - our own CLI
                [*down, str(self.state_dir), "--forget-users"],
                capture_output=True,
                timeout=120,
                check=False,
            )

    def log(self, name: str) -> str:
        path = self.base / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # --- the REST API ------------------------------------------------------------------------
    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"authorization": f"Bearer {self.token}"}
        url = f"http://127.0.0.1:{self.port}/api/v1{path}"
        return httpx.request(method, url, headers=headers, timeout=30, **kwargs)

    def submit(self, tenant: str, body: dict[str, Any]) -> str:
        return submit_job(self.api, tenant, body)

    def show(self, tenant: str, job_id: str) -> dict[str, Any]:
        return show_job(self.api, tenant, job_id)

    def explain(self, jobs: dict[str, str]) -> str:
        """Each job's state, events and reason, the host's last events and the processes' logs
        ends: what a failing test prints."""
        lines = []
        for job_id, tenant in jobs.items():
            shown = self.show(tenant, job_id)
            steps = " -> ".join(e["state"] for e in shown["events"])
            lines.append(f"{job_id} ({tenant}): {steps}; {shown['reason']}")
        engine = open_store(self.store_url)
        try:
            for report in JobReports(engine).of(list(jobs)).values():
                lines.append(f"report: {report}")
        finally:
            engine.dispose()
        lines += [
            f"host: {e['kind']} {e['target']}: {e['message']}" for e in self.host_events()[-15:]
        ]
        for name in ("server", "host"):
            lines += [f"{name}.log: {line}" for line in self.log(name).splitlines()[-10:]]
        return "\n".join(lines)

    def host_events(self) -> list[dict[str, Any]]:
        path = self.state_dir / "events.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def _spawn(
        self, name: str, argv: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        with (self.base / f"{name}.log").open("ab") as log:
            return subprocess.Popen(  # noqa: S603 - our own CLI
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **(env or {})},
            )

    def _healthy(self) -> bool:
        assert self.server is not None
        if self.server.poll() is not None:
            raise AssertionError(f"the control plane exited:\n{self.log('server')}")
        try:
            url = f"http://127.0.0.1:{self.port}/healthz"
            answered = httpx.get(url, timeout=1).status_code == 200
            return answered and self.server.poll() is None  # ours, not a stranger on its port
        except httpx.HTTPError:
            return False
