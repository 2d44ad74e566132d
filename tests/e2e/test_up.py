"""`gpuplex up` end to end on simulated GPUs: the control plane, the gateway (as an unprivileged
user when run as root) and the host runtime start, a tenant's request goes through the gateway to
its simulated model server, the control plane has the spec, keys and GPU samples, and everything
stops afterwards, tenants included."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from sqlalchemy import create_engine, text

from tests.e2e.cli_runs import ROOT, run_subprocess
from tests.e2e.gateway.stack import cannot_run_gateway
from tests.e2e.processes import running_processes_naming
from tests.ports import free_port

pytestmark = [pytest.mark.slow, pytest.mark.stacks]


def test_up_serves_a_request_through_the_gateway_and_stops_cleanly(tmp_path: Path) -> None:
    why_not = cannot_run_gateway()
    if why_not:
        pytest.skip(why_not)
    spec = yaml.safe_load((ROOT / "examples" / "saas-single-server.yaml").read_text())
    spec.setdefault("gateway", {})["port"] = free_port()
    spec_path = tmp_path / "gpuplex.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    # as root the gateway runs as nobody, who must be able to enter the state directory
    shared = Path(tempfile.mkdtemp(prefix="gpuplex-up-", dir="/tmp"))
    shared.chmod(0o711)
    state_dir = shared / "up"
    port = free_port()

    try:
        result = run_subprocess(
            "up", spec_path, "--state-dir", state_dir, "--driver", "sim", "--port", str(port),
            "--check", timeout_s=180,
        )  # fmt: skip
        _check_run(result.exit_code, result.stdout, result.output, state_dir, port)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _check_run(exit_code: int, stdout: str, output: str, state_dir: Path, port: int) -> None:

    assert exit_code == 0, output
    assert "check: northwind's northwind-chat answered through the gateway" in stdout
    assert f"http://127.0.0.1:{port}/dashboard/#token=gpt_" in stdout
    assert "from openai import OpenAI" in stdout
    assert "/metrics with `Authorization: Bearer gpm_" in stdout  # the metrics token to scrape with
    gateway_log = (state_dir / "logs" / "gateway.log").read_text()
    assert "/metrics answers nobody" not in gateway_log  # the gateway got the token
    assert "gpm_" not in gateway_log
    for tenant in ("northwind", "contoso", "adatum", "hobbyists"):
        assert f"  {tenant}: gpx_" in stdout
    assert running_processes_naming(state_dir) == []
    assert (state_dir / "store").stat().st_mode & 0o777 == 0o700  # the owner's only
    started = {
        json.loads(line)["target"]
        for line in (state_dir / "host" / "events.jsonl").read_text().splitlines()
        if json.loads(line)["kind"] == "started"
    }
    assert started >= {  # every mode ran: whole GPUs, MIG slices (in MIG mode), MPS shares
        "northwind/chat-70b#0",
        "contoso/support-bot#1",
        "fabrikam/claims-extractor#0",
        "hobbyists/playground#3",
    }
    engine = create_engine(f"sqlite:///{state_dir / 'store' / 'gpuplex.db'}")
    try:
        with engine.connect() as connection:
            revisions = connection.execute(text("select count(*) from spec_revisions")).scalar()
            usage = connection.execute(text("select tenant, model from usage_records")).all()
    finally:
        engine.dispose()
    assert revisions == 1
    assert [tuple(row) for row in usage] == [("northwind", "northwind-chat")]
