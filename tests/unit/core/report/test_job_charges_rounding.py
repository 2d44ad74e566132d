"""Jobs' amounts on a statement add up: per dimension, the jobs' cents and the rest of the line
(the tenant's replicas there) are the line's amount to the cent, a line that is all jobs is the sum
of its jobs, and each job is within a cent of its exact cost (largest remainder, as the statement's
lines are rounded). Rounding each job on its own, as before, made three jobs of 0.54 cents 3 cents
on a 2-cent line."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import given, settings, strategies as st

from gpuplex.core.meter import FLEET_TENANT, JobUsage, MeterLine, MeterWindow
from gpuplex.core.report.job_charges import job_charges, with_job_charges
from gpuplex.core.report.prices import PriceBook
from gpuplex.core.report.statement import FleetStatement, build_fleet_statement
from gpuplex.core.spec.document import PricingSpec

T0 = datetime(2025, 3, 1, tzinfo=UTC)
PERIOD = MeterWindow(T0, T0 + timedelta(days=30))
CENT = Decimal("0.01")
DIMENSIONS = ("H100-80GB/dedicated", "H100-80GB/mps", "H100-80GB/mig:3g.40gb")


def book(method: str = "allocation") -> PriceBook:
    return PriceBook.from_pricing(
        PricingSpec.model_validate(
            {
                "gpu_hour": {"H100-80GB": "3.90"},
                "share_multiplier": {"mps": "1.15"},
                "method": method,
            }
        )
    )


def billed(
    replicas: dict[tuple[str, str], Decimal], jobs: list[JobUsage], prices: PriceBook
) -> FleetStatement:
    """The statement of the replicas' whole-GPU seconds and the jobs' per (tenant, dimension),
    with the jobs listed."""
    seconds: dict[tuple[str, str, str], Decimal] = {}
    for (tenant, dimension), amount in replicas.items():
        for metric in ("gpu_seconds", "instance_seconds"):
            seconds[tenant, dimension, metric] = amount
    for job in jobs:
        for metric, amount in (
            ("gpu_seconds", job.gpu_seconds),
            ("instance_seconds", job.instance_seconds),
        ):
            key = (job.tenant, job.dimension, metric)
            seconds[key] = seconds.get(key, Decimal(0)) + amount
    lines = [
        MeterLine(tenant, "allocation", metric, dimension, amount)
        for (tenant, dimension, metric), amount in sorted(seconds.items())
    ]
    capacity = Decimal(8 * 86400 * 30)
    lines.append(MeterLine(FLEET_TENANT, "allocation", "fleet_gpu_seconds", "H100-80GB", capacity))
    fleet = build_fleet_statement(lines, prices, PERIOD)
    return with_job_charges(fleet, job_charges(jobs, {}, prices))


def test_three_small_jobs_add_up_to_their_line() -> None:
    """Each job is 5 s of a whole GPU at 3.90/h: 0.54 cents, 1 cent on its own; the line of
    15 s is 1.6 cents."""
    jobs = [JobUsage("acme", f"j{n}", DIMENSIONS[0], Decimal(5), Decimal(5)) for n in range(3)]
    [statement] = billed({}, jobs, book()).tenants
    [line] = statement.lines
    assert sum(job.amount for job in statement.jobs) == line.amount == statement.total
    assert line.amount == Decimal("0.02")
    assert sorted(job.amount for job in statement.jobs) == [0, CENT, CENT]


MICROS = st.integers(min_value=1, max_value=40 * 86400 * 10**6).map(lambda us: Decimal(us) / 10**6)


@st.composite
def usages(draw: st.DrawFn) -> tuple[dict[tuple[str, str], Decimal], list[JobUsage], str]:
    tenants = draw(
        st.lists(st.sampled_from(["acme", "globex", "initech"]), min_size=1, unique=True)
    )
    replicas: dict[tuple[str, str], Decimal] = {}
    jobs: list[JobUsage] = []
    for tenant in tenants:
        for dimension in draw(st.lists(st.sampled_from(DIMENSIONS), min_size=1, unique=True)):
            if draw(st.booleans()):
                replicas[tenant, dimension] = draw(MICROS)
            for n in range(draw(st.integers(min_value=1, max_value=6))):
                seconds = draw(MICROS)
                share = draw(st.sampled_from([Decimal(1), Decimal("0.43"), Decimal("0.2")]))
                jobs.append(
                    JobUsage(
                        tenant,
                        f"j{tenant[0]}{n}{dimension[-3:]}",
                        dimension,
                        seconds * share,
                        seconds,
                    )
                )
    return replicas, jobs, draw(st.sampled_from(["allocation", "hybrid", "usage"]))


@settings(max_examples=300, deadline=None)
@given(usages())
def test_jobs_and_the_rest_of_each_line_add_up_to_the_line(
    drawn: tuple[dict[tuple[str, str], Decimal], list[JobUsage], str],
) -> None:
    replicas, jobs, method = drawn
    prices = book(method)
    fleet = billed(replicas, jobs, prices)
    for statement in fleet.tenants:
        assert statement.total == sum((line.amount for line in statement.lines), Decimal(0))
        for job in statement.jobs:
            assert abs(job.amount - job.exact_amount) < CENT, job
        for line in statement.lines:
            mine = [job for job in statement.jobs if job.dimension == line.dimension]
            if not mine:
                continue
            jobs_cents = sum((job.amount for job in mine), Decimal(0))
            jobs_exact = sum((job.exact_amount for job in mine), Decimal(0))
            rest_cents = line.amount - jobs_cents
            rest_exact = line.exact_amount - jobs_exact
            assert abs(rest_cents - rest_exact) < CENT, (line, mine)
            if (statement.tenant, line.dimension) not in replicas:
                assert jobs_cents == line.amount, (line, mine)
        if method == "usage":
            assert all(job.amount == 0 for job in statement.jobs)
