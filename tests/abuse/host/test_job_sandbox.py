"""Item 1 of issue 36, against a real `gpuplex up` on simulated GPUs, as root (tenants run as their
own users): a tenant's job never touches another tenant.

- A job tries to bind every planned port (the tenants' model servers, the gateway, the control
  plane) on 0.0.0.0, 127.0.0.1 and ::, while the replica on one of them is killed and restarts
  again and again: it binds them all, in a network namespace of its own, and never the host's;
  the replica restarts on its port every time and the gateway talks to it only. A job file
  asking for `network: host` is refused (422, naming the field).
- A process of another tenant's user takes a model server's port while that server restarts and
  poses as it, with invented usage (1,800,000 tokens): the gateway refuses its connections
  before sending a byte (503 `backend_unavailable`), bills nothing, and serves the real server
  again once the port is back.
- A job naming host paths (in its arguments, its environment, as its program) under /tmp behind
  a 700 folder and elsewhere reads nothing its user could not read on the host; nothing it names
  under /tmp is there at all."""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuplex.host.state import StateDir
from tests.abuse.host.intruders import (
    BINDER,
    INVENTED_COMPLETION_TOKENS,
    INVENTED_PROMPT_TOKENS,
    SQUATTER,
)
from tests.abuse.host.uprun import UpRun, free_port, remove, shared_base
from tests.e2e.gateway.stack import cannot_run_gateway
from tests.jobs_http import show_job, submit_job

pytestmark = [
    pytest.mark.stacks,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="tenants run as users of their own only as root"),
]

PYTHON = "/usr/bin/python3"  # the system's: any tenant's user can run it
TENANTS = ("alpha", "bravo", "charlie")
#: a killed replica restarts after this: time for an intruder to race it for the port
BACKOFF_S = 2


def served(name: str, port: int) -> dict[str, Any]:
    return {
        "name": name,
        "isolation": "dedicated",
        "workloads": [
            {
                "name": "chat",
                "gpu": {"count": 1},
                "serve": {"model": f"{name}-chat", "port": port},
                "command": ["serve", "--port", "{port}"],  # a stand-in runs (simulated GPUs)
                "restart": {"backoff_initial_s": BACKOFF_S, "backoff_max_s": BACKOFF_S},
            }
        ],
    }


@dataclass
class Up:
    run: UpRun
    ports: dict[str, int]  # alpha, bravo, charlie (their model servers), gateway, control plane
    keys: dict[str, str]
    admin_token: str

    @property
    def host_dir(self) -> Path:
        return self.run.state_dir / "host"

    def home(self, tenant: str) -> Path:
        return self.host_dir / "homes" / tenant

    def uid(self, tenant: str) -> int:
        instance = StateDir(self.host_dir).instance
        return pwd.getpwnam(f"gpx-{instance[:6]}-{tenant}").pw_uid

    def chat(self, tenant: str) -> httpx.Response:
        body = {"model": f"{tenant}-chat", "messages": [{"role": "user", "content": "hi"}]}
        headers = {"authorization": f"Bearer {self.keys[tenant]}"}
        url = f"{self.run.gateway_url}/v1/chat/completions"
        return httpx.post(url, json=body, headers=headers, timeout=15)

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"authorization": f"Bearer {self.admin_token}"}
        url = f"http://127.0.0.1:{self.ports['control plane']}/api/v1{path}"
        return httpx.request(method, url, headers=headers, timeout=30, **kwargs)

    def submit(self, tenant: str, job: dict[str, Any]) -> str:
        return submit_job(self.api, tenant, job)

    def job(self, tenant: str, job_id: str) -> dict[str, Any]:
        return show_job(self.api, tenant, job_id)

    def replica_pid(self, tenant: str) -> int | None:
        state = json.loads((self.host_dir / "state.json").read_text())
        for record in state["records"]:
            wanted = record["desired"]
            if (wanted["tenant"], wanted["workload"]) == (tenant, "chat"):
                return record.get("pid") if record["phase"] in ("starting", "running") else None
        return None

    def events(self, kind: str) -> list[dict[str, Any]]:
        lines = (self.host_dir / "events.jsonl").read_text().splitlines()
        return [e for e in map(json.loads, lines) if e["kind"] == kind]

    def gateway_log(self) -> str:
        return (self.run.state_dir / "logs" / "gateway.log").read_text(errors="replace")

    def explain(self) -> str:
        events = (self.host_dir / "events.jsonl").read_text().splitlines()[-20:]
        return "\n".join(["host events:", *events, "gateway log:", self.gateway_log()[-3000:]])


def eventually(check: Callable[[], Any], what: str, timeout_s: float, up: Up) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout_s:g} s\n{up.explain()}")


@pytest.fixture(scope="module")
def up() -> Iterator[Up]:
    why_not = cannot_run_gateway()
    if why_not:
        pytest.skip(why_not)
    base = shared_base()
    ports = {tenant: free_port() for tenant in TENANTS} | {"gateway": free_port()}
    spec = {
        "version": 1,
        "fleet": {"nodes": [{"name": "box", "gpus": [{"model": "H100-80GB", "count": 6}]}]},
        "tenants": [served(tenant, ports[tenant]) for tenant in TENANTS],
        "queues": {
            "organisations": [
                {"name": "lab", "teams": [{"name": "all", "tenants": [{"name": "charlie"}]}]}
            ]
        },
        "gateway": {"port": ports["gateway"], "health_interval_s": 0.5},
    }
    run = UpRun(base, spec)
    ports["control plane"] = run.port
    try:
        run.start()
        keys = run.wait_for_banner(180)
        token = next(
            m["token"]
            for m in map(re.compile(r"^  admin token  (?P<token>\S+)$").match, run.lines)
            if m
        )
        yield Up(run, ports, keys, token)
    finally:
        run.stop()
        run.kill()
        remove(base)


def listener_uids(port: int) -> set[int]:
    """The uids of the sockets listening on `port` in this (the host's) network namespace."""
    uids = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                uids.add(int(fields[7]))
    return uids


def billed(up: Up, tenant: str) -> int:
    """The most tokens any usage record of `tenant` bills, in the store and in the spool."""
    most = 0
    store = up.run.state_dir / "store" / "gpuplex.db"
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as connection:
        row = connection.execute(
            "SELECT max(prompt_tokens + completion_tokens) FROM usage_records WHERE tenant = ?",
            (tenant,),
        ).fetchone()
        most = max(most, row[0] or 0)
    for segment in (up.run.state_dir / "gateway" / "spool").glob("*"):
        for line in segment.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("tenant") == tenant:
                tokens = record.get("prompt_tokens", 0) + record.get("completion_tokens", 0)
                most = max(most, tokens)
    return most


def kill_replica(up: Up, tenant: str) -> int:
    pid = eventually(lambda: up.replica_pid(tenant), f"{tenant}'s replica running", 30, up)
    os.kill(pid, signal.SIGKILL)
    return int(pid)


def serves_again(up: Up, tenant: str, old_pid: int) -> None:
    def answered() -> bool:
        pid = up.replica_pid(tenant)
        return pid is not None and pid != old_pid and up.chat(tenant).status_code == 200

    eventually(answered, f"{tenant} served again by a new replica", 60, up)


# --- a job and the planned ports --------------------------------------------------------------


def test_a_job_binds_no_planned_port_of_the_host_even_while_a_replica_restarts(up: Up) -> None:
    refused = up.api(
        "POST",
        "/tenants/charlie/jobs",
        json={"gpu": {"count": 1}, "command": ["sleep", "1"], "network": "host"},
    )
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["field"] == "network", refused.text

    assert up.chat("alpha").status_code == 200
    home = up.home("charlie")
    out, stop = home / "binds", home / "stop-binding"
    planned = [up.ports[name] for name in (*TENANTS, "gateway", "control plane")]
    job = {
        "gpu": {"count": 1},
        "command": [PYTHON, "-c", BINDER, str(out), str(stop), *map(str, planned)],
    }
    job_id = up.submit("charlie", job)
    try:

        def holds_all() -> bool:
            return out.exists() and out.read_text().count("bound ") == 3 * len(planned)

        eventually(holds_all, "the job holding every planned port in its own network", 90, up)
        for _ in range(3):  # and races alpha's replica for its port as it restarts
            old = kill_replica(up, "alpha")
            serves_again(up, "alpha", old)
            reply = up.chat("alpha")
            assert reply.status_code == 200
            assert reply.json()["usage"]["total_tokens"] < 1000  # the real server's count

        assert listener_uids(up.ports["alpha"]) == {up.uid("alpha")}
        attacker = up.uid("charlie")
        for name, port in zip((*TENANTS, "gateway", "control plane"), planned, strict=True):
            owners = listener_uids(port)
            assert owners, f"nothing listens on the {name}'s port {port} of the host"
            if name != "charlie":
                assert attacker not in owners, f"the job took the {name}'s port {port}"
        assert not [e for e in up.events("port_in_use") if e["target"].startswith("alpha/")]
        assert up.job("charlie", job_id)["state"] == "running"
        assert "failed" not in out.read_text()  # it did bind them all: in its own namespace
    finally:
        stop.touch()
    eventually(lambda: up.job("charlie", job_id)["state"] == "succeeded", "the job ending", 60, up)


# --- a stranger on a model server's port --------------------------------------------------------


def test_a_process_of_another_tenant_on_a_replicas_port_is_refused_and_bills_nothing(
    up: Up, tmp_path: Path
) -> None:
    assert up.chat("bravo").status_code == 200
    attacker = pwd.getpwuid(up.uid("charlie"))
    said = tmp_path / "squatter.out"
    argv = ["setpriv", f"--reuid={attacker.pw_uid}", f"--regid={attacker.pw_gid}"]
    argv += ["--init-groups", PYTHON, "-c", SQUATTER, str(up.ports["bravo"])]
    with said.open("wb") as output:
        squatter = subprocess.Popen(  # noqa: S603 - setpriv and the system's python
            argv, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        old = kill_replica(up, "bravo")
        eventually(lambda: "bound" in said.read_text(), "the squatter holding the port", 20, up)
        assert listener_uids(up.ports["bravo"]) == {attacker.pw_uid}

        time.sleep(2 * BACKOFF_S)  # the host tried to restart bravo: the port is taken
        answers = [up.chat("bravo") for _ in range(5)]
        time.sleep(1.5)  # health checks go on meanwhile
        for reply in answers:
            assert reply.status_code == 503, reply.text
            assert reply.json()["error"]["code"] == "backend_unavailable", reply.text
        assert "request" not in said.read_text(), said.read_text()  # not a byte was sent
        assert "refused a connection to a replica" in up.gateway_log()
        assert f"uid {attacker.pw_uid}" in up.gateway_log()
        assert billed(up, "bravo") < INVENTED_PROMPT_TOKENS + INVENTED_COMPLETION_TOKENS
        assert billed(up, "bravo") < 1000
    finally:
        os.killpg(squatter.pid, signal.SIGKILL)
        squatter.wait(10)
    serves_again(up, "bravo", old)  # the gateway serves the real server once it is back
    assert listener_uids(up.ports["bravo"]) == {up.uid("bravo")}


# --- a job naming host paths ----------------------------------------------------------------------

SECRET = "TOPSECRET-the-job-must-not-read-this"  # noqa: S105 - a marker, no password
OPEN = "readable-by-anyone"

PROBE = r"""
out="$HOME/paths"; : > "$out"
for f in "$@"; do
  if content=$(cat "$f" 2>/dev/null); then echo "read $f: $content" >> "$out";
  else echo "cannot read $f" >> "$out"; fi
done
for d in $(echo "$PYTHONPATH:$DATA_DIR" | tr ':' ' '); do
  if found=$(ls -A "$d" 2>/dev/null); then echo "listed $d: $found" >> "$out";
  else echo "cannot list $d" >> "$out"; fi
done
echo "own /tmp: $(ls -A /tmp | tr '\n' ' ')" >> "$out"
"""

TOOL = """#!/bin/sh
touch "$HOME/tool-ran"
cat "$(dirname "$0")/secret" > "$HOME/tool-read"
"""


@pytest.fixture
def host_paths() -> Iterator[dict[str, Path]]:
    """Folders the job names: behind a 700 folder under /tmp and under /run (with a secret file
    any user could read were it not behind that folder, and a tool), and readable ones there."""
    made: list[Path] = []
    paths: dict[str, Path] = {}
    for where in ("/tmp", "/run"):  # noqa: S108 - the point
        closed = Path(tempfile.mkdtemp(prefix="gpuplex-closed-", dir=where))
        opened = Path(tempfile.mkdtemp(prefix="gpuplex-open-", dir=where))
        made += [closed, opened]
        (closed / "sub").mkdir(mode=0o755)
        (closed / "sub" / "secret").write_text(SECRET)
        (closed / "sub" / "secret").chmod(0o644)
        (closed / "sub" / "tool").write_text(TOOL)
        (closed / "sub" / "tool").chmod(0o755)
        closed.chmod(0o700)
        opened.chmod(0o755)
        (opened / "file").write_text(OPEN)
        (opened / "file").chmod(0o644)
        key = where.strip("/")
        paths[f"{key} secret"] = closed / "sub" / "secret"
        paths[f"{key} closed"] = closed / "sub"
        paths[f"{key} tool"] = closed / "sub" / "tool"
        paths[f"{key} open"] = opened / "file"
    try:
        yield paths
    finally:
        for folder in made:
            shutil.rmtree(folder, ignore_errors=True)


def test_a_job_naming_host_paths_reads_nothing_its_user_could_not(
    up: Up, host_paths: dict[str, Path]
) -> None:
    home = up.home("charlie")
    for left in ("paths", "tool-ran", "tool-read"):
        (home / left).unlink(missing_ok=True)
    named = [host_paths[k] for k in ("tmp secret", "run secret", "tmp open", "run open")]
    probe = {
        "gpu": {"count": 1},
        "command": ["/bin/sh", "-c", PROBE, "probe", *map(str, named)],
        "env": {
            "PYTHONPATH": str(host_paths["tmp closed"]),
            "DATA_DIR": f"{host_paths['run closed']}:{host_paths['tmp open'].parent}",
            "LD_LIBRARY_PATH": str(host_paths["tmp closed"]),
        },
    }
    tool = {"gpu": {"count": 1}, "command": [str(host_paths["tmp tool"])]}
    probe_id, tool_id = up.submit("charlie", probe), up.submit("charlie", tool)

    def ended(job_id: str) -> Callable[[], bool]:
        return lambda: up.job("charlie", job_id)["state"] in ("succeeded", "failed")

    eventually(ended(probe_id), "the probe job ending", 90, up)
    eventually(ended(tool_id), "the tool job ending", 90, up)
    seen = (home / "paths").read_text()
    assert SECRET not in seen, seen
    for key in ("tmp secret", "run secret", "tmp open"):
        assert f"cannot read {host_paths[key]}" in seen, seen
    assert f"read {host_paths['run open']}: {OPEN}" in seen, seen  # the probe does read
    for key in ("tmp closed", "run closed"):
        assert f"cannot list {host_paths[key]}" in seen, seen
    assert f"cannot list {host_paths['tmp open'].parent}" in seen, seen  # not bound either
    own_tmp = next(line for line in seen.splitlines() if line.startswith("own /tmp:"))
    assert "gpuplex-" not in own_tmp.replace(up.run.base.name, ""), own_tmp
    assert up.job("charlie", tool_id)["state"] == "failed"
    assert not (home / "tool-ran").exists()
    assert not (home / "tool-read").exists()
