"""The applied revision `(revision id, spec, plan)`: the one artifact every part of gpuplex reads.

A spec is planned once, when it is applied (`POST /api/v1/spec/apply`, `gpuplex server --spec`,
`gpuplex up`; `gpuplex host apply` for a host without a control plane), and stored with its plan
as a revision.
From then on nobody plans it again: the control plane bills from the revision's plan, the host
runtime runs its placements (`host run --follow-store`), the gateway routes and limits by its spec,
and `kube render --store` turns it into objects. They all read it through `AppliedRevisions.get()`.

Several processes may apply specs; each read asks the store for the newest revision (one indexed
query) and parses the spec and plan again only when it changed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime

from gpuplex.core.plan import Plan
from gpuplex.core.spec import GpuplexSpec, TenantSpec
from gpuplex.specfile import load_spec_text
from gpuplex.store.spec_revisions import SpecRevision, SpecRevisions


@dataclass(frozen=True, slots=True)
class AppliedRevision:
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


def parsed(stored: SpecRevision) -> AppliedRevision:
    """A stored revision with its spec and plan parsed (the plan as stored: never planned again)."""
    return AppliedRevision(
        revision=stored.revision,
        created_at=stored.created_at,
        actor=stored.actor,
        spec_sha256=stored.spec_sha256,
        spec_yaml=stored.spec_yaml,
        spec=load_spec_text(stored.spec_yaml, source=f"revision {stored.revision}"),
        plan=Plan.model_validate(stored.plan),
    )


class AppliedRevisions:
    """The newest applied revision in the store, parsed once per revision; safe across threads."""

    def __init__(self, revisions: SpecRevisions) -> None:
        self._revisions = revisions
        self._lock = threading.Lock()
        self._cached: AppliedRevision | None = None

    def get(self) -> AppliedRevision | None:
        """The newest applied revision, or None before the first apply."""
        number = self._revisions.newest_number()
        if number is None:
            return None
        with self._lock:
            if self._cached is not None and self._cached.revision == number:
                return self._cached
        stored = self._revisions.get(number)
        if stored is None:  # only appends happen; a row cannot go: read the newest again
            stored = self._revisions.current()
            if stored is None:
                return None
        applied = parsed(stored)
        with self._lock:
            if self._cached is None or self._cached.revision < applied.revision:
                self._cached = applied
            return self._cached
