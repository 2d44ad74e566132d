"""docs/chargeback.md's worked example, computed by the program: the spec is read from the doc, and
the meter lines and both statements printed there must be exactly what the program gives."""

from __future__ import annotations

import csv
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from gpuplex.core.meter import (
    MeterWindow,
    PlanInterval,
    allocation_lines,
    fleet_gpu_seconds,
    gateway_lines,
)
from gpuplex.core.plan import make_plan
from gpuplex.core.report.prices import PriceBook
from gpuplex.core.report.render import fleet_statement_csv
from gpuplex.core.report.statement import build_fleet_statement
from gpuplex.core.serve.usage import UsageRecord
from gpuplex.core.spec.document import IdleRule
from gpuplex.specfile import load_spec_text

DOC = Path(__file__).resolve().parents[4] / "docs" / "chargeback.md"
START = datetime(2025, 3, 1, tzinfo=UTC)
PERIOD = MeterWindow(START, START + timedelta(hours=10))


def _usage(request_id: str, hour: int, prompt_tokens: int, completion_tokens: int) -> UsageRecord:
    return UsageRecord(
        request_id=request_id,
        tenant="initech",
        key_prefix="k",
        model="initech-chat",
        endpoint="chat.completions",
        status=200,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        latency_s=1.0,
        started_at=START + timedelta(hours=hour),
    )


#: The gateway records the doc describes: two requests, 1.5 M prompt and 0.5 M completion tokens.
RECORDS = [_usage("r1", 1, 1_000_000, 300_000), _usage("r2", 2, 500_000, 200_000)]


def compute(spec_yaml: str) -> tuple[str, str, str]:
    """(meter lines as CSV, the absorb statement as CSV, the spread statement as CSV)."""
    spec = load_spec_text(spec_yaml, source="docs/chargeback.md")
    intervals = [PlanInterval(make_plan(spec), START, None)]
    lines = [
        *allocation_lines(intervals, PERIOD),
        *fleet_gpu_seconds(intervals, PERIOD),
        *gateway_lines(RECORDS, PERIOD),
    ]
    meter_rows = ["tenant,source,metric,dimension,quantity"]
    meter_rows += [
        f"{line.tenant},{line.source},{line.metric},{line.dimension},{line.quantity}"
        for line in lines
    ]
    book = PriceBook.from_pricing(spec.pricing)
    absorb = build_fleet_statement(lines, replace(book, idle=IdleRule.ABSORB), PERIOD)
    spread = build_fleet_statement(lines, replace(book, idle=IdleRule.SPREAD), PERIOD)
    return "\n".join(meter_rows) + "\n", fleet_statement_csv(absorb), fleet_statement_csv(spread)


def block(name: str) -> str:
    """The fenced block right after `<!-- worked-example:NAME -->` in the doc."""
    found = re.search(
        rf"<!-- worked-example:{name} -->\s*```[a-z]*\n(.*?)```", DOC.read_text(), re.DOTALL
    )
    if found is None:
        pytest.fail(f"docs/chargeback.md has no block marked worked-example:{name}")
    return found.group(1)


def test_the_doc_shows_what_the_program_computes() -> None:
    meter, absorb, spread = compute(block("spec"))
    assert block("meter") == meter
    assert block("absorb") == absorb
    assert block("spread") == spread


def test_the_example_adds_up() -> None:
    """The doc's claims in words, checked on the doc's own numbers."""
    for name, idle in (("absorb", Decimal("41.79")), ("spread", Decimal("0.00"))):
        rows = list(csv.DictReader(block(name).splitlines()))
        totals = [Decimal(row["amount"]) for row in rows if row["description"] == "Total"]
        platform = {
            row["description"]: Decimal(row["amount"])
            for row in rows
            if row["tenant"] == "(platform)"
        }
        assert platform["Idle capacity"] == idle
        assert platform["Fleet cost"] == Decimal("117.00")
        assert sum(totals, Decimal(0)) + idle == Decimal("117.00") + platform["Token charges"]
