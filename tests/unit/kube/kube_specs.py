"""A hypothesis strategy for specs laid out the way Kubernetes needs (docs/kubernetes.md): every node
runs one sharing method for its full GPUs, MPS never beside MIG, each tenant's workloads in the pool
of the nodes that run its method. The generic strategy (tests/unit/core/plan/specs.py) mostly draws
single-server layouts that the device plugin cannot run, which exercise the refusals instead."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from gpuplex.core.catalog import gpu_model
from gpuplex.core.spec import GpuplexSpec

#: Node role -> GPU models it may hold. A role is also the pool name of its nodes.
ROLE_MODELS = {
    "mig": ["H100-80GB", "A100-40GB", "A30"],
    "whole": ["H100-80GB", "A100-40GB", "L4", "L40S"],
    "mps": ["L4", "L40S", "H100-80GB"],
    "ts": ["L4", "A30", "H100-80GB"],
}
#: `serve` nodes hold MIG GPUs beside whole ones: the device plugin runs both (mixed strategy).
ROLES = [*ROLE_MODELS, "serve"]
ROLE_ISOLATIONS = {
    "mig": ["mig"],
    "whole": ["dedicated"],
    "mps": ["mps"],
    "ts": ["timeslice"],
    "serve": ["mig", "dedicated"],
}


@st.composite
def _groups(draw: st.DrawFn, role: str) -> list[dict[str, Any]]:
    def group(models: list[str], mig: str) -> dict[str, Any]:
        model = draw(st.sampled_from(models))
        capable = gpu_model(model).mig is not None  # type: ignore[union-attr]
        return {"model": model, "count": draw(st.integers(1, 3)), "mig": mig if capable else "auto"}

    if role == "serve":
        return [group(ROLE_MODELS["mig"], "on"), group(ROLE_MODELS["whole"], "off")]
    return [group(ROLE_MODELS[role], "on" if role == "mig" else "off")]


def _mig_profiles(nodes: list[dict[str, Any]]) -> list[str]:
    names: set[str] = set()
    for node in nodes:
        for g in node["gpus"]:
            model = gpu_model(g["model"])
            if g["mig"] == "on" and model is not None and model.mig is not None:
                names.update(p.name for p in model.mig.profiles)
    return sorted(names)


@st.composite
def _request(draw: st.DrawFn, isolation: str, profiles: list[str]) -> dict[str, Any]:
    if isolation == "mig":
        by_profile = draw(st.booleans())
        if profiles and by_profile:
            return {"mig_profile": draw(st.sampled_from(profiles))}
        return {"memory_gib": draw(st.integers(1, 40))}
    if isolation == "dedicated":
        return {"count": draw(st.integers(1, 2))}
    request = {"memory_gib": draw(st.integers(1, 20))}
    if isolation == "mps":
        request["compute_percent"] = draw(st.integers(5, 50))
    return request


@st.composite
def kube_specs(draw: st.DrawFn) -> GpuplexSpec:
    """Pooled fleets (a pool per role) most of the time; otherwise a pool-less fleet of one role,
    whose workloads name no pool."""
    pooled = draw(st.integers(0, 3)) > 0
    single_role = draw(st.sampled_from(ROLES))
    nodes = []
    for n in range(draw(st.integers(1, 3))):
        role = draw(st.sampled_from(ROLES)) if pooled else single_role
        nodes.append(
            {"name": f"node-{n}", "pool": role if pooled else None, "gpus": draw(_groups(role))}
        )
    roles = sorted({node["pool"] or single_role for node in nodes})
    tenants = []
    for t in range(draw(st.integers(1, 3))):
        role = draw(st.sampled_from(roles))
        isolation = draw(st.sampled_from(ROLE_ISOLATIONS[role]))
        profiles = _mig_profiles([n for n in nodes if (n["pool"] or single_role) == role])
        workloads = []
        for w in range(draw(st.integers(1, 2))):
            workload: dict[str, Any] = {
                "name": f"w{w}",
                "gpu": draw(_request(isolation, profiles)),
                "replicas": draw(st.integers(0, 4)),
            }
            if pooled:
                workload["pool"] = role
            workloads.append(workload)
        tenants.append({"name": f"t{t}", "isolation": isolation, "workloads": workloads})
    return GpuplexSpec.model_validate({"fleet": {"nodes": nodes}, "tenants": tenants})


@st.composite
def crowded_specs(draw: st.DrawFn) -> GpuplexSpec:
    """One pool-less node that several tenants of different isolation share, as on a single
    server: mostly what the device plugin cannot run, so the refusals get exercised."""
    groups = [
        {
            "model": "H100-80GB",
            "count": draw(st.integers(1, 3)),
            "mig": draw(st.sampled_from(["auto", "on"])),
        },
        {"model": "L40S", "count": draw(st.integers(0, 2))},
    ]
    isolations = draw(
        st.lists(st.sampled_from(["mig", "dedicated", "mps", "timeslice"]), min_size=2, max_size=3)
    )
    tenants = [
        {
            "name": f"t{t}",
            "isolation": isolation,
            "workloads": [
                {
                    "name": "w",
                    "gpu": draw(_request(isolation, ["1g.10gb", "3g.40gb"])),
                    "replicas": draw(st.integers(1, 3)),
                }
            ],
        }
        for t, isolation in enumerate(isolations)
    ]
    node = {"name": "server", "gpus": [g for g in groups if g["count"]]}
    return GpuplexSpec.model_validate({"fleet": {"nodes": [node]}, "tenants": tenants})
