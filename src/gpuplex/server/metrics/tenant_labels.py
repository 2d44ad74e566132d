"""Bounded label values for the control plane's metrics.

`tenant` is a tenant of the applied spec, at most `cap` of them in the spec's order; every other
tenant (beyond the cap, or removed from the spec but still in old roll-ups or samples) is counted
under `_other`, which no tenant can be named (tenant names are DNS labels). `model` is a model the
tenant serves in the spec, else `_other`: clients name models freely, so their text is never a label.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuplex.core.spec import GpuplexSpec

OTHER = "_other"
#: Tenants with their own series; the rest share `_other`.
TENANT_LABEL_CAP = 1000


@dataclass(frozen=True, slots=True)
class TenantLabels:
    own: frozenset[str]
    beyond_cap: int  # tenants of the spec folded into `_other`
    models: dict[str, frozenset[str]]  # tenant -> the model names it serves

    @classmethod
    def of(cls, spec: GpuplexSpec | None, cap: int = TENANT_LABEL_CAP) -> TenantLabels:
        tenants = spec.tenants if spec is not None else []
        kept: Sequence[str] = [t.name for t in tenants][:cap]
        models = {
            t.name: frozenset(w.serve.model for w in t.workloads if w.serve is not None)
            for t in tenants[:cap]
        }
        return cls(frozenset(kept), max(0, len(tenants) - cap), models)

    def tenant(self, name: str) -> str:
        return name if name in self.own else OTHER

    def model(self, tenant: str, model: str) -> str:
        return model if model in self.models.get(tenant, frozenset()) else OTHER
