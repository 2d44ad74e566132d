"""The CLI start-up benchmark's own arithmetic (the benchmark itself needs a quiet machine:
`make bench-cli`). No timing assertions."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from bench.cli_start import (
    TARGET_S,
    Row,
    Timed,
    best_cpu,
    best_wall,
    commands,
    median_wall,
    stand_in_api,
    table,
)
from rich.console import Console


def _row(before: list[tuple[float, float]], after: list[tuple[float, float]]) -> Row:
    return Row(
        ("validate", "/somewhere/examples/laptop.yaml"),
        [Timed(wall, cpu) for wall, cpu in before],
        [Timed(wall, cpu) for wall, cpu in after],
    )


def test_best_median_and_cpu_are_read_from_the_runs() -> None:
    runs = [Timed(0.9, 0.5), Timed(0.7, 0.6), Timed(0.8, 0.4)]
    assert (best_wall(runs), median_wall(runs), best_cpu(runs)) == (0.7, 0.8, 0.4)


def test_a_row_is_named_by_the_command_without_the_spec_folder() -> None:
    assert _row([], []).name == "gpuplex validate laptop.yaml"
    listed = commands(Path("/x/laptop.yaml"), "http://127.0.0.1:1")
    assert listed[:3] == [("--help",), ("validate", "/x/laptop.yaml"), ("plan", "/x/laptop.yaml")]
    assert Row(listed[3]).name == (
        "gpuplex job show j00000001 --output json --server URL --token x"
    )


def test_the_stand_in_api_answers_as_the_command_expects() -> None:
    with stand_in_api() as url, urllib.request.urlopen(f"{url}/api/v1/jobs/j1") as reply:  # noqa: S310
        assert json.loads(reply.read())["id"] == "j00000001"


def test_the_table_gives_after_over_before_and_the_target_verdict() -> None:
    fast = _row([(1.0, 0.9), (1.2, 1.0)], [(0.25, 0.2), (0.3, 0.22)])
    slow = _row([(1.0, 0.9)], [(TARGET_S + 0.01, 0.5)])
    console = Console(width=200, record=True)
    console.print(table([fast, slow], runs=2))
    lines = [line for line in console.export_text().splitlines() if "laptop.yaml" in line]
    cells = [[cell.strip() for cell in line.split("│")[1:-1]] for line in lines]
    assert cells[0][1:] == [
        "1.000",
        "1.100",
        "0.250",
        "0.275",
        "0.25",
        "yes",
        "0.900",
        "0.200",
        "0.22",
    ]
    assert cells[1][5:7] == ["0.36", "no"]
