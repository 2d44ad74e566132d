"""The end-to-end jobs benchmark runs at a tiny size through `gpuplex up` on simulated GPUs, prints
its tables with numbers, and leaves nothing behind; a stack that cannot start is reported with
its log. No timing assertions: timings are the benchmark's output (docs/benchmarks.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bench import jobs
from bench.jobs_e2e_report import HOST_ALONE, UP
from bench.jobs_e2e_stack import (
    SCRATCH_PARENT,
    SCRATCH_PREFIX,
    Scratch,
    StackError,
    working_tree,
)

from tests.e2e.gateway.stack import cannot_run_gateway

pytestmark = [pytest.mark.slow, pytest.mark.stacks]

TINY = ["--end-to-end-only", "--e2e-jobs", "3", "--e2e-lone", "1", "--skip-floor"]
#: a figure as the bench prints it: two decimals, or none from 100 up (`number` in
#: bench/jobs_e2e_report.py; a ratio of 112 prints "112")
NUMBER = r"[0-9][0-9,]*(?:\.[0-9]+)?"
#: a table cell holding only a figure (labels such as "p50 s" hold digits too)
CELL = rf"│\s+({NUMBER})\s+(?=│)"


def scratch_folders() -> set[Path]:
    return set(SCRATCH_PARENT.glob(f"{SCRATCH_PREFIX}*"))


def leftovers() -> list[str]:
    """Live processes of a benchmark's scratch folder (its stacks, and their tenants and jobs,
    whose command line or environment names it): none may outlive the run."""
    marker = str(SCRATCH_PARENT / SCRATCH_PREFIX).encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            seen = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and marker in seen:
            found.append(proc.name)
    return found


@pytest.fixture
def can_run_up() -> None:
    why_not = cannot_run_gateway()
    if why_not:
        pytest.skip(why_not)


@pytest.mark.usefixtures("can_run_up")
def test_a_tiny_run_prints_each_figure_against_its_baseline_and_stops_everything(
    capsys: pytest.CaptureFixture[str],
) -> None:
    folders, before = scratch_folders(), set(leftovers())
    assert jobs.main(TINY) == 0
    out = capsys.readouterr().out
    assert "(iii) end to end · machine: " in out
    for figure in (
        "lone job: to running p50 s",
        "flood: jobs/s running",
        "flood: to running p95 s",
    ):
        row = next(line for line in out.splitlines() if figure in line)
        assert re.search(rf"│\s+{NUMBER}\s+│\s+—\s+│", row), row  # up's number; the bound has none
    bound = next(line for line in out.splitlines() if line.startswith("│ flood: jobs/s process"))
    assert len(re.findall(CELL, bound)) == 2  # up's and the lower bound's
    summary = out[out.index("jobs: summary") :]
    for figure in ("lone job: to running p50 s", "flood: jobs/s running"):
        row = next(line for line in summary.splitlines() if f"{UP} · after: {figure}" in line)
        assert HOST_ALONE in row
        assert len(re.findall(CELL, row)) == 3, row  # measured, baseline value, ratio
    assert scratch_folders() == folders
    assert set(leftovers()) <= before


def test_a_stack_that_cannot_start_says_why_with_its_log() -> None:
    with Scratch() as scratch:
        folder = scratch.root
        stack = scratch.up("gpuplex up", working_tree())
        with pytest.raises(StackError) as failed:
            stack.start({"version": 1, "fleet": "none", "tenants": []})
        assert folder.is_dir()
    message = str(failed.value)
    assert "gpuplex up · after: a process exited with status" in message
    assert "fleet" in message  # the end of up's log: the spec's problem
    assert not folder.exists()
