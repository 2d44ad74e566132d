"""Hypothesis strategies for random fleets, tenants and workloads."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from gpuplex.core.catalog import gpu_model
from gpuplex.core.spec import GpuplexSpec

MODELS = ["H100-80GB", "A100-40GB", "A30", "L4"]
POOLS = [None, None, "long-running", "bursty"]


@st.composite
def gpu_groups(draw: st.DrawFn) -> dict[str, Any]:
    model = draw(st.sampled_from(MODELS))
    capable = gpu_model(model) is not None and gpu_model(model).mig is not None  # type: ignore[union-attr]
    mig = draw(st.sampled_from(["auto", "on", "off"] if capable else ["auto", "off"]))
    return {
        "model": model,
        "count": draw(st.integers(1, 3)),
        "mig": mig,
        "pool": draw(st.sampled_from(POOLS)),
    }


def _profiles(models: list[str]) -> list[str]:
    names: set[str] = set()
    for name in models:
        model = gpu_model(name)
        if model is not None and model.mig is not None:
            names.update(p.name for p in model.mig.profiles)
    return sorted(names)


@st.composite
def gpu_requests(draw: st.DrawFn, profiles: list[str], models: list[str]) -> dict[str, Any]:
    forms = ["count", "memory", "memory_compute"] + (["mig"] * 3 if profiles else [])
    form = draw(st.sampled_from(forms))
    request: dict[str, Any]
    if form == "count":
        request = {"count": draw(st.integers(1, 2))}
    elif form == "mig":
        request = {"mig_profile": draw(st.sampled_from(profiles))}
    else:
        request = {"memory_gib": draw(st.integers(1, 40))}
        if form == "memory_compute":
            request["compute_percent"] = draw(st.integers(5, 60))
    if draw(st.integers(0, 4)) == 0:
        request["model"] = draw(st.sampled_from(models))
    return request


@st.composite
def specs(draw: st.DrawFn, max_nodes: int = 3) -> GpuplexSpec:
    nodes: list[dict[str, Any]] = [
        {"name": f"node-{n}", "gpus": draw(st.lists(gpu_groups(), min_size=1, max_size=2))}
        for n in range(draw(st.integers(1, max_nodes)))
    ]
    models = [g["model"] for node in nodes for g in node["gpus"]]
    profiles = _profiles(models)
    names = [f"t{i}" for i in range(draw(st.integers(1, 4)))]
    tenants = []
    for name in names:
        others = [n for n in names if n != name]
        isolation = draw(st.sampled_from(["auto", "auto", "mig", "mps", "timeslice", "dedicated"]))
        requirement = (
            draw(st.sampled_from([None, "hard", "strong", "moderate", "shared"]))
            if isolation == "auto"
            else draw(st.sampled_from([None, "moderate", "shared"]))
        )
        quota = draw(
            st.fixed_dictionaries(
                {},
                optional={
                    "gpus": st.integers(0, 3),
                    "gpu_memory_gib": st.integers(0, 120),
                    "compute_percent": st.integers(0, 200),
                    "mig": st.dictionaries(
                        st.sampled_from(profiles or ["1g.10gb"]), st.integers(0, 3), max_size=2
                    ),
                },
            )
        )
        workloads: list[dict[str, Any]] = [
            {
                "name": f"w{w}",
                "gpu": draw(gpu_requests(profiles if isolation in ("auto", "mig") else [], models)),
                "replicas": draw(st.integers(0, 3)),
                "pattern": draw(st.sampled_from(["long-running", "bursty"])),
            }
            for w in range(draw(st.integers(1, 3)))
        ]
        for workload in workloads:
            if isolation in ("mig", "mps", "timeslice") and "count" in workload["gpu"]:
                workload["gpu"] = {"memory_gib": 4}
        tenants.append(
            {
                "name": name,
                "isolation": isolation,
                "requirement": requirement,
                "tier": draw(st.sampled_from(["premium", "standard", "free"])),
                "priority": draw(st.integers(0, 3)),
                "quota": quota,
                "exclusive_gpus": draw(st.booleans()),
                "never_share_with": draw(
                    st.lists(st.sampled_from(others), max_size=1) if others else st.just([])
                ),
                "workloads": workloads,
            }
        )
    policy = {
        "placement": draw(st.sampled_from(["binpack", "spread"])),
        "preemption": draw(st.booleans()),
    }
    return GpuplexSpec.model_validate(
        {"fleet": {"nodes": nodes}, "tenants": tenants, "policy": policy}
    )
