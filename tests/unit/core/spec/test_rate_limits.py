"""RateLimits, the one type for rate limits: what it accepts, where it is used (a tenant in the
spec, a key's create request), and that its field names are the limiter's kinds."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gpuplex.core.serve.limits import LimitKind, scope_limits
from gpuplex.core.spec import GpuplexSpec, RateLimits, validate_spec
from gpuplex.core.spec.rate_limits import (
    MAX_CONCURRENT_REQUESTS,
    MAX_REQUESTS_PER_MIN,
    MAX_TOKENS_PER_MIN,
)

FLEET = {"nodes": [{"name": "n0", "gpus": [{"model": "H100-80GB", "count": 1}]}]}


def test_the_fields_are_the_limiters_kinds() -> None:
    assert list(RateLimits.model_fields) == [kind.value for kind in LimitKind]


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"requests_per_min": 1},
        {"tokens_per_min": MAX_TOKENS_PER_MIN, "concurrent_requests": MAX_CONCURRENT_REQUESTS},
        {"requests_per_min": MAX_REQUESTS_PER_MIN, "tokens_per_min": None},
    ],
)
def test_accepts_positive_whole_numbers_up_to_the_bounds(fields: dict[str, Any]) -> None:
    limits = RateLimits.model_validate(fields)
    assert limits.model_dump(exclude_none=True) == {
        name: value for name, value in fields.items() if value is not None
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("requests_per_min", 0),
        ("tokens_per_min", -5),
        ("concurrent_requests", MAX_CONCURRENT_REQUESTS + 1),
        ("requests_per_min", MAX_REQUESTS_PER_MIN + 1),
        ("tokens_per_min", MAX_TOKENS_PER_MIN + 1),
        ("requests_per_min", True),  # YAML's `yes` is not one request
        ("tokens_per_min", 1000.0),
        ("tokens_per_min", "1000"),
        ("tokens_per_minute", 1000),  # a misspelled limit is an error, not no limit
    ],
)
def test_refuses(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as raised:
        RateLimits.model_validate({field: value})
    assert raised.value.errors()[0]["loc"] == (field,)


def test_is_a_value() -> None:
    limits = RateLimits(tokens_per_min=1000)
    assert limits == RateLimits(tokens_per_min=1000, requests_per_min=None)
    assert hash(limits) == hash(RateLimits(tokens_per_min=1000))
    with pytest.raises(ValidationError):
        limits.tokens_per_min = 5  # type: ignore[misc]


def test_a_tenants_rate_limits_in_the_spec() -> None:
    tenant = {"name": "t", "rate_limits": {"tokens_per_min": 1000, "concurrent_requests": 2}}
    spec = validate_spec({"fleet": FLEET, "tenants": [tenant]})
    assert isinstance(spec, GpuplexSpec)
    assert spec.tenants[0].rate_limits == RateLimits(tokens_per_min=1000, concurrent_requests=2)
    limits = scope_limits("tenant:t", spec.tenants[0].rate_limits)
    assert [(limit.kind, limit.amount) for limit in limits] == [
        (LimitKind.TOKENS, 1000),
        (LimitKind.CONCURRENT, 2),
    ]


def test_a_tenants_rate_limits_out_of_bounds_is_a_spec_problem() -> None:
    tenant = {"name": "t", "rate_limits": {"requests_per_min": 0}}
    problems = validate_spec({"fleet": FLEET, "tenants": [tenant]})
    assert isinstance(problems, list)
    assert [p.path for p in problems] == [("tenants", 0, "rate_limits", "requests_per_min")]
