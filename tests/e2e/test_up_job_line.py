"""`make demo`'s example through `gpuplex up` on simulated GPUs, as a user follows its banner: the
CLI line and the `gpuplex job submit` line it prints, pasted verbatim into a new shell (no
GPUPLEX_* variables of its own), submit a job that the control plane accepts and the host runtime
runs; `gpuplex statement` works after the same export."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.abuse.host.uprun import UpRun, free_port, up_base
from tests.e2e.cli_runs import ROOT

__all__ = ["up_base"]

pytestmark = [pytest.mark.slow, pytest.mark.stacks]

EXPORT_LINE = re.compile(r"^  CLI {10}(?P<line>export .+?)  \(for gpuplex .*\)$")
JOB_LINE = re.compile(r"^  try a job {4}(?P<line>.+ job submit .+?)  \(after the export above\)$")


def _shell(script: str) -> subprocess.CompletedProcess[str]:
    """`script` in a new bash, as a user's shell: no GPUPLEX_* variables of the test's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPLEX_")}
    return subprocess.run(  # noqa: S603 - bash with the banner's own lines
        ["/bin/bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=Path.home() if Path.home().is_dir() else "/",
        env={**env, "COLUMNS": "200", "NO_COLOR": "1"},
    )


def _job(server: str, token: str, job_id: str) -> dict[str, Any]:
    request = urllib.request.Request(  # noqa: S310 - loopback
        f"{server}/api/v1/jobs/{job_id}", headers={"authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310
        body: dict[str, Any] = json.loads(reply.read())
        return body


def test_the_banners_job_line_works_as_printed(up_base: Path) -> None:
    spec = yaml.safe_load((ROOT / "examples" / "saas-single-server.yaml").read_text())
    spec.setdefault("gateway", {})["port"] = free_port()
    run = UpRun(up_base, spec)
    run.start()
    try:
        run.wait_for_banner()
        exports = [m["line"] for m in map(EXPORT_LINE.match, run.lines) if m]
        jobs = [m["line"] for m in map(JOB_LINE.match, run.lines) if m]
        assert len(exports) == 1, run.output()
        assert len(jobs) == 1, run.output()
        export, job_line = exports[0], jobs[0]
        assert "GPUPLEX_TOKEN=gpt_" in export
        assert f"GPUPLEX_SERVER_URL=http://127.0.0.1:{run.port}" in export

        submitted = _shell(f"{export}\n{job_line}")
        assert submitted.returncode == 0, submitted.stderr
        accepted = re.match(r"queued (j[0-9a-f]{8}) \(([a-z0-9-]+)\)", submitted.stdout)
        assert accepted is not None, submitted.stdout
        job_id, tenant = accepted.groups()
        assert f"--tenant {tenant}" in job_line

        env = dict(part.split("=", 1) for part in export.removeprefix("export ").split())
        server, token = env["GPUPLEX_SERVER_URL"], env["GPUPLEX_TOKEN"]
        deadline = time.monotonic() + 90
        job = _job(server, token, job_id)
        while job["state"] != "running" and time.monotonic() < deadline:
            assert job["state"] in ("queued", "starting"), job
            time.sleep(0.5)
            job = _job(server, token, job_id)
        assert job["state"] == "running", (job, run.output())
        assert job["placement"]["node"] == "h100-a"

        # the same export serves `gpuplex statement` and `gpuplex job list` too
        cli = job_line.split(" job submit ", 1)[0]
        listed = _shell(f"{export}\n{cli} job list {tenant} -o json")
        assert listed.returncode == 0, listed.stderr
        assert [j["id"] for j in json.loads(listed.stdout)] == [job_id]
        statement = _shell(f"{export}\n{cli} statement {tenant} -o json")
        assert statement.returncode == 0, statement.stderr
        assert json.loads(statement.stdout)["tenant"] == tenant
    finally:
        run.stop()
        run.kill()
