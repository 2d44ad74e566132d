"""Preview and apply a spec: parse it (errors name line and field), plan it against the applied
plan, and store it as the next revision on top of the one the caller saw. In the same transaction,
every credential a person made is judged again under the new revision's `auth.oidc.roles`
(store/credential_grants.py): a removed or changed rule suspends what it no longer allows the
moment the revision is visible."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from gpuplex.clock import Clock
from gpuplex.core.plan import Plan, make_plan
from gpuplex.core.spec import GpuplexSpec
from gpuplex.errors import StaleRevisionError
from gpuplex.revision import AppliedRevisions
from gpuplex.server.credential_grants import rules_of_spec
from gpuplex.specfile import load_spec_text
from gpuplex.store.credential_grants import review_on_apply
from gpuplex.store.spec_revisions import SpecRevision, SpecRevisions


@dataclass(frozen=True, slots=True)
class SpecHistory:
    """What a spec is planned against and stored in: the revisions, the one applied now, and
    the clock a new revision is stamped on."""

    revisions: SpecRevisions
    current: AppliedRevisions
    clock: Clock


@dataclass(frozen=True, slots=True)
class Preview:
    base_revision: int  # 0 before the first apply
    spec_sha256: str
    plan: Plan
    spec: GpuplexSpec


def spec_sha256(spec_yaml: str) -> str:
    return hashlib.sha256(spec_yaml.encode()).hexdigest()


def preview(current: AppliedRevisions, spec_yaml: str, source: str = "spec_yaml") -> Preview:
    """The plan `spec_yaml` would get now. Raises SpecError for an invalid spec."""
    spec = load_spec_text(spec_yaml, source=source)
    applied = current.get()
    plan = make_plan(spec, applied.plan if applied is not None else None)
    base = applied.revision if applied is not None else 0
    return Preview(base_revision=base, spec_sha256=spec_sha256(spec_yaml), plan=plan, spec=spec)


def apply(
    history: SpecHistory, spec_yaml: str, base_revision: int, actor: str, source: str = "spec_yaml"
) -> tuple[SpecRevision, Plan]:
    """Store the spec and its plan as the next revision. Raises StaleRevisionError when
    `base_revision` is not the applied revision (checked again, atomically, by the store)."""
    planned = preview(history.current, spec_yaml, source)
    if planned.base_revision != base_revision:
        # the plan was made against the applied plan: it is only right on top of that revision
        why = (
            f"the spec was changed since revision {base_revision}"
            if base_revision < planned.base_revision
            else f"there is no revision {base_revision}"
        )
        raise StaleRevisionError(
            f"{why}: the current revision is {planned.base_revision}; fetch it, merge your "
            "change and apply again",
            base_revision=base_revision,
            current_revision=planned.base_revision,
        )
    at = history.clock.utc_now()
    revision = history.revisions.append(
        spec_yaml=spec_yaml,
        spec_sha256=planned.spec_sha256,
        plan=planned.plan.model_dump(mode="json"),
        actor=actor,
        at=at,
        base_revision=base_revision,
        then=review_on_apply(rules_of_spec(planned.spec), at, actor),
    )
    return revision, planned.plan
