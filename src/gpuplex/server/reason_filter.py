"""What a tenant-scoped caller may read of a reason the queue rules give: the words that name
another tenant's job, another tenant or a queue outside the caller's own path in the tree are
replaced by `another tenant's job`, `another tenant` and `another queue`. A platform admin reads
every reason as it is.

Words are runs of letters, digits, `_` and `-` (job ids, tenant and queue names are DNS labels),
so `acme` is hidden in `acme's limit` but not inside `acme-research`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpuplex.core.access import Principal
from gpuplex.core.queues.tree import QueueTree
from gpuplex.store.jobs import Job

OTHER_TENANTS_JOB = "another tenant's job"
OTHER_TENANT = "another tenant"
OTHER_QUEUE = "another queue"
_WORD = re.compile(r"[\w-]+")


@dataclass(frozen=True, slots=True)
class ReasonFilter:
    """Rewrites reasons for one caller; `hidden` maps each word to hide to what replaces it (empty:
    reasons are shown as they are)."""

    hidden: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def for_caller(
        cls,
        principal: Principal,
        jobs: Iterable[Job],
        tenant_names: Iterable[str],
        tree: QueueTree | None,
    ) -> ReasonFilter:
        """The filter for `principal`: none for a platform admin; else hiding the other tenants'
        `jobs`, the other `tenant_names` and the queues of `tree` off the caller's path."""
        own = principal.tenant
        if principal.is_platform or own is None:
            return cls()
        hidden: dict[str, str] = {}
        if tree is not None:
            mine = {q.name for q in tree.paths.get(own, (tree.root,))}
            hidden |= {name: OTHER_QUEUE for name in tree.paths if name not in mine}
        hidden |= {name: OTHER_TENANT for name in tenant_names if name != own}
        hidden |= {job.id: OTHER_TENANTS_JOB for job in jobs if job.tenant != own}
        return cls(hidden)

    def __call__(self, reason: str) -> str:
        if not self.hidden:
            return reason
        return _WORD.sub(lambda word: self.hidden.get(word[0], word[0]), reason)
