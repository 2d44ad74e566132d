"""The suite's pytest-xdist groups (tests/conftest.py) hold: every test of a group runs on one
worker. pytest 9.2 broke pytest-xdist's grouping silently (the tests were spread as if ungrouped);
this runs a small suite on two workers in a subprocess and reads where each test ran."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: This worker's niceness when it collected this module, before any test ran.
NICENESS_AT_IMPORT = os.getpriority(os.PRIO_PROCESS, 0)
#: `[gw0] [ 10%] PASSED tests/x.py::test_y[an id, spaces and all]@vllm`: the node id, whose
#: parameter id may hold spaces (the differential test's cases are named in words).
RAN = re.compile(
    r"^\[(gw\d+)\] .*?(SKIPPED|PASSED|FAILED|ERROR) ([^\s\[]+(?:\[[^\]]*\])?(?:@[\w-]+)?)",
    re.MULTILINE,
)


@pytest.mark.slow
def test_every_vllm_test_runs_on_one_worker_under_its_group_name(tmp_path: Path) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    # no vLLM there: its tests skip at once (and GPUPLEX_REQUIRE_VLLM would fail them)
    environment["GPUPLEX_VLLM_VENV"] = str(tmp_path / "no-vllm")
    environment.pop("GPUPLEX_REQUIRE_VLLM", None)
    command = [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v"]
    command += ["-p", "no:cacheprovider", "tests/vllm_real", "tests/unit/core/serve"]
    done = subprocess.run(  # noqa: S603 - pytest on this suite
        command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ran = RAN.findall(done.stdout)
    vllm = [(worker, nodeid) for worker, _, nodeid in ran if nodeid.startswith("tests/vllm_real/")]
    assert len(vllm) >= 5, done.stdout[-3000:]
    assert {worker for worker, _ in vllm} == {vllm[0][0]}, vllm
    assert all(nodeid.endswith("@vllm") for _, nodeid in vllm), vllm
    others = {worker for worker, _, nodeid in ran if nodeid.startswith("tests/unit/")}
    assert others == {"gw0", "gw1"}  # the ungrouped rest is shared


#: A test file of each kind, and the group its tests must run in ("-": shared between workers).
EXPECTED_GROUPS = {
    "tests/kube_real/test_kueue_real.py": "kube",  # marked by its folder's conftest
    "tests/abuse/host/test_up_lifecycle.py": "stacks",
    "tests/e2e/gateway/test_gateway_load.py": "lane",
    "tests/integration/gateway/test_limiter_redis.py": "lane",
    "tests/e2e/test_cli.py": "-",  # single CLI runs: shared
    "tests/e2e/test_badspecs.py": "-",
    "tests/vllm_real/test_sim_matches_vllm.py": "vllm",
}


def test_each_test_runs_in_the_group_its_markers_name() -> None:
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0"]
    command += ["-p", "no:cacheprovider", "-p", "tests.architecture.group_report", *EXPECTED_GROUPS]
    done = subprocess.run(  # noqa: S603 - pytest on this suite
        command, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen: dict[str, set[str]] = {}
    for line in done.stdout.splitlines():
        if line.startswith("GROUP "):
            nodeid, groups = line.split(" ")[1], line.rsplit(" ", 1)[1]
            seen.setdefault(nodeid.split("::")[0], set()).add(groups)
    assert set(seen) == set(EXPECTED_GROUPS), sorted(seen)
    wrong = {path: groups for path, groups in seen.items() if groups != {EXPECTED_GROUPS[path]}}
    assert not wrong, f"expected {EXPECTED_GROUPS}, got {wrong}"


def test_a_test_outside_the_lane_group_runs_at_the_niceness_it_was_given() -> None:
    assert os.getpriority(os.PRIO_PROCESS, 0) == NICENESS_AT_IMPORT
