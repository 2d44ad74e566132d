"""`gpuplex job` against a real control plane (the app under uvicorn on a loopback port, a real
store, a spec with queues): submit from flags and from a YAML file, list, show with why the job
waits, logs, cancel; a job file's mistake with file:line and the field, the API's refusals with
the error model's exit codes. The command runs as a user runs it (a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvicorn
from sqlalchemy import Engine

from gpuplex.error_codes import EXIT_BAD_INPUT, EXIT_FAILED
from gpuplex.host.logs import log_paths
from gpuplex.server.app import create_app
from tests.integration.server.conftest import TENANT_A, TENANT_B, Api, make_api
from tests.integration.server.test_jobs_api import QUEUES_SPEC_YAML
from tests.integration.sim.servers import free_port

# The store tests' fixtures (a new SQLite file or PostgreSQL schema per test), shared, not copied.
from tests.integration.store.conftest import engine, postgres_dsn, store_templates, store_url

__all__ = ["engine", "postgres_dsn", "store_templates", "store_url"]

ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True, slots=True)
class Running:
    url: str
    tokens: dict[str, str]
    api: Api  # its host reports to the store from a state folder of its own

    def env(self, caller: str) -> dict[str, str]:
        return {"GPUPLEX_SERVER_URL": self.url, "GPUPLEX_TOKEN": self.tokens[caller]}


@pytest.fixture
def control_plane(engine: Engine, tmp_path: Path) -> Iterator[Running]:
    api = make_api(engine, tmp_path)
    api.apply(QUEUES_SPEC_YAML)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(api.ctx), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the control plane did not start"
        time.sleep(0.05)
    try:
        yield Running(f"http://127.0.0.1:{port}", api.tokens, api)
    finally:
        server.should_exit = True
        thread.join(10)


def job(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLEX_")}
    return subprocess.run(  # noqa: S603 - our own interpreter and module, fixed arguments
        [sys.executable, "-m", "gpuplex.cli", "job", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
        env={**base, **env, "COLUMNS": "200"},
    )


def test_submit_from_flags_list_show_logs_and_cancel(control_plane: Running) -> None:
    env = control_plane.env("a-admin")
    submitted = job(
        "submit",
        "--gpu-memory-gib",
        "10",
        "--compute-percent",
        "20",
        "--command",
        "python train.py --epochs '3 4'",
        "--env",
        "SEED=7",
        "--priority",
        "0",
        "--name",
        "train",
        "-o",
        "json",
        env=env,
    )
    assert submitted.returncode == 0, submitted.stderr
    body = json.loads(submitted.stdout)
    job_id = body["id"]
    assert body["tenant"] == TENANT_A  # the token's own tenant
    assert body["job"]["command"] == ["python", "train.py", "--epochs", "3 4"]
    assert body["job"]["env"] == {"SEED": "7"}
    assert body["job"]["gpu"]["compute_percent"] == 20

    listed = job("list", "--state", "queued", env=control_plane.env("a-viewer"))
    assert listed.returncode == 0, listed.stderr
    assert job_id in listed.stdout
    assert "train" in listed.stdout
    assert "10 GiB, 20 % compute" in listed.stdout

    shown = job("show", job_id, env=control_plane.env("a-viewer"))
    assert shown.returncode == 0, shown.stderr
    assert "why it waits" in shown.stdout
    assert "admitted by the queues" in shown.stdout
    assert "events" in shown.stdout

    stdout, _ = log_paths(control_plane.api.host.logs, TENANT_A, f"job-{job_id}-0")
    stdout.write_text("epoch 1\nepoch 2\n")
    control_plane.api.report_from_host(job_id)
    logs = job("logs", job_id, "--tail", "1", env=env)
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout == "stdout: epoch 2\n"

    cancelled = job("cancel", job_id, env=env)
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"{job_id}: cancelled" in cancelled.stdout
    again = job("cancel", job_id, env=env)
    assert again.returncode == EXIT_FAILED
    assert "nothing to cancel" in again.stderr


def test_submit_a_job_file_for_another_tenant_as_platform_admin(
    control_plane: Running, tmp_path: Path
) -> None:
    path = tmp_path / "train.yaml"
    path.write_text("name: nightly\ngpu: {memory_gib: 5}\ncommand: [sleep, '60']\npriority: 4\n")
    env = control_plane.env("admin")
    refused = job("submit", str(path), env=env)
    assert refused.returncode == EXIT_BAD_INPUT
    assert "give --tenant" in refused.stderr
    done = job("submit", str(path), "--tenant", TENANT_B, env=env)
    assert done.returncode == 0, done.stderr
    assert f"({TENANT_B})" in done.stdout
    listed = json.loads(job("list", TENANT_B, "-o", "json", env=env).stdout)
    assert [(j["name"], j["priority"]) for j in listed] == [("nightly", 4)]


def test_a_job_file_mistake_names_the_file_line_and_field(
    control_plane: Running, tmp_path: Path
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\ngpu:\n  count: 1\n  memory_gib: 5\ncomand: [sleep]\n")
    done = job("submit", str(path), env=control_plane.env("a-admin"))
    assert done.returncode == EXIT_BAD_INPUT
    assert f"{path}:5:1: comand: unknown key 'comand'" in done.stderr
    assert f"{path}:2:" in done.stderr  # gpu: two request forms
    assert json.loads(job("list", "-o", "json", env=control_plane.env("a-admin")).stdout) == []


def test_what_the_applied_spec_refuses_exits_2_with_the_files_line_and_the_field(
    control_plane: Running, tmp_path: Path
) -> None:
    path = tmp_path / "whole.yaml"
    path.write_text("gpu: {count: 1}\ncommand: [sleep, '1']\n")
    done = job("submit", str(path), env=control_plane.env("a-admin"))
    assert done.returncode == EXIT_BAD_INPUT
    assert f"{path}:1:7: gpu.count: whole GPUs need isolation dedicated or auto" in done.stderr


def test_flags_that_do_not_make_a_job_and_a_viewer_submitting(control_plane: Running) -> None:
    no_command = job("submit", "--gpu-memory-gib", "1", env=control_plane.env("a-admin"))
    assert no_command.returncode == EXIT_BAD_INPUT
    assert "give command" in no_command.stderr
    two_forms = job(
        "submit", "--gpu-count", "1", "--mig-profile", "1g.10gb", "--command", "x",
        env=control_plane.env("a-admin"),
    )  # fmt: skip
    assert two_forms.returncode == EXIT_BAD_INPUT
    assert "--gpu-count/--gpu-memory-gib/--mig-profile" in two_forms.stderr
    viewer = job(
        "submit", "--gpu-memory-gib", "1", "--command", "x", env=control_plane.env("a-viewer")
    )
    assert viewer.returncode == EXIT_FAILED
    assert "may not job write" in viewer.stderr
