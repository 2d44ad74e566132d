"""Small builders for planner tests."""

from __future__ import annotations

from typing import Any

from gpuplex.core.spec import GpuplexSpec


def fleet(*groups: dict[str, Any], nodes: int = 1) -> dict[str, Any]:
    return {"nodes": [{"name": f"n{i}", "gpus": list(groups)} for i in range(nodes)]}


def tenant(name: str, *workloads: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"name": name, "workloads": list(workloads), **fields}


def workload(name: str, gpu: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    return {"name": name, **({"gpu": gpu} if gpu is not None else {}), **fields}


def spec(fleet_spec: dict[str, Any], *tenants: dict[str, Any], **top: Any) -> GpuplexSpec:
    return GpuplexSpec.model_validate({"fleet": fleet_spec, "tenants": list(tenants), **top})
