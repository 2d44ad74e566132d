"""The gateway's routing table, from the spec: which model names each tenant may call, and where
each goes.

- A tenant's served workload (`serve.model`) is routed to that workload's replicas; replica r listens
  on `serve.port + r`, as the host runtime starts it. The upstream request names the model the
  server loads (`serve.base_model`, else `serve.model`).
- A workload with `serve.lora_of: other-tenant/base` is a LoRA adapter on a shared base: its requests
  go to the base workload's replicas with `model` rewritten to the adapter's name on that server,
  `tenant/workload` (vLLM multi-LoRA: `--lora-modules tenant/workload=PATH`).

Model names are per tenant: two tenants may both call theirs `chat`. A tenant never sees another
tenant's names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.core.spec.tenants import TenantSpec
from gpuplex.core.spec.workloads import WorkloadSpec


@dataclass(frozen=True, slots=True)
class Backend:
    """One model server workload's replicas. `id` is `tenant/workload` of the server."""

    id: str
    urls: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Route:
    tenant: str
    model: str  # what the tenant sends
    backend_id: str
    upstream_model: str  # what the model server is asked for
    adapter: bool = False


@dataclass(frozen=True, slots=True)
class RouteTable:
    tenants: Mapping[str, TenantSpec]  # weight, priority and rate_limits by name
    backends: Mapping[str, Backend]
    routes: Mapping[tuple[str, str], Route]  # (tenant, model) -> route

    def route(self, tenant: str, model: str) -> Route | None:
        return self.routes.get((tenant, model))

    def models_of(self, tenant: str) -> list[str]:
        return sorted(model for (owner, model) in self.routes if owner == tenant)


def adapter_name(tenant: str, workload: str) -> str:
    return f"{tenant}/{workload}"


def replica_urls(workload: WorkloadSpec, host: str) -> tuple[str, ...]:
    if workload.serve is None:
        return ()
    return tuple(f"http://{host}:{workload.serve.port + r}" for r in range(workload.replicas))


def route_table(
    spec: GpuplexSpec,
    host: str = "127.0.0.1",
    backend_urls: Mapping[str, Sequence[str]] | None = None,
) -> RouteTable:
    """Routes for every served workload. `backend_urls` overrides where a server workload
    (`tenant/workload`) listens, e.g. when its replicas run on other machines."""
    overrides = backend_urls or {}
    backends: dict[str, Backend] = {}
    routes: dict[tuple[str, str], Route] = {}
    for tenant in spec.tenants:
        for workload in tenant.workloads:
            if workload.serve is None or workload.serve.lora_of:
                continue
            backend_id = f"{tenant.name}/{workload.name}"
            urls = tuple(overrides.get(backend_id, replica_urls(workload, host)))
            backends[backend_id] = Backend(backend_id, urls)
            upstream = workload.serve.base_model or workload.serve.model
            routes[(tenant.name, workload.serve.model)] = Route(
                tenant.name, workload.serve.model, backend_id, upstream
            )
    for tenant in spec.tenants:
        for workload in tenant.workloads:
            if workload.serve is not None and workload.serve.lora_of in backends:
                routes[(tenant.name, workload.serve.model)] = Route(
                    tenant.name,
                    workload.serve.model,
                    workload.serve.lora_of,
                    adapter_name(tenant.name, workload.name),
                    adapter=True,
                )
    return RouteTable(tenants={t.name: t for t in spec.tenants}, backends=backends, routes=routes)
