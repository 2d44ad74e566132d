"""gpuplex.yaml as typed values, and the rules that make a spec valid."""

from __future__ import annotations

from gpuplex.core.spec.document import GpuplexSpec, PlacementPolicy, PolicySpec, PricingSpec
from gpuplex.core.spec.fleet import (
    FleetSpec,
    GpuGroupSpec,
    MigModeSpec,
    NodeSpec,
    runs_mig,
    runs_whole,
)
from gpuplex.core.spec.parse import parse_spec
from gpuplex.core.spec.rate_limits import RateLimits
from gpuplex.core.spec.rules import check_spec
from gpuplex.core.spec.tenants import (
    Isolation,
    QuotaSpec,
    Requirement,
    TenantSpec,
    Tier,
)
from gpuplex.core.spec.workloads import (
    GpuRequestSpec,
    HealthCheckSpec,
    Pattern,
    ServeSpec,
    WorkloadKind,
    WorkloadSpec,
)
from gpuplex.errors import SpecProblem


def validate_spec(data: object) -> GpuplexSpec | list[SpecProblem]:
    """Shape first, then cross-field rules. Returns the spec, or every problem found."""
    parsed = parse_spec(data)
    if isinstance(parsed, list):
        return parsed
    problems = check_spec(parsed)
    return problems if problems else parsed


__all__ = [
    "FleetSpec",
    "GpuGroupSpec",
    "GpuRequestSpec",
    "GpuplexSpec",
    "HealthCheckSpec",
    "Isolation",
    "MigModeSpec",
    "NodeSpec",
    "Pattern",
    "PlacementPolicy",
    "PolicySpec",
    "PricingSpec",
    "QuotaSpec",
    "RateLimits",
    "Requirement",
    "ServeSpec",
    "TenantSpec",
    "Tier",
    "WorkloadKind",
    "WorkloadSpec",
    "check_spec",
    "parse_spec",
    "runs_mig",
    "runs_whole",
    "validate_spec",
]
