"""`gpuplex bench isolation` end to end on a simulated GPU with the CPU loop: every scenario goes
through the host runtime (MPS clients get the thread percentages the scenario names), the results
and tables come out, and nothing is left running afterwards, MPS daemons included."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cli_runs import run_subprocess
from tests.e2e.processes import running_processes_naming

pytestmark = [pytest.mark.slow, pytest.mark.stacks]


@pytest.fixture
def reachable() -> Iterator[Path]:
    """A folder the tenants' users can pass through to theirs (pytest's tmp_path is under a 700
    one)."""
    base = Path(tempfile.mkdtemp(prefix="gpuplex-bench-test-"))
    base.chmod(0o711)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_the_harness_runs_every_scenario_through_the_host_runtime(reachable: Path) -> None:
    _run_and_check(reachable / "bench")


def test_without_a_gpu_it_says_to_use_the_simulated_driver_and_makes_nothing(
    tmp_path: Path,
) -> None:
    result = run_subprocess("bench", "isolation", "--out", tmp_path / "bench", timeout_s=60)
    if result.exit_code == 0:
        pytest.skip("this machine has an NVIDIA GPU")
    assert "--driver sim" in result.stderr
    assert "Traceback" not in result.output
    assert not (tmp_path / "bench").exists()


def _run_and_check(out: Path) -> None:
    result = run_subprocess(
        "bench", "isolation", "--driver", "sim", "--batch", "1", "--seconds", "0.5",
        "--width", "32", "--layers", "2", "--out", out,
        timeout_s=240,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    for title in ("Per tenant", "Aggregate against exclusive", "Interference"):
        assert title in result.stdout

    records = {r["scenario"]: r for r in json.loads((out / "results.json").read_text())}
    assert list(records) == [
        "exclusive-b1", "timeslice-b1", "mps-equal-b1", "mps-30-70-b1",
        "steady+heavy-timeslice", "steady+heavy-mps",
    ]  # fmt: skip
    threads = {
        name: [t["thread_percent"] for t in record["tenants"]] for name, record in records.items()
    }
    # what each loop found in its environment, set by the host runtime for MPS clients only
    assert threads["mps-30-70-b1"] == [30, 70]
    assert threads["mps-equal-b1"] == [50, 50]
    assert threads["timeslice-b1"] == [None, None]
    assert threads["exclusive-b1"] == [None]
    assert records["exclusive-b1"]["vs_exclusive"] == pytest.approx(1.0)
    for record in records.values():
        assert record["overlap_s"] > 0  # the tenants measured at the same time
        assert all(t["steps"] > 0 and t["p99_ms"] >= t["p50_ms"] for t in record["tenants"])
    assert "| steady+heavy-mps |" in (out / "results.md").read_text()
    assert running_processes_naming(out) == []  # replicas and the MPS daemon stopped


@pytest.mark.parametrize(
    ("option", "value"), [("--copies", "1"), ("--batch", "0"), ("--seconds", "0.1")]
)
def test_a_bad_option_is_refused_before_anything_runs(
    tmp_path: Path, option: str, value: str
) -> None:
    result = run_subprocess("bench", "isolation", option, value, "--out", tmp_path / "bench")
    assert result.exit_code == 2
    assert option in result.output
    assert not (tmp_path / "bench").exists()


def test_a_loop_that_cannot_start_ends_the_run_with_its_output(reachable: Path) -> None:
    pytest.importorskip("numpy")
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("torch is installed here: the torch loop would start")
    out = reachable / "bench"
    result = run_subprocess(
        "bench", "isolation", "--driver", "sim", "--backend", "torch", "--batch", "1",
        "--seconds", "0.5", "--out", out, timeout_s=120,
    )  # fmt: skip
    assert result.exit_code != 0
    assert "exclusive-b1: t1's loop ended without a ready file" in result.output
    assert "the torch loop needs PyTorch" in result.output  # the loop's own words, from its log
    assert "Traceback (most recent call last)" not in result.stdout
    assert running_processes_naming(out) == []
