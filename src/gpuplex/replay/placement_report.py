"""Replay curves summed up over seeds: per policy and arrived percent, the mean, min and max of the
GPU allocation ratio. Pure: curves in, rows and text out (`gpuplex simulate` prints and writes them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

#: The arrived-demand points (% of cluster GPU capacity) the summary table shows.
TABLE_POINTS: tuple[int, ...] = (25, 50, 75, 90, 100, 110, 120, 130)

CSV_HEADER = ("policy", "arrived_percent", "mean", "min", "max")


class Curve(Protocol):
    """One replay's allocation curve (a `gpuplex.replay.placement.ReplayResult` is one)."""

    @property
    def policy(self) -> str: ...

    @property
    def seed(self) -> int: ...

    @property
    def arrived_percent(self) -> list[int]: ...

    @property
    def allocation_percent(self) -> list[float]: ...


@dataclass(frozen=True, slots=True)
class ReportRow:
    """The allocation ratio (%) of one policy once `arrived_percent` % of capacity has arrived,
    over the `seeds` replays that reached that point."""

    policy: str
    arrived_percent: int
    mean: float
    min: float
    max: float
    seeds: int


def aggregate(curves: Iterable[Curve]) -> list[ReportRow]:
    """Mean, min and max over seeds for each (policy, arrived percent); policies in the order they
    first appear, points in increasing order. A point only some seeds reached is summed over those."""
    values: dict[str, dict[int, list[float]]] = {}
    for curve in curves:
        points = values.setdefault(curve.policy, {})
        for arrived, allocated in zip(curve.arrived_percent, curve.allocation_percent, strict=True):
            points.setdefault(arrived, []).append(allocated)
    return [
        ReportRow(
            policy=policy,
            arrived_percent=arrived,
            mean=sum(found) / len(found),
            min=min(found),
            max=max(found),
            seeds=len(found),
        )
        for policy, points in values.items()
        for arrived, found in sorted(points.items())
    ]


def policies(rows: Sequence[ReportRow]) -> list[str]:
    """The policies in `rows`, in order of first appearance."""
    return list(dict.fromkeys(row.policy for row in rows))


def means_at(rows: Sequence[ReportRow], policy: str, points: Sequence[int]) -> list[float | None]:
    """The mean allocation ratio of `policy` at each of `points`; None where no replay got there."""
    found = {row.arrived_percent: row.mean for row in rows if row.policy == policy}
    return [found.get(point) for point in points]


def curve_of(rows: Sequence[ReportRow], policy: str) -> tuple[list[int], list[float]]:
    """(arrived percents, mean allocation ratios) of `policy`, for a plot."""
    mine = [row for row in rows if row.policy == policy]
    return [row.arrived_percent for row in mine], [row.mean for row in mine]


def csv_text(rows: Iterable[ReportRow]) -> str:
    """The rows as CSV: policy, arrived_percent, mean, min, max (ratios in %, 4 decimals)."""
    lines = [",".join(CSV_HEADER)]
    lines.extend(
        f"{_csv_field(row.policy)},{row.arrived_percent},{row.mean:.4f},{row.min:.4f},{row.max:.4f}"
        for row in rows
    )
    return "\n".join(lines) + "\n"


def _csv_field(text: str) -> str:
    if any(char in text for char in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text
