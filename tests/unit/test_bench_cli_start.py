"""The CLI start-up benchmark's own arithmetic (the benchmark itself needs a quiet machine:
`make bench-cli`). No timing assertions."""

from __future__ import annotations

from pathlib import Path

from bench.cli_start import TARGET_S, Row, Timed, best_cpu, best_wall, commands, median_wall, table
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
    assert commands(Path("/x/laptop.yaml")) == [
        ("--help",),
        ("validate", "/x/laptop.yaml"),
        ("plan", "/x/laptop.yaml"),
    ]


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
