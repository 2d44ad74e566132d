"""Cross-field rules of `pricing:`: every priced GPU model, MIG profile and served model exists, and
settings that only one chargeback method reads are not given with another."""

from __future__ import annotations

from collections.abc import Iterator

from gpuplex.core.spec.document import ChargebackMethod, GpuplexSpec
from gpuplex.core.spec.parse import did_you_mean
from gpuplex.errors import SpecProblem


def check_pricing(spec: GpuplexSpec) -> Iterator[SpecProblem]:
    pricing = spec.pricing
    catalog = spec.fleet.catalog
    for name in pricing.gpu_hour:
        if catalog.model(name) is None:
            yield SpecProblem(
                ("pricing", "gpu_hour", name),
                f"unknown GPU model {name!r}{did_you_mean(name, catalog.names())}",
            )
    yield from _check_mig_hour(spec)
    served = {w.serve.model for t in spec.tenants for w in t.workloads if w.serve is not None}
    for name in pricing.tokens_per_million:
        if name not in served:
            known = ", ".join(sorted(served)) or "none: no workload has serve.model"
            yield SpecProblem(
                ("pricing", "tokens_per_million", name),
                f"no workload serves model {name!r}{did_you_mean(name, served)}; "
                f"served models: {known}",
            )
    if (
        pricing.hybrid_allocation_percent is not None
        and pricing.method is not ChargebackMethod.HYBRID
    ):
        yield SpecProblem(
            ("pricing", "hybrid_allocation_percent"),
            f"only method hybrid reads hybrid_allocation_percent, but method is {pricing.method}: "
            "set method: hybrid or remove it",
        )


def _check_mig_hour(spec: GpuplexSpec) -> Iterator[SpecProblem]:
    catalog = spec.fleet.catalog
    for name, profiles in spec.pricing.mig_hour.items():
        model = catalog.model(name)
        if model is None:
            yield SpecProblem(
                ("pricing", "mig_hour", name),
                f"unknown GPU model {name!r}{did_you_mean(name, catalog.names())}",
            )
            continue
        if model.mig is None:
            yield SpecProblem(("pricing", "mig_hour", name), f"{name} has no MIG profiles to price")
            continue
        known = [p.name for p in model.mig.profiles]
        for profile in profiles:
            if model.mig.profile(profile) is None:
                yield SpecProblem(
                    ("pricing", "mig_hour", name, profile),
                    f"{name} has no MIG profile {profile!r}{did_you_mean(profile, known)}; "
                    f"profiles there: {', '.join(known)}",
                )
