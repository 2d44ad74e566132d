"""A real gateway stack for end-to-end tests: simulated model servers and `gpuplex gateway` as
subprocesses on loopback, a SQLite store with API keys, and the spec that ties them together."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from gpuplex.core.spec import RateLimits
from gpuplex.store.db import open_store
from gpuplex.store.keys import KeyRepository
from gpuplex.store.usage import UsageRepository
from tests.ports import free_port as free_port  # imported from here by many tests

ROOT = Path(__file__).resolve().parents[3]
NOBODY = 65534
#: What the stack's gateways take as their metrics token ($GPUPLEX_METRICS_TOKEN).
METRICS_TOKEN = "gpm_test-metrics-token-0123456789"  # noqa: S105 - a test's own token

#: Root runs the gateway as nobody: `gpuplex gateway` refuses to run as root. The system's Python
#: runs it, with the project's packages on the path, since nobody cannot read root's own Python.
SYSTEM_PYTHON = "/usr/bin/python3"


def cannot_run_gateway() -> str | None:
    """Why the gateway cannot be started here, or None (as root it must run as nobody)."""
    if os.geteuid() == 0 and (not Path(SYSTEM_PYTHON).exists() or shutil.which("setpriv") is None):
        return f"running as root, and no {SYSTEM_PYTHON} + setpriv to run the gateway as nobody"
    return None


def gateway_command(args: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    command = ["-m", "gpuplex.cli", "gateway", *args]
    if os.geteuid() != 0:
        return [sys.executable, *command], dict(os.environ)
    why_not = cannot_run_gateway()
    if why_not:
        pytest.skip(why_not)
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": f"{ROOT / 'src'}:{sysconfig.get_paths()['purelib']}",
        "HOME": "/",
    }
    drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
    return [*drop, SYSTEM_PYTHON, *command], environment


def hand_to_gateway_user(directory: Path) -> None:
    """As root: give the gateway's unprivileged user the stack's files (store, spool, specs)."""
    if os.geteuid() != 0:
        return
    os.chown(directory, NOBODY, NOBODY)
    for path in directory.rglob("*"):
        os.chown(path, NOBODY, NOBODY)


def wait_for_key(url: str, key: str, timeout_s: float = 5) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        reply = httpx.get(f"{url}/v1/models", headers={"authorization": f"Bearer {key}"})
        if reply.status_code == 200:
            return
        time.sleep(0.05)
    raise AssertionError(f"{url} did not accept a new key within {timeout_s} s")


def wait_healthy(url: str, process: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"{url} exited with {process.returncode}")
        try:
            ok = httpx.get(f"{url}/health", timeout=1).status_code == 200
            if ok and process.poll() is None:  # ours answered, not a stranger on its port
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{url} did not become healthy in {timeout_s} s")


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def start_sim_model(
    log_path: Path,
    port: int,
    models: Sequence[str],
    adapters: Sequence[str] = (),
    *,
    decode_ms_per_token: float = 0.0,
    prefill_ms_per_token: float = 0.0,
    contention: float = 0.0,
    max_concurrency: int | None = None,
) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "gpuplex.cli", "sim", "model", "--port", str(port)]
    for model in models:
        args += ["--model", model]
    for adapter in adapters:
        args += ["--adapter", adapter]
    args += ["--decode-ms-per-token", str(decode_ms_per_token)]
    args += ["--prefill-ms-per-token", str(prefill_ms_per_token)]
    args += ["--contention", str(contention)]
    if max_concurrency is not None:
        args += ["--max-concurrency", str(max_concurrency)]
    with log_path.open("ab") as log:
        process = subprocess.Popen(  # noqa: S603 - our own CLI
            args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", process)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{log_path.read_text()}") from None
    return process


def sim_prompt_tokens(sim_url: str, body: dict[str, object]) -> int:
    """What a simulated model server counts for a request's prompt (its `/tokenize`, the count its
    `usage` reports): gateway tests compare what the gateway records with this, the server's word,
    never with the gateway's own estimate."""
    asked = {key: body[key] for key in ("model", "messages", "prompt", "tools") if key in body}
    reply = httpx.post(f"{sim_url}/tokenize", json=asked, timeout=10)
    reply.raise_for_status()
    return int(reply.json()["count"])


@dataclass
class Gateway:
    spec_path: Path | None  # None: the gateway serves the store's applied revision
    store_url: str
    spool_dir: Path
    port: int
    redis_url: str | None = None
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    metrics_token: str | None = METRICS_TOKEN

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def metrics(self) -> str:
        """/metrics, read with the metrics token as Prometheus would."""
        headers = {"authorization": f"Bearer {self.metrics_token}"}
        reply = httpx.get(f"{self.url}/metrics", headers=headers)
        assert reply.status_code == 200, reply.text
        return reply.text

    def start(self) -> None:
        args = ["--store", self.store_url, "--spool-dir", str(self.spool_dir)]
        if self.spec_path is not None:
            args += ["--config", str(self.spec_path)]
        if self.redis_url:
            args += ["--redis-url", self.redis_url]
        argv, environment = gateway_command(args)
        if self.metrics_token is not None:
            environment["GPUPLEX_METRICS_TOKEN"] = self.metrics_token
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.spool_dir.parent / f"gateway-{self.port}.log"
        log = self.log_path.open("ab")
        hand_to_gateway_user(self.spool_dir.parent)
        self.process = subprocess.Popen(  # noqa: S603 - our own CLI
            argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=environment
        )
        log.close()
        try:
            wait_healthy(self.url, self.process)
        except AssertionError as error:
            raise AssertionError(f"{error}\n{self.log_path.read_text()}") from None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is not None:
            stop(self.process, sig)

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path else ""


@dataclass
class Stack:
    tmp: Path
    store_url: str
    sims: list[subprocess.Popen[bytes]] = field(default_factory=list)
    gateways: list[Gateway] = field(default_factory=list)

    def key(
        self,
        tenant: str,
        models: Sequence[str] = (),
        expires_at: datetime | None = None,
        **limits: int,
    ) -> str:
        keys = KeyRepository(open_store(self.store_url))
        secret, _ = keys.create(
            tenant=tenant,
            name="test",
            models=list(models),
            expires_at=expires_at,
            limits=RateLimits(
                requests_per_min=limits.get("rpm"),
                tokens_per_min=limits.get("tpm"),
                concurrent_requests=limits.get("concurrency"),
            ),
            now=datetime.now(UTC),
            actor="test",
        )
        for gateway in self.gateways:  # the gateway loads new keys within half a second
            wait_for_key(gateway.url, secret)
        return secret

    def usage(self) -> UsageRepository:
        return UsageRepository(open_store(self.store_url))

    def sim(self, models: Sequence[str], adapters: Sequence[str] = (), **latency: float) -> int:
        port = free_port()
        log_path = self.tmp / f"sim-{port}.log"
        self.sims.append(start_sim_model(log_path, port, models, adapters, **latency))  # type: ignore[arg-type]
        return port

    def gateway(self, spec_text: str, redis_url: str | None = None, name: str = "gw") -> Gateway:
        spec_path = self.tmp / f"{name}.yaml"
        port = free_port()
        spec_path.write_text(spec_text.replace("{gateway_port}", str(port)))
        gateway = Gateway(spec_path, self.store_url, self.tmp / "spool", port, redis_url)
        self.gateways.append(gateway)
        gateway.start()
        return gateway

    def close(self) -> None:
        for gateway in self.gateways:
            gateway.stop()
        for sim in self.sims:
            stop(sim)


#: One tenant (acme) with one MPS model server (acme-chat on base llama-8b), the gateway checking
#: it every 0.5 s; `{gateway_port}` is filled in by `Stack.gateway`.
ONE_TENANT_SPEC = """
fleet:
  nodes: [{name: n1, gpus: [{model: H100-80GB, count: 1}]}]
tenants:
  - name: acme
    isolation: mps
    requirement: moderate
    workloads:
      - name: chat
        gpu: {memory_gib: 20}
        serve: {model: acme-chat, base_model: llama-8b, port: {sim_port}}
gateway:
  port: {gateway_port}
  health_interval_s: 0.5
"""


def one_tenant_spec(sim_port: int) -> str:
    """ONE_TENANT_SPEC with its model server on `sim_port`."""
    return ONE_TENANT_SPEC.replace("{sim_port}", str(sim_port))


@contextlib.contextmanager
def stack_in() -> Iterator[Stack]:
    """A stack in a directory of its own under /tmp (pytest's tmp_path is closed to other
    users), stopped and removed at the end."""
    directory = Path(tempfile.mkdtemp(prefix="gpuplex-gateway-test-"))
    directory.chmod(0o755)
    made = Stack(directory, f"sqlite:///{directory / 'gpuplex.db'}")
    try:
        yield made
    finally:
        made.close()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def stack() -> Iterator[Stack]:
    with stack_in() as made:
        yield made
