"""The tenant loop's side of the common start: it says when it is warm and measures only from the
start time the harness writes, however long that takes (a slow neighbour on a loaded host)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from gpuplex.isolation_bench.loop import WARMUP_STEPS, measure, ready_path


def test_a_warm_loop_says_so_and_measures_only_from_the_start_time_it_is_given(
    tmp_path: Path,
) -> None:
    out = tmp_path / "timeslice-b1.t1.json"
    go = tmp_path / "timeslice-b1.go"
    steps: list[tuple[float, bool]] = []  # when each step ran, and whether the go file was there

    def step() -> None:
        steps.append((time.time(), go.exists()))

    result: dict[str, object] = {}
    loop = threading.Thread(
        target=lambda: result.update(measure(step, ready_path(out), go, 30, 0.2)), daemon=True
    )
    loop.start()
    deadline = time.monotonic() + 30
    while not ready_path(out).exists():
        assert time.monotonic() < deadline, "the loop never said it was ready"
        time.sleep(0.001)
    assert len(steps) >= WARMUP_STEPS
    start_at = time.time() + 0.2
    partial = go.with_suffix(".partial")
    partial.write_text(f"{start_at:.3f}", encoding="ascii")
    partial.replace(go)
    loop.join(timeout=30)
    assert not loop.is_alive()

    measured = steps[WARMUP_STEPS:]
    assert measured, "nothing was measured"
    assert all(seen for _, seen in measured), "the loop measured before it was told to start"
    assert min(at for at, _ in measured) >= round(start_at, 3) - 0.001
    assert float(str(result["started_at"])) >= round(start_at, 3) - 0.001
    latencies = result["latencies_s"]
    assert isinstance(latencies, list)
    assert len(latencies) == len(measured)
    assert float(str(result["late_s"])) < 0.2


def test_a_warm_loop_whose_harness_is_gone_ends_instead_of_waiting_for_ever(tmp_path: Path) -> None:
    out = tmp_path / "timeslice-b1.t1.json"
    steps: list[float] = []
    with pytest.raises(SystemExit, match=r"no start time in .*timeslice-b1\.go after 0\.2 s"):
        measure(
            lambda: steps.append(time.time()), ready_path(out), tmp_path / "timeslice-b1.go", 0.2, 1
        )
    assert ready_path(out).exists()
    assert len(steps) == WARMUP_STEPS  # warmed up, measured nothing
