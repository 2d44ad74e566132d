"""Gateway benchmark, the processes: the simulated model server (the backend), nginx as a plain
reverse proxy, `gpuplex gateway` in each configuration, and the minimal client proxies
(bench/gateway_clients.py), all on loopback, in one temporary directory, stopped on exit.

As root, the gateway runs as nobody the way the end-to-end tests run it (tests/e2e/gateway/stack.py:
`gateway_command`, `hand_to_gateway_user`), since `gpuplex gateway` refuses to run as root.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from tests.e2e.gateway.stack import (
    NOBODY,
    ROOT,
    free_port,
    gateway_command,
    hand_to_gateway_user,
    start_sim_model,
    stop,
    wait_for_key,
    wait_healthy,
)

from bench.gateway_load import MODEL, find_tool
from gpuplex.store.db import open_store
from gpuplex.store.keys import KeyLimits, KeyRepository

#: High enough never to refuse a request in a 10 s run at any rate this machine reaches.
TENANT_LIMITS = (
    "{requests_per_min: 10000000, tokens_per_min: 10000000000, concurrent_requests: 100000}"
)
KEY_LIMITS = KeyLimits(10_000_000, 10_000_000_000, 100_000)


@dataclass(frozen=True)
class GatewaySetup:
    """One configuration of `gpuplex gateway`."""

    label: str
    tenant: str  # "plain": no rate limits; "full": tenant and key limits set
    workers: int = 1
    limiter: str = "memory"
    server: str = "uvicorn"  # the gateway's default


@dataclass
class Running:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_problems(self, most: int = 20) -> list[str]:
        """The log's warnings, errors and tracebacks, timestamps dropped, repeats counted: "N x
        line", most frequent first."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return []
        counts: Counter[str] = Counter(
            _TIMESTAMP.sub("", line) for line in lines if _PROBLEM.search(line)
        )
        return [f"{n} x {line}" for line, n in counts.most_common(most)]


_PROBLEM = re.compile(r"WARNING|ERROR|CRITICAL|Traceback|Exception|\berror\b", re.IGNORECASE)
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[,.]\d+\s*")


def gateway_spec(setup: GatewaySetup, port: int, backend_port: int) -> str:
    limits = f"    rate_limits: {TENANT_LIMITS}\n" if setup.tenant == "full" else ""
    return (
        "fleet:\n"
        "  nodes: [{name: n1, gpus: [{model: H100-80GB, count: 1}]}]\n"
        "tenants:\n"
        f"  - name: {setup.tenant}\n"
        "    isolation: mps\n"
        "    requirement: moderate\n"
        f"{limits}"
        "    workloads:\n"
        "      - name: llm\n"
        "        gpu: {memory_gib: 40}\n"
        f"        serve: {{model: {MODEL}, port: {backend_port}}}\n"
        "gateway:\n"
        f"  port: {port}\n"
        f"  workers: {setup.workers}\n"
        f"  limiter: {setup.limiter}\n"
        "  max_in_flight_per_backend: 256\n"
        "  max_waiting_per_tenant: 4096\n"
    )


def nginx_conf(directory: Path, port: int, backend_port: int) -> str:
    user = ""
    if os.geteuid() == 0:  # workers as nobody, who owns the directory (hand_to_gateway_user)
        user = f"user {pwd.getpwuid(NOBODY).pw_name} {grp.getgrgid(NOBODY).gr_name};\n"
    temp = "\n".join(
        f"  {kind}_temp_path {directory / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""daemon off;
master_process on;
worker_processes 2;
{user}pid {directory / "nginx.pid"};
error_log {directory / "error.log"} warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
{temp}
  upstream backend {{ server 127.0.0.1:{backend_port}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }}
  }}
}}
"""


class Processes:
    """The benchmark's temporary directory and every process started in it; `close` (and leaving
    the `with` block, on an exception or Ctrl-C too) stops them all and removes the directory."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="gpuplex-bench-gateway-"))
        self.tmp.chmod(0o755)
        self.store_url = f"sqlite:///{self.tmp / 'gpuplex.db'}"
        self.running: list[Running] = []

    def __enter__(self) -> Processes:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        while self.running:
            self.stop(self.running[-1])
        shutil.rmtree(self.tmp, ignore_errors=True)

    def stop(self, running: Running) -> None:
        stop(running.process, signal.SIGTERM)  # to its process group; SIGKILL after 10 s
        if running in self.running:
            self.running.remove(running)

    def keys(self) -> dict[str, str]:
        """An API key per tenant: "plain" without limits, "full" with high limits of its own."""
        repository = KeyRepository(open_store(self.store_url))
        made = {}
        for tenant, limits in (("plain", KeyLimits()), ("full", KEY_LIMITS)):
            secret, _ = repository.create(
                tenant=tenant,
                name="bench",
                models=[],
                expires_at=None,
                limits=limits,
                now=datetime.now(UTC),
                actor="bench",
            )
            made[tenant] = secret
        return made

    def backend(self) -> Running:
        port = free_port()
        log_path = self.tmp / "backend.log"
        process = start_sim_model(log_path, port, [MODEL])
        return self._add(Running(f"http://127.0.0.1:{port}", process, log_path))

    def nginx(self, backend_port: int) -> Running:
        directory = self.tmp / "nginx"
        directory.mkdir()
        port = free_port()
        conf = directory / "nginx.conf"
        conf.write_text(nginx_conf(directory, port, backend_port))
        hand_to_gateway_user(self.tmp)
        log_path = directory / "output.log"
        command = [find_tool("nginx") or "nginx", "-p", str(directory), "-e", str(directory / "error.log"), "-c", str(conf)]  # fmt: skip
        return self._start("nginx", command, None, port, log_path)

    def gateway(self, setup: GatewaySetup, backend_port: int, key: str, redis_url: str) -> Running:
        port = free_port()
        home = self.tmp / f"gateway-{port}"
        (home / "spool").mkdir(parents=True)
        spec = home / "gpuplex.yaml"
        spec.write_text(gateway_spec(setup, port, backend_port))
        args = ["--config", str(spec), "--store", self.store_url, "--spool-dir", str(home / "spool")]  # fmt: skip
        args += ["--server", setup.server]
        if setup.limiter == "redis":
            args += ["--redis-url", redis_url]
        command, environment = gateway_command(args)
        hand_to_gateway_user(self.tmp)
        running = self._start(setup.label, command, environment, port, home / "gateway.log")
        try:
            wait_for_key(running.url, key)
        except AssertionError as error:
            raise RuntimeError(f"{setup.label}: {error}\n{running.log_path.read_text()}") from None
        return running

    def client_proxy(self, client: str, backend_url: str) -> Running:
        port = free_port()
        command = [sys.executable, "-m", "bench.gateway_clients", client, "--port", str(port)]
        command += ["--backend", backend_url]
        log_path = self.tmp / f"proxy-{client}.log"
        return self._start(f"proxy, {client}", command, None, port, log_path)

    def _start(
        self,
        label: str,
        command: list[str],
        environment: dict[str, str] | None,
        port: int,
        log_path: Path,
    ) -> Running:
        with log_path.open("ab") as log:
            process = subprocess.Popen(  # noqa: S603 - our own processes, arguments built here
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=environment,
                cwd=ROOT,
            )
        running = self._add(Running(f"http://127.0.0.1:{port}", process, log_path))
        try:
            wait_healthy(running.url, process)
        except AssertionError as error:
            raise RuntimeError(
                f"{label}: {error}\n{log_path.read_text(errors='replace')}"
            ) from None
        return running

    def _add(self, running: Running) -> Running:
        self.running.append(running)
        return running


def redis_reachable(url: str) -> str | None:
    """None when Redis answers at `url`, else why not."""
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=2)
        client.ping()
        client.close()
    except redis.RedisError as error:
        return str(error)
    return None
