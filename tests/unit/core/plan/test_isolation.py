"""How `auto` chooses the isolation mode (docs/isolation.md)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplex.core.plan import Mode
from gpuplex.core.plan.isolation import choose_mode
from gpuplex.core.spec import TenantSpec, WorkloadSpec, validate_spec

CASES = [
    # tenant fields, gpu request, MIG available, expected mode, words in the reason
    ({}, {"count": 2}, True, Mode.DEDICATED, "whole GPU"),
    ({}, {"mig_profile": "1g.10gb"}, False, Mode.MIG, "MIG profile"),
    ({"isolation": "mps"}, {"memory_gib": 8}, True, Mode.MPS, "tenant isolation"),
    ({"isolation": "timeslice"}, {"memory_gib": 8}, True, Mode.TIMESLICE, "tenant isolation"),
    ({"requirement": "hard"}, {"memory_gib": 8}, True, Mode.MIG, "hardware isolation"),
    ({"requirement": "hard"}, {"memory_gib": 8}, False, Mode.DEDICATED, "no MIG-capable"),
    ({"regulated": True}, {"memory_gib": 8}, True, Mode.MIG, "regulated"),
    (
        {"requirement": "strong", "tier": "premium"},
        {"memory_gib": 8},
        True,
        Mode.DEDICATED,
        "premium",
    ),
    ({"requirement": "moderate"}, {"memory_gib": 8}, True, Mode.MPS, "MPS"),
    ({"requirement": "shared"}, {"memory_gib": 8}, True, Mode.TIMESLICE, "time-slicing"),
    ({"tier": "premium"}, {"memory_gib": 8}, True, Mode.DEDICATED, "premium tier"),
    ({"tier": "standard"}, {"memory_gib": 8}, True, Mode.MIG, "standard tier"),
    ({"tier": "free"}, {"memory_gib": 8}, True, Mode.MPS, "free tier"),
]


@pytest.mark.parametrize(
    ("tenant_fields", "request_fields", "mig_available", "expected", "reason_words"),
    CASES,
    ids=[f"{c[0]}-{c[1]}-mig{c[2]}" for c in CASES],
)
def test_auto_choice(
    tenant_fields: dict[str, Any],
    request_fields: dict[str, Any],
    mig_available: bool,
    expected: Mode,
    reason_words: str,
) -> None:
    tenant = TenantSpec.model_validate({"name": "t", **tenant_fields})
    workload = WorkloadSpec.model_validate({"name": "w", "gpu": request_fields})
    choice = choose_mode(tenant, workload, mig_available=mig_available)
    assert choice.mode is expected
    assert reason_words in choice.reason


def test_hard_requirement_rejects_shared_isolation() -> None:
    problems = validate_spec(
        {
            "fleet": {"nodes": [{"name": "n", "gpus": [{"model": "L4"}]}]},
            "tenants": [{"name": "t", "requirement": "hard", "isolation": "mps"}],
        }
    )
    assert isinstance(problems, list)
    assert [(p.path, "needs hardware isolation" in p.message) for p in problems] == [
        (("tenants", 0, "isolation"), True)
    ]
