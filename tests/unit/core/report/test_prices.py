"""The price book from `pricing:`, and the spec rules that guard it."""

from __future__ import annotations

from decimal import Decimal

import pytest

from gpuplex.core.report.prices import PriceBook, mig_compute_fraction
from gpuplex.core.spec.document import ChargebackMethod, IdleRule, PricingSpec
from gpuplex.errors import SpecError
from gpuplex.specfile import load_spec_text

D = Decimal


def book(**pricing: object) -> PriceBook:
    return PriceBook.from_pricing(PricingSpec.model_validate(pricing))


@pytest.mark.parametrize(
    ("pricing", "dimension", "metric", "unit", "unit_price"),
    [
        ({"gpu_hour": {"H100-80GB": "3.50"}}, "H100-80GB/dedicated", "gpu_seconds", "gpu_hour", D("3.50")),
        ({"gpu_hour": {"H100-80GB": "3.50"}}, "H100-80GB/mig:3g.40gb", "instance_seconds", "instance_hour", D("1.50")),
        ({"gpu_hour": {"H100-80GB": "7"}}, "H100-80GB/mig:1g.10gb", "instance_seconds", "instance_hour", D(1)),
        ({"gpu_hour": {"H100-80GB": "7"}, "mig_hour": {"H100-80GB": {"1g.10gb": "1.25"}}},
         "H100-80GB/mig:1g.10gb", "instance_seconds", "instance_hour", D("1.25")),
        ({"gpu_hour": {"A30": "2"}}, "A30/mig:2g.12gb", "instance_seconds", "instance_hour", D(1)),
        ({"gpu_hour": {"H100-80GB": "4"}}, "H100-80GB/mps", "gpu_seconds", "gpu_hour", D(4)),
        ({"gpu_hour": {"H100-80GB": "4"}, "share_multiplier": {"mps": "1.25", "timeslice": "0.5"}},
         "H100-80GB/mps", "gpu_seconds", "gpu_hour", D(5)),
        ({"gpu_hour": {"H100-80GB": "4"}, "share_multiplier": {"timeslice": "0.5"}},
         "H100-80GB/timeslice", "gpu_seconds", "gpu_hour", D(2)),
    ],
)  # fmt: skip
def test_allocation_rates(
    pricing: dict[str, object], dimension: str, metric: str, unit: str, unit_price: Decimal
) -> None:
    rate = book(**pricing).allocation_rate(dimension)
    assert rate is not None
    assert (rate.metric, rate.unit) == (metric, unit)
    assert rate.unit_price.quantize(D("0.000001")) == unit_price


def test_unpriced_models_and_unknown_profiles_have_no_rate() -> None:
    prices = book(gpu_hour={"H100-80GB": "3"})
    assert prices.allocation_rate("A100-80GB/dedicated") is None
    assert prices.allocation_rate("H100-80GB/mig:9g.99gb") is None
    assert prices.busy_rate("") is None
    assert prices.token_rate("chat", "prompt_tokens") is None


def test_seven_one_g_slices_cost_one_gpu_by_default() -> None:
    prices = book(gpu_hour={"H100-80GB": "3.90"})
    rate = prices.allocation_rate("H100-80GB/mig:1g.10gb")
    assert rate is not None
    assert abs(7 * rate.unit_price - D("3.90")) < D("1e-20")
    assert mig_compute_fraction("H100-80GB", "3g.40gb") == D(3) / 7
    assert mig_compute_fraction("L40S", "1g.10gb") is None


@pytest.mark.parametrize(
    ("pricing", "weight"),
    [
        ({}, D(1)),
        ({"method": "usage"}, D(0)),
        ({"method": "hybrid"}, D("0.5")),
        ({"method": "hybrid", "hybrid_allocation_percent": 70}, D("0.7")),
    ],
)
def test_method_weights(pricing: dict[str, object], weight: Decimal) -> None:
    assert book(**pricing).allocation_weight == weight


def test_defaults_keep_old_specs_meaning() -> None:
    prices = book(currency="EUR", gpu_hour={"H100-80GB": "3.90"})
    assert (prices.currency, prices.method, prices.idle) == (
        "EUR",
        ChargebackMethod.ALLOCATION,
        IdleRule.ABSORB,
    )


SPEC = """
fleet:
  nodes:
    - name: n0
      gpus:
        - model: H100-80GB
tenants:
  - name: a
    workloads:
      - name: chat
        gpu: {memory_gib: 8}
        serve: {model: a-chat}
pricing:
"""


@pytest.mark.parametrize(
    ("pricing", "words"),
    [
        ("  mig_hour: {H100: {3g.40gb: 1}}", "pricing.mig_hour.H100: unknown GPU model 'H100'"),
        ("  mig_hour: {L40S: {1g.10gb: 1}}", "L40S has no MIG profiles"),
        ("  mig_hour: {H100-80GB: {3g.20gb: 1}}", 'no MIG profile \'3g.20gb\' (did you mean "3g.40gb"?)'),
        ("  mig_hour: {H100-80GB: {3g.40gb: -1}}", "greater than or equal to 0"),
        ("  tokens_per_million: {a-chta: {prompt: 1}}", 'no workload serves model \'a-chta\' (did you mean "a-chat"?)'),
        ("  tokens_per_million: {a-chat: {prompt: -1}}", "greater than or equal to 0"),
        ("  hybrid_allocation_percent: 60", "only method hybrid reads hybrid_allocation_percent"),
        ("  method: hybrid\n  hybrid_allocation_percent: 101", "less than or equal to 100"),
        ("  method: hybird", 'did you mean "hybrid"'),
        ("  idle: spred", 'did you mean "spread"'),
        ("  share_multiplier: {mps: -0.5}", "greater than or equal to 0"),
        ("  gpu_hour: {H100-80GB: -1}", "greater than or equal to 0"),
    ],
)  # fmt: skip
def test_bad_pricing_is_refused_with_the_field_and_the_fix(pricing: str, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec_text(SPEC + pricing + "\n", source="spec.yaml")
    assert words in caught.value.render()


def test_full_pricing_section_is_accepted() -> None:
    spec = load_spec_text(
        SPEC
        + "  currency: EUR\n  gpu_hour: {H100-80GB: '3.90'}\n"
        + "  mig_hour: {H100-80GB: {3g.40gb: '1.80'}}\n"
        + "  share_multiplier: {mps: '1.1'}\n"
        + "  tokens_per_million: {a-chat: {prompt: '0.5', completion: '1.5'}}\n"
        + "  method: hybrid\n  hybrid_allocation_percent: 40\n  idle: spread\n",
        source="spec.yaml",
    )
    prices = PriceBook.from_pricing(spec.pricing)
    assert prices.hybrid_allocation_percent == 40
    assert prices.token_rate("a-chat", "completion_tokens") is not None
    assert prices.idle is IdleRule.SPREAD
