"""Under `gpuplex up`, a spec applied through the control plane's API reaches everything that
runs, planned once: the host runtime starts the new tenant's replica where the revision placed it,
and the gateway enforces the new rate limit, with neither of them restarted."""

from __future__ import annotations

import copy
import json
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.abuse.host.uprun import UpRun, free_port, small_spec, up_base

__all__ = ["up_base"]

pytestmark = [pytest.mark.slow, pytest.mark.stacks]

TOKEN = re.compile(r"#token=(gpt_[A-Za-z0-9_-]+)")


def apply_spec(run: UpRun, token: str, spec: dict[str, Any], base_revision: int) -> int:
    body = json.dumps({"spec_yaml": yaml.safe_dump(spec), "base_revision": base_revision})
    request = urllib.request.Request(
        f"http://127.0.0.1:{run.port}/api/v1/spec/apply",
        data=body.encode(),
        headers={"authorization": f"Bearer {token}", "content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:  # noqa: S310
        assert reply.status == 201
        revision: int = json.loads(reply.read())["revision"]
        return revision


def host_events(run: UpRun) -> list[dict[str, Any]]:
    path = run.state_dir / "host" / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def eventually(check: Any, what: str, timeout_s: float = 30) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout_s} s")


def test_a_spec_applied_through_the_api_reaches_the_host_and_the_gateway(up_base: Path) -> None:
    first = small_spec(free_port(), free_port())
    first["fleet"]["nodes"][0]["gpus"][0]["count"] = 2
    run = UpRun(up_base, first)
    try:
        run.start()
        keys = run.wait_for_banner()
        assert run.chat(keys["solo"], "solo-chat")[0] == 200
        token = TOKEN.search(run.output())
        assert token is not None, run.output()

        second = copy.deepcopy(first)
        second["tenants"][0]["rate_limits"] = {"tokens_per_min": 1}
        second["tenants"].append(
            {
                "name": "duo",
                "isolation": "dedicated",
                "workloads": [{"name": "job", "gpu": {"count": 1}, "command": ["train"]}],
            }
        )
        revision = apply_spec(run, token[1], second, base_revision=1)
        assert revision == 2

        def refused() -> bool:
            status, body = run.chat(keys["solo"], "solo-chat")
            return status == 400 and body["error"]["code"] == "request_exceeds_limit"

        eventually(refused, "the gateway enforcing revision 2's tokens_per_min")
        started = eventually(
            lambda: [e for e in host_events(run) if e["target"] == "duo/job#0"],
            "the host runtime starting revision 2's new replica",
        )
        assert started[0]["kind"] == "started"
        taken = [e for e in host_events(run) if e["kind"] == "revision"]
        assert [e["target"] for e in taken] == ["revision 1", "revision 2"]
        desired = json.loads((run.state_dir / "host" / "desired.json").read_text())
        assert desired["revision"] == 2
        gateway_log = (run.state_dir / "logs" / "gateway.log").read_text()
        assert "serving revision 2" in gateway_log
        assert run.stop() == 0
    finally:
        run.kill()
