"""CSV and JSON renderings carry the statement's numbers as exact decimal text."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from gpuplex.core.meter import FLEET_TENANT, MeterLine, MeterWindow
from gpuplex.core.report.prices import PriceBook
from gpuplex.core.report.render import (
    CSV_COLUMNS,
    PLATFORM,
    fleet_statement_csv,
    fleet_statement_json,
    statement_csv,
    statement_json,
)
from gpuplex.core.report.statement import build_fleet_statement
from gpuplex.core.spec.document import PricingSpec

T0 = datetime(2025, 3, 1, tzinfo=UTC)
PERIOD = MeterWindow(T0, T0 + timedelta(hours=1))
LINES = [
    MeterLine("a,b", "allocation", "gpu_seconds", "H100-80GB/dedicated", Decimal(3600)),
    MeterLine(FLEET_TENANT, "allocation", "fleet_gpu_seconds", "H100-80GB", Decimal(7200)),
]
FLEET = build_fleet_statement(
    LINES,
    PriceBook.from_pricing(PricingSpec.model_validate({"gpu_hour": {"H100-80GB": "2.50"}})),
    PERIOD,
)


def test_statement_csv_reads_back_with_a_total_row() -> None:
    statement = FLEET.tenants[0]
    rows = list(csv.DictReader(statement_csv(statement).splitlines()))
    assert [row["description"] for row in rows] == ["GPU allocation", "Total"]
    assert rows[0]["tenant"] == "a,b"  # quoted, not split
    assert (rows[0]["quantity"], rows[0]["unit_price"], rows[0]["amount"]) == (
        "1.000000",
        "2.500000",
        "2.50",
    )
    assert rows[1]["amount"] == "2.50"
    assert rows[0]["period_start"] == "2025-03-01T00:00:00+00:00"


def test_fleet_csv_ends_with_the_platform_rows() -> None:
    rows = list(csv.reader(fleet_statement_csv(FLEET).splitlines()))
    assert tuple(rows[0]) == CSV_COLUMNS
    platform = [(row[4], row[9]) for row in rows[1:] if row[0] == PLATFORM]
    assert platform == [("Idle capacity", "2.50"), ("GPU capacity", "5.00"), ("Fleet cost", "5.00")]


def test_json_is_plain_and_round_trips() -> None:
    data = fleet_statement_json(FLEET)
    assert json.loads(json.dumps(data)) == data
    assert (data["fleet_cost"], data["idle"], data["method"], data["idle_rule"]) == (
        "5.00",
        "2.50",
        "allocation",
        "absorb",
    )
    assert data["tenants"][0] == statement_json(FLEET.tenants[0])
    assert data["tenants"][0]["lines"][0]["amount"] == "2.50"
