"""Statements: methods, idle rules, and cents that add up whatever the inputs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import given, strategies as st

from gpuplex.core.meter import FLEET_TENANT, MeterLine, MeterWindow
from gpuplex.core.report.prices import PriceBook
from gpuplex.core.report.statement import IDLE_SHARE, FleetStatement, build_fleet_statement
from gpuplex.core.spec.document import PricingSpec

D = Decimal
T0 = datetime(2025, 3, 1, tzinfo=UTC)
PERIOD = MeterWindow(T0, T0 + timedelta(hours=10))
H10 = D(36_000)


def book(**pricing: object) -> PriceBook:
    return PriceBook.from_pricing(
        PricingSpec.model_validate({"gpu_hour": {"H100-80GB": "3.90"}, **pricing})
    )


def alloc(
    tenant: str, dimension: str, gpu_seconds: Decimal, instance_seconds: Decimal
) -> list[MeterLine]:
    return [
        MeterLine(tenant, "allocation", "gpu_seconds", dimension, gpu_seconds),
        MeterLine(tenant, "allocation", "instance_seconds", dimension, instance_seconds),
    ]


def busy(tenant: str, seconds: Decimal, model: str = "H100-80GB") -> MeterLine:
    return MeterLine(tenant, "measured", "busy_gpu_seconds", model, seconds)


def capacity(gpus: int, seconds: Decimal = H10) -> MeterLine:
    return MeterLine(FLEET_TENANT, "allocation", "fleet_gpu_seconds", "H100-80GB", gpus * seconds)


EXAMPLE = [
    *alloc("acme", "H100-80GB/dedicated", H10, H10),
    *alloc("globex", "H100-80GB/mig:3g.40gb", H10 * D("0.43"), H10),
    *alloc("initech", "H100-80GB/mps", 2 * H10 * D("0.25"), 2 * H10),
    busy("acme", H10 / 2),
    busy("initech", H10 / 10),
    capacity(3),
]


def totals(fleet: FleetStatement) -> dict[str, Decimal]:
    return {statement.tenant: statement.total for statement in fleet.tenants}


@pytest.mark.parametrize(
    ("pricing", "expected", "idle"),
    [
        ({}, {"acme": D("39.00"), "globex": D("16.71"), "initech": D("19.50")}, D("41.79")),
        ({"method": "usage"}, {"acme": D("19.50"), "globex": D("0.00"), "initech": D("3.90")}, D("93.60")),
        ({"method": "hybrid"}, {"acme": D("29.25"), "globex": D("8.36"), "initech": D("11.70")}, D("67.69")),
        ({"method": "hybrid", "hybrid_allocation_percent": 100},
         {"acme": D("39.00"), "globex": D("16.71"), "initech": D("19.50")}, D("41.79")),
        ({"idle": "spread"}, {"acme": D("60.67"), "globex": D("26.00"), "initech": D("30.33")}, D("0.00")),
        ({"method": "usage", "idle": "spread"},
         {"acme": D("97.50"), "globex": D("0.00"), "initech": D("19.50")}, D("0.00")),
        ({"mig_hour": {"H100-80GB": {"3g.40gb": "2.00"}}, "share_multiplier": {"mps": "2"}},
         {"acme": D("39.00"), "globex": D("20.00"), "initech": D("39.00")}, D("19.00")),
    ],
)  # fmt: skip
def test_methods_and_idle_rules(
    pricing: dict[str, object], expected: dict[str, Decimal], idle: Decimal
) -> None:
    fleet = build_fleet_statement(EXAMPLE, book(**pricing), PERIOD)
    assert totals(fleet) == expected
    assert fleet.idle == idle
    assert fleet.fleet_cost == D("117.00")


def test_spread_shows_each_tenant_its_idle_share() -> None:
    fleet = build_fleet_statement(EXAMPLE, book(idle="spread"), PERIOD)
    acme = fleet.statement_for("acme")
    assert acme is not None
    share = [line for line in acme.lines if line.description == IDLE_SHARE]
    assert len(share) == 1
    assert (share[0].quantity, share[0].unit, share[0].amount) == (
        D("0.518519"),
        "share",
        D("21.67"),
    )
    assert fleet.statement_for("nobody") is None


def test_hybrid_lines_say_their_weight() -> None:
    fleet = build_fleet_statement(
        EXAMPLE, book(method="hybrid", hybrid_allocation_percent=30), PERIOD
    )
    acme = fleet.statement_for("acme")
    assert acme is not None
    assert [(line.description, line.unit_price) for line in acme.lines] == [
        ("GPU allocation x 30%", D("1.170000")),
        ("GPU busy time x 70%", D("2.730000")),
    ]


def test_seven_one_g_slices_pay_for_the_whole_gpu() -> None:
    lines = [*alloc("a", "H100-80GB/mig:1g.10gb", 7 * H10 * D("0.14"), 7 * H10), capacity(1)]
    fleet = build_fleet_statement(lines, book(), PERIOD)
    assert (totals(fleet), fleet.idle) == ({"a": D("39.00")}, D("0.00"))


def test_spread_hands_back_no_surplus() -> None:
    lines = [*alloc("a", "H100-80GB/dedicated", H10, H10)]  # no capacity lines: all surplus
    fleet = build_fleet_statement(lines, book(idle="spread"), PERIOD)
    assert (totals(fleet), fleet.idle, fleet.fleet_cost) == ({"a": D("39.00")}, D("-39.00"), D(0))


def test_usage_without_samples_charges_nothing_and_spread_then_keeps_idle() -> None:
    lines = [*alloc("a", "H100-80GB/dedicated", H10, H10), capacity(2)]
    fleet = build_fleet_statement(lines, book(method="usage", idle="spread"), PERIOD, tenants=["b"])
    assert totals(fleet) == {"a": D("0.00"), "b": D("0.00")}
    assert all(not statement.lines for statement in fleet.tenants)
    assert fleet.idle == fleet.fleet_cost == D("78.00")


def test_empty_period_is_all_zero_and_unpriced_models_are_named() -> None:
    fleet = build_fleet_statement([], book(), PERIOD)
    assert (fleet.tenants, fleet.capacity, fleet.fleet_cost, fleet.idle) == ([], [], D(0), D(0))
    lines = [*alloc("a", "L4/dedicated", H10, H10), busy("a", H10, model="")]
    fleet = build_fleet_statement(lines, book(method="hybrid"), PERIOD)
    assert fleet.unpriced == ["allocation:L4/dedicated", "measured:"]
    assert totals(fleet) == {"a": D("0.00")}


def test_tokens_are_separate_lines_on_top_of_the_fleet_cost() -> None:
    lines = [
        *EXAMPLE,
        MeterLine("initech", "gateway", "prompt_tokens", "chat", D(1_500_000)),
        MeterLine("initech", "gateway", "completion_tokens", "chat", D(500_000)),
        MeterLine("initech", "gateway", "requests", "chat", D(2)),
        MeterLine("acme", "gateway", "prompt_tokens", "other", D(10)),
    ]
    prices = book(tokens_per_million={"chat": {"prompt": "0.50", "completion": "1.50"}})
    fleet = build_fleet_statement(lines, prices, PERIOD)
    initech = fleet.statement_for("initech")
    assert initech is not None
    assert [(line.description, line.amount) for line in initech.lines] == [
        ("GPU allocation", D("19.50")),
        ("Prompt tokens", D("0.75")),
        ("Completion tokens", D("0.75")),
    ]
    assert fleet.tokens_total == D("1.50")
    assert fleet.unpriced == ["gateway:other"]
    assert sum(totals(fleet).values()) + fleet.idle == fleet.fleet_cost + fleet.tokens_total


DIMENSIONS = ["H100-80GB/dedicated", "H100-80GB/mig:1g.10gb", "H100-80GB/mig:3g.40gb",
              "H100-80GB/mps", "H100-80GB/timeslice", "A100-80GB/dedicated"]  # fmt: skip
SECONDS = st.decimals(min_value=0, max_value=10**7, places=6, allow_nan=False)


@st.composite
def meter_lines(draw: st.DrawFn) -> list[MeterLine]:
    lines: list[MeterLine] = []
    for tenant in draw(st.lists(st.sampled_from(["a", "b", "c", "d"]), unique=True, max_size=4)):
        for dimension in draw(st.lists(st.sampled_from(DIMENSIONS), unique=True, max_size=3)):
            lines += alloc(tenant, dimension, draw(SECONDS), draw(SECONDS))
        if draw(st.booleans()):
            lines.append(
                busy(tenant, draw(SECONDS), draw(st.sampled_from(["H100-80GB", "A100-80GB", ""])))
            )
        if draw(st.booleans()):
            lines.append(
                MeterLine(
                    tenant, "gateway", "prompt_tokens", "chat", D(draw(st.integers(1, 10**9)))
                )
            )
    for model in draw(st.lists(st.sampled_from(["H100-80GB", "A100-80GB"]), unique=True)):
        lines.append(
            MeterLine(FLEET_TENANT, "allocation", "fleet_gpu_seconds", model, draw(SECONDS))
        )
    return lines


PRICE = st.decimals(min_value=0, max_value=100, places=4, allow_nan=False).map(str)


@st.composite
def price_books(draw: st.DrawFn) -> PriceBook:
    return PriceBook.from_pricing(
        PricingSpec.model_validate(
            {
                "gpu_hour": {"H100-80GB": draw(PRICE), "A100-80GB": draw(PRICE)},
                "mig_hour": draw(st.sampled_from([{}, {"H100-80GB": {"1g.10gb": "0.77"}}])),
                "share_multiplier": {"mps": draw(PRICE), "timeslice": draw(PRICE)},
                "tokens_per_million": draw(st.sampled_from([{}, {"chat": {"prompt": "0.3"}}])),
                "method": draw(st.sampled_from(["allocation", "usage", "hybrid"])),
                "idle": draw(st.sampled_from(["absorb", "spread"])),
            }
        )
    )


@given(meter_lines(), price_books())
def test_every_cent_is_accounted_for(lines: list[MeterLine], prices: PriceBook) -> None:
    fleet = build_fleet_statement(lines, prices, PERIOD)
    for statement in fleet.tenants:
        assert statement.total == sum((line.amount for line in statement.lines), D(0))
        assert all(line.amount == line.amount.quantize(D("0.01")) for line in statement.lines)
    tenants_total = sum((s.total for s in fleet.tenants), D(0))
    assert tenants_total + fleet.idle == fleet.fleet_cost + fleet.tokens_total
    assert fleet.fleet_cost == sum((line.amount for line in fleet.capacity), D(0))
    gpu_amounts = [
        line.amount for s in fleet.tenants for line in s.lines if line.unit != "million_tokens"
    ]
    if prices.idle.value == "spread" and any(amount > 0 for amount in gpu_amounts):
        assert fleet.idle <= 0  # all of a positive idle is spread; a surplus stays
    # deterministic: the same inputs in another order give the same statement
    assert build_fleet_statement(list(reversed(lines)), prices, PERIOD) == fleet
