"""Each job's part of its tenant's statement: priced as a replica in the same dimension (per
GPU-hour of its share, per instance-hour of a MIG slice, weighted under hybrid, free under usage,
0 where unpriced), listed under its tenant only, and rendered in CSV and JSON after the total
without changing it."""

from __future__ import annotations

import csv
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from gpuplex.core.meter import FLEET_TENANT, JobUsage, MeterLine, MeterWindow
from gpuplex.core.report.job_charges import job_charge, job_charges, with_job_charges
from gpuplex.core.report.prices import PriceBook
from gpuplex.core.report.render import statement_csv, statement_json
from gpuplex.core.report.statement import build_fleet_statement
from gpuplex.core.spec.document import PricingSpec

T0 = datetime(2025, 3, 1, tzinfo=UTC)
PERIOD = MeterWindow(T0, T0 + timedelta(hours=10))
H2 = Decimal(7200)


def book(**pricing: object) -> PriceBook:
    return PriceBook.from_pricing(
        PricingSpec.model_validate({"gpu_hour": {"H100-80GB": "4.00"}, **pricing})
    )


@pytest.mark.parametrize(
    ("usage", "prices", "expected"),
    [
        pytest.param(
            JobUsage("acme", "j1", "H100-80GB/dedicated", H2, H2),
            book(),
            ("2.000000", "gpu_hour", "4.000000", "8.00"),
            id="whole-gpu",
        ),
        pytest.param(
            JobUsage("acme", "j1", "H100-80GB/mps", H2 / 4, H2),
            book(share_multiplier={"mps": "1.2"}),
            ("0.500000", "gpu_hour", "4.800000", "2.40"),
            id="mps-share-with-multiplier",
        ),
        pytest.param(
            JobUsage("acme", "j1", "H100-80GB/mig:3g.40gb", H2 * Decimal("0.43"), H2),
            book(mig_hour={"H100-80GB": {"3g.40gb": "1.75"}}),
            ("2.000000", "instance_hour", "1.750000", "3.50"),
            id="mig-slice-per-instance-hour",
        ),
        pytest.param(
            JobUsage("acme", "j1", "H100-80GB/dedicated", H2, H2),
            book(method="hybrid", hybrid_allocation_percent=25),
            ("2.000000", "gpu_hour", "1.000000", "2.00"),
            id="hybrid-weight",
        ),
        pytest.param(
            JobUsage("acme", "j1", "H100-80GB/dedicated", H2, H2),
            book(method="usage"),
            ("2.000000", "gpu_hour", "0.000000", "0.00"),
            id="usage-method-bills-busy-time-instead",
        ),
        pytest.param(
            JobUsage("acme", "j1", "A100-80GB/dedicated", H2, H2),
            book(),
            ("2.000000", "gpu_hour", "0.000000", "0.00"),
            id="unpriced-model",
        ),
    ],
)
def test_a_job_is_priced_as_a_replica_in_its_dimension(
    usage: JobUsage, prices: PriceBook, expected: tuple[str, str, str, str]
) -> None:
    charge = job_charge(usage, "train", prices)
    assert (charge.job_id, charge.name, charge.dimension) == ("j1", "train", usage.dimension)
    assert (charge.gpu_seconds, charge.instance_seconds) == (usage.gpu_seconds, H2)
    assert (
        f"{charge.quantity:f}",
        charge.unit,
        f"{charge.unit_price:f}",
        f"{charge.amount:f}",
    ) == expected


def test_each_tenant_gets_its_own_jobs_and_the_total_is_unchanged() -> None:
    lines = [
        MeterLine("acme", "allocation", "gpu_seconds", "H100-80GB/dedicated", 2 * H2),
        MeterLine("globex", "allocation", "gpu_seconds", "H100-80GB/dedicated", H2),
        MeterLine(FLEET_TENANT, "allocation", "fleet_gpu_seconds", "H100-80GB", 5 * H2),
    ]
    prices = book()
    fleet = build_fleet_statement(lines, prices, PERIOD)
    usages = [
        JobUsage("globex", "j3", "H100-80GB/dedicated", H2, H2),
        JobUsage("acme", "j2", "H100-80GB/dedicated", H2 / 2, H2 / 2),
        JobUsage("acme", "j1", "H100-80GB/dedicated", H2 / 2, H2 / 2),
    ]
    billed = with_job_charges(fleet, job_charges(usages, {"j1": "train", "j2": None}, prices))
    acme, globex = billed.tenants
    assert [(j.job_id, j.name, f"{j.amount:f}") for j in acme.jobs] == [
        ("j1", "train", "4.00"),
        ("j2", None, "4.00"),
    ]
    assert [j.job_id for j in globex.jobs] == ["j3"]
    assert (acme.total, globex.total) == (fleet.tenants[0].total, fleet.tenants[1].total)
    assert acme.lines == fleet.tenants[0].lines

    rows = list(csv.DictReader(statement_csv(acme).splitlines()))
    assert [row["description"] for row in rows] == [
        "GPU allocation",
        "Total",
        "Job j1 (train), in the lines above",
        "Job j2, in the lines above",
    ]
    assert rows[2]["amount"] == "4.00"
    body = statement_json(acme)
    assert body["total"] == "16.00"
    assert [(j["job_id"], j["gpu_seconds"], j["amount"]) for j in body["jobs"]] == [
        ("j1", "3600", "4.00"),
        ("j2", "3600", "4.00"),
    ]
    assert statement_json(fleet.tenants[0])["jobs"] == []
