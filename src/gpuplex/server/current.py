"""The applied spec and its plan, as of the newest revision in the store, parsed once per revision.

Several server processes may apply specs; each request asks the store for the newest revision
number (one indexed query) and re-reads the spec only when it changed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime

from gpuplex.core.plan import Plan
from gpuplex.core.spec import GpuplexSpec, TenantSpec
from gpuplex.specfile import load_spec_text
from gpuplex.store.spec_revisions import SpecRevisions


@dataclass(frozen=True, slots=True)
class AppliedSpec:
    revision: int
    created_at: datetime
    actor: str
    spec_sha256: str
    spec_yaml: str
    spec: GpuplexSpec
    plan: Plan

    def tenant(self, name: str) -> TenantSpec | None:
        return next((t for t in self.spec.tenants if t.name == name), None)

    @property
    def tenant_names(self) -> list[str]:
        return [t.name for t in self.spec.tenants]


class CurrentSpec:
    def __init__(self, revisions: SpecRevisions) -> None:
        self._revisions = revisions
        self._lock = threading.Lock()
        self._cached: AppliedSpec | None = None

    def get(self) -> AppliedSpec | None:
        """The newest applied spec, or None before the first apply."""
        newest = self._revisions.current()
        if newest is None:
            return None
        with self._lock:
            if self._cached is not None and self._cached.revision == newest.revision:
                return self._cached
            applied = AppliedSpec(
                revision=newest.revision,
                created_at=newest.created_at,
                actor=newest.actor,
                spec_sha256=newest.spec_sha256,
                spec_yaml=newest.spec_yaml,
                spec=load_spec_text(newest.spec_yaml, source=f"revision {newest.revision}"),
                plan=Plan.model_validate(newest.plan),
            )
            self._cached = applied
            return applied
