"""A `lane` test, and every process it starts, runs at LANE_NICENESS where the OS allows raising a
priority (as root, as in CI): with more pytest workers than cores, what a lane test measures is its
own stack, not the other workers (tests/conftest.py). A test of another group runs at the niceness
the worker was given."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import LANE_NICENESS

pytestmark = pytest.mark.lane


def niceness_of_a_child() -> int:
    done = subprocess.run(  # this interpreter, a one-line program
        [sys.executable, "-c", "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return int(done.stdout)


def test_a_lane_test_and_its_processes_run_at_the_lane_niceness() -> None:
    if os.geteuid() != 0:
        pytest.skip("raising a priority needs root here; the lane tests run at the worker's own")
    assert os.getpriority(os.PRIO_PROCESS, 0) == LANE_NICENESS
    assert niceness_of_a_child() == LANE_NICENESS
