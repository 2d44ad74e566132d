"""Replay curves summed up over seeds: hand-checked means, minima and maxima, and the CSV text."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gpuplex.replay.placement_report import (
    CSV_HEADER,
    ReportRow,
    aggregate,
    csv_text,
    curve_of,
    means_at,
    policies,
)


@dataclass(frozen=True)
class FakeCurve:
    policy: str
    seed: int
    allocation_percent: list[float]
    arrived_percent: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.arrived_percent:
            object.__setattr__(self, "arrived_percent", list(range(len(self.allocation_percent))))


CURVES = [
    FakeCurve("best-fit", 42, [0.0, 10.0, 20.0]),
    FakeCurve("best-fit", 43, [0.0, 20.0, 30.0]),
    FakeCurve("random", 42, [0.0, 5.0, 15.0]),
    FakeCurve("best-fit", 44, [0.0, 30.0, 40.0]),
]


def test_mean_min_and_max_over_seeds_per_policy_and_point() -> None:
    rows = aggregate(CURVES)
    assert rows == [
        ReportRow("best-fit", 0, 0.0, 0.0, 0.0, 3),
        ReportRow("best-fit", 1, 20.0, 10.0, 30.0, 3),
        ReportRow("best-fit", 2, 30.0, 20.0, 40.0, 3),
        ReportRow("random", 0, 0.0, 0.0, 0.0, 1),
        ReportRow("random", 1, 5.0, 5.0, 5.0, 1),
        ReportRow("random", 2, 15.0, 15.0, 15.0, 1),
    ]
    assert policies(rows) == ["best-fit", "random"]


def test_a_point_only_some_seeds_reached_is_summed_over_those() -> None:
    rows = aggregate(
        [FakeCurve("p", 1, [0.0, 50.0]), FakeCurve("p", 2, [0.0, 70.0, 90.0], [0, 1, 2])]
    )
    assert rows[-1] == ReportRow("p", 2, 90.0, 90.0, 90.0, 1)
    assert means_at(rows, "p", [1, 2, 3]) == [60.0, 90.0, None]


def test_curves_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="shorter"):
        aggregate([FakeCurve("p", 1, [0.0, 1.0], [0, 1, 2])])


def test_curve_of_gives_the_means_in_point_order() -> None:
    assert curve_of(aggregate(CURVES), "best-fit") == ([0, 1, 2], [0.0, 20.0, 30.0])


def test_csv_text_has_the_header_and_one_line_per_row() -> None:
    text = csv_text(aggregate(CURVES[:2]))
    assert text.splitlines() == [
        ",".join(CSV_HEADER),
        "best-fit,0,0.0000,0.0000,0.0000",
        "best-fit,1,15.0000,10.0000,20.0000",
        "best-fit,2,25.0000,20.0000,30.0000",
    ]


def test_csv_text_quotes_a_policy_name_with_a_comma() -> None:
    text = csv_text([ReportRow('a,"b"', 0, 1.0, 1.0, 1.0, 1)])
    assert text.splitlines()[1] == '"a,""b""",0,1.0000,1.0000,1.0000'
