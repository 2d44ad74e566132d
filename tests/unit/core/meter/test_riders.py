"""Shared model servers: every cent of a server that carries other tenants' LoRA adapters lands on
the tenants that sent it tokens, exactly and whatever the order of the inputs."""

from __future__ import annotations

import random
from datetime import timedelta
from decimal import Decimal, localcontext
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from gpuplex.core.meter import (
    FLEET_TENANT,
    MeterLine,
    MeterWindow,
    PlanInterval,
    SharedServer,
    allocation_lines,
    fleet_gpu_seconds,
    server_usage,
    shared_measured_lines,
    shared_servers,
    split_exactly,
    token_shares,
)
from gpuplex.core.meter.samples import GpuSample
from gpuplex.core.plan import Mode
from gpuplex.core.report.charges import compute_charges
from gpuplex.core.report.prices import PriceBook
from gpuplex.core.report.rounding import MONEY_CONTEXT
from gpuplex.core.report.statement import build_fleet_statement
from gpuplex.core.serve.usage import UsageRecord
from gpuplex.core.spec.document import PricingSpec
from gpuplex.errors import MeterInputError
from gpuplex.specfile import load_spec_file
from tests.unit.core.meter.plans import T0, placement, plan

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"
OWNER = "contoso"
SERVER = SharedServer(
    OWNER,
    "support-bot",
    "llama-3.1-8b-instruct",
    frozenset({(OWNER, "contoso-support"), ("adatum", "adatum-legal"), ("bravo", "bravo-lora")}),
)
MODEL_OF = {tenant: model for tenant, model in SERVER.routes}
TENANTS = sorted(MODEL_OF)

weights = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d", "e"]),
    st.integers(min_value=0, max_value=10**9).map(Decimal),
    max_size=5,
)
quantities = st.decimals(
    min_value=Decimal(0), max_value=Decimal(10**7), places=8, allow_nan=False, allow_infinity=False
)


@given(quantities, weights)
def test_a_split_adds_up_to_the_whole_exactly(
    quantity: Decimal, shares: dict[str, Decimal]
) -> None:
    parts = split_exactly(quantity, shares, "owner")
    assert sum(parts.values(), Decimal(0)) == quantity
    assert all(part > 0 for part in parts.values())
    if any(weight > 0 for weight in shares.values()):
        assert set(parts) <= {tenant for tenant, weight in shares.items() if weight > 0}
    elif quantity:
        assert parts == {"owner": quantity}


@given(quantities, weights, st.randoms(use_true_random=False))
def test_a_split_does_not_depend_on_order(
    quantity: Decimal, shares: dict[str, Decimal], rng: random.Random
) -> None:
    shuffled = list(shares.items())
    rng.shuffle(shuffled)
    assert split_exactly(quantity, dict(shuffled), "owner") == split_exactly(
        quantity, shares, "owner"
    )


@given(quantities, weights)
def test_each_part_is_within_a_quantum_of_its_proportion(
    quantity: Decimal, shares: dict[str, Decimal]
) -> None:
    total = sum(shares.values(), Decimal(0))
    parts = split_exactly(quantity, shares, "owner")
    for tenant, weight in shares.items():
        if total:
            exact = quantity * weight / total
            assert abs(parts.get(tenant, Decimal(0)) - exact) <= Decimal("1e-12")


def test_a_split_refuses_negative_weights() -> None:
    with pytest.raises(MeterInputError, match="negative"):
        split_exactly(Decimal(10), {"a": Decimal(-1)}, "owner")


def test_the_demo_spec_has_contoso_support_bot_shared_with_adatum() -> None:
    spec = load_spec_file(EXAMPLES / "saas-single-server.yaml")
    (server,) = shared_servers(spec)
    assert server.id == "contoso/support-bot"
    assert server.riders == ["adatum"]
    assert server.base_model == "llama-3.1-8b-instruct"
    assert server.routes == {("contoso", "contoso-support"), ("adatum", "adatum-legal")}


def _record(n: int, tenant: str, tokens: int, window: MeterWindow, model: str = "") -> UsageRecord:
    return UsageRecord(
        request_id=f"r{n}",
        tenant=tenant,
        key_prefix="gp_x",
        model=model or MODEL_OF[tenant],
        endpoint="chat.completions",
        status=200,
        prompt_tokens=tokens // 2,
        completion_tokens=tokens - tokens // 2,
        latency_s=0.1,
        started_at=window.start + timedelta(seconds=n % int(window.seconds)),
    )


def test_server_usage_counts_tokens_routed_to_the_server_inside_the_window() -> None:
    window = MeterWindow(T0, T0 + timedelta(hours=1))
    records = [
        _record(1, "adatum", 30, window),
        _record(2, "contoso", 10, window),
        _record(3, "contoso", 500, window, model="contoso-embed"),  # another server
        _record(4, "adatum", 0, window),  # no tokens: no weight
    ]
    late = _record(5, "adatum", 99, MeterWindow(window.end, window.end + timedelta(hours=1)))
    usage = server_usage([*records, late], window, [SERVER])
    assert usage == {SERVER.key: {"adatum": Decimal(30), "contoso": Decimal(10)}}
    assert server_usage(records[2:], window, [SERVER]) == {}


usages = st.lists(
    st.tuples(st.sampled_from(TENANTS), st.integers(min_value=0, max_value=50_000)), max_size=30
)
methods = st.sampled_from(["allocation", "usage", "hybrid"])


def _server_lines(
    records: list[UsageRecord], window: MeterWindow, mode: Mode
) -> tuple[list[MeterLine], list[MeterLine]]:
    """The window's lines of a fleet that is only the shared server's GPU, split and unsplit."""
    if mode is Mode.MIG:
        host = plan(
            placement(OWNER, mode, 43, profile="3g.40gb", workload="support-bot"), gpu_count=1
        )
    else:
        host = plan(placement(OWNER, mode, 100, workload="support-bot"), gpu_count=1)
    intervals = [PlanInterval(host, window.start, shared_servers=(SERVER,))]
    usage = server_usage(records, window, [SERVER])
    samples = [
        GpuSample(
            tenant=OWNER,
            workload="support-bot",
            replica=0,
            node="n0",
            gpu_index=0,
            at=window.start + timedelta(seconds=s),
            memory_used_mib=2048,
            utilization_percent=100.0,
            source="sim",
            gpu_model="H100-80GB",
        )
        for s in range(0, int(window.seconds), 30)
    ]
    capacity = fleet_gpu_seconds(intervals, window)
    split = [
        *allocation_lines(intervals, window, usage),
        *capacity,
        *shared_measured_lines(samples, window, usage),
    ]
    whole = [
        *allocation_lines(intervals, window),
        *capacity,
        *shared_measured_lines(samples, window, {}),
    ]
    return split, whole


@settings(max_examples=60, deadline=None)
@given(
    usages,
    methods,
    st.integers(min_value=60, max_value=7200),
    st.decimals(min_value=Decimal("0.01"), max_value=Decimal(50), places=2),
    st.randoms(use_true_random=False),
)
def test_every_cent_of_a_shared_server_lands_on_the_tenants_that_used_it(
    used: list[tuple[str, int]],
    method: str,
    seconds: int,
    gpu_hour: Decimal,
    rng: random.Random,
) -> None:
    window = MeterWindow(T0, T0 + timedelta(seconds=seconds))
    records = [_record(n, tenant, tokens, window) for n, (tenant, tokens) in enumerate(used)]
    lines, _ = _server_lines(records, window, Mode.DEDICATED)
    book = PriceBook.from_pricing(
        PricingSpec.model_validate({"gpu_hour": {"H100-80GB": str(gpu_hour)}, "method": method})
    )
    fleet = build_fleet_statement(lines, book, window, tenants=TENANTS)
    paid = {s.tenant: s.total for s in fleet.tenants}
    assert sum(paid.values(), Decimal(0)) == fleet.fleet_cost
    assert fleet.idle == 0
    tokens: dict[str, int] = {}
    for tenant, count in used:
        tokens[tenant] = tokens.get(tenant, 0) + count
    users = {tenant for tenant, count in tokens.items() if count > 0} or {OWNER}
    assert {tenant for tenant, total in paid.items() if total > 0} <= users
    # the same usage in another order bills the same cents
    rng.shuffle(records)
    reordered, _ = _server_lines(records, window, Mode.DEDICATED)
    assert build_fleet_statement(reordered, book, window, tenants=TENANTS) == fleet


@settings(max_examples=40, deadline=None)
@given(usages, methods)
def test_a_shared_mig_slice_costs_its_tenants_what_it_cost_its_owner(
    used: list[tuple[str, int]], method: str
) -> None:
    window = MeterWindow(T0, T0 + timedelta(minutes=5))
    records = [_record(n, tenant, tokens, window) for n, (tenant, tokens) in enumerate(used)]
    split, whole = _server_lines(records, window, Mode.MIG)
    book = PriceBook.from_pricing(
        PricingSpec.model_validate({"gpu_hour": {"H100-80GB": "3.90"}, "method": method})
    )
    with localcontext(MONEY_CONTEXT):  # as statements price: a 3/7 rate has no exact decimal
        shared = compute_charges(split, book)
        owned = compute_charges(whole, book)
        paid = sum((c.gpu_amount for c in shared.tenants.values()), Decimal(0))
        cost = sum((c.gpu_amount for c in owned.tenants.values()), Decimal(0))
    assert abs(paid - cost) < Decimal("1e-40")  # the last of 50 digits of a 3/7 price may differ


def test_a_window_nobody_used_is_the_owners() -> None:
    window = MeterWindow(T0, T0 + timedelta(minutes=5))
    split, whole = _server_lines([], window, Mode.DEDICATED)
    assert split == whole
    assert {line.tenant for line in split} == {OWNER, FLEET_TENANT}


def test_tokens_split_the_server_in_proportion() -> None:
    window = MeterWindow(T0, T0 + timedelta(minutes=5))
    records = [_record(1, "adatum", 300, window), _record(2, "contoso", 100, window)]
    split, _ = _server_lines(records, window, Mode.DEDICATED)
    gpu_seconds = {line.tenant: line.quantity for line in split if line.metric == "gpu_seconds"}
    assert gpu_seconds == {"adatum": Decimal(225), "contoso": Decimal(75)}
    busy = {line.tenant: line.quantity for line in split if line.metric == "busy_gpu_seconds"}
    assert busy == {"adatum": Decimal(225), "contoso": Decimal(75)}


@given(
    st.decimals(
        min_value=Decimal(0),
        max_value=Decimal(10**4),
        places=20,
        allow_nan=False,
        allow_infinity=False,
    ),
    weights,
)
def test_a_split_of_a_quantity_finer_than_the_quantum_still_adds_up(
    quantity: Decimal, shares: dict[str, Decimal]
) -> None:
    """Busy seconds carry a float's digits (utilization 33.333333333333336 %): finer than 10^-12."""
    assert sum(split_exactly(quantity, shares, "owner").values(), Decimal(0)) == quantity


def test_token_shares_are_each_tenants_part_of_the_servers_tokens() -> None:
    lines = [
        MeterLine("adatum", "gateway", "prompt_tokens", "adatum-legal", Decimal(100)),
        MeterLine("adatum", "gateway", "completion_tokens", "adatum-legal", Decimal(200)),
        MeterLine("contoso", "gateway", "prompt_tokens", "contoso-support", Decimal(900)),
        MeterLine("contoso", "gateway", "prompt_tokens", "contoso-embed", Decimal(5000)),
        MeterLine("adatum", "gateway", "requests", "adatum-legal", Decimal(7)),
    ]
    assert token_shares(SERVER, lines) == {"adatum": Decimal("0.25"), "contoso": Decimal("0.75")}
    assert token_shares(SERVER, lines[3:]) == {}
