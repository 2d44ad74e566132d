"""Credentials follow the person who made them, in the store, on SQLite and PostgreSQL: what a
credential records of its maker (and of its chain: a token a person made passes the person on),
suspension and resumption when the person's groups are seen anew or a spec applies other rules,
each with its audit entry; the gateway's view (active records, key version); the 401 a suspended
token gets; what is never touched (revoked credentials, credentials of no person); a credential
made in the instant its maker lost the grant starts suspended; sessions take the newest groups."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine

from gpuplex.core.access import Role
from gpuplex.core.access.credential_grants import GrantRules, GrantTransition
from gpuplex.core.access.oidc_groups import GroupRule
from gpuplex.core.spec import RateLimits
from gpuplex.errors import CredentialSuspended
from gpuplex.store.audit import AuditLog, verify_audit
from gpuplex.store.credential_grants import OidcPeople, review_on_apply
from gpuplex.store.credentials import CredentialMaker
from gpuplex.store.keys import KeyRepository
from gpuplex.store.migrate import downgrade_store, upgrade_store
from gpuplex.store.spec_revisions import SpecRevisions
from gpuplex.store.tokens import TokenRepository
from gpuplex.store.web_sessions import WebSessions

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ISSUER = "https://login.example.com/realms/acme"
ALICE = "alice-subject"
ADMINS = ["gpu-acme-admins"]
ALL_RULES = (
    GroupRule("gpu-{tenant}-admins", Role.TENANT_ADMIN),
    GroupRule("gpu-{tenant}-viewers", Role.TENANT_VIEWER),
)
RULES = GrantRules(ISSUER, ALL_RULES, frozenset({"acme", "globex"}))
WITHOUT_ADMINS = GrantRules(ISSUER, ALL_RULES[1:], RULES.tenants)
ALICE_AS_ADMIN = CredentialMaker(
    issuer=ISSUER,
    subject=ALICE,
    grant_role="tenant-admin",
    grant_tenant="acme",
    grant_groups=("gpu-acme-admins",),
)
ALICE_ACTOR = f"alice (oidc {ALICE} at {ISSUER})"


def see_alice(
    engine: Engine, groups: list[str], rules: GrantRules | None = RULES, at: datetime = T0
) -> list[GrantTransition]:
    changes = OidcPeople(engine).seen(
        issuer=ISSUER,
        subject=ALICE,
        name="alice",
        groups=groups,
        rules=lambda: rules,
        now=at,
        cause="test",
    )
    return [c.transition for c in changes]


def apply_rules(engine: Engine, rules: GrantRules | None, at: datetime) -> int:
    revisions = SpecRevisions(engine)
    current = revisions.current()
    made = revisions.append(
        spec_yaml=f"# {at.isoformat()}\n",
        spec_sha256="0" * 64,
        plan={},
        actor="ops",
        at=at,
        base_revision=current.revision if current is not None else None,
        then=review_on_apply(rules, at, "ops"),
    )
    return made.revision


def alices_token_and_key(engine: Engine) -> tuple[str, str, str, str]:
    """Alice, seen as an admin of acme, makes a token and a key: (token, its prefix, key, its
    prefix)."""
    assert see_alice(engine, ADMINS) == []
    token, made = TokenRepository(engine).create(
        "ci", "tenant-admin", "acme", None, T0, ALICE_ACTOR, made_by=ALICE_AS_ADMIN
    )
    key, key_made = KeyRepository(engine).create(
        "acme", "app", [], None, RateLimits(), T0, ALICE_ACTOR, made_by=ALICE_AS_ADMIN
    )
    return token, made.prefix, key, key_made.prefix


def test_a_credential_records_its_maker_and_one_made_by_a_persons_token_follows_the_person(
    engine: Engine,
) -> None:
    tokens, keys = TokenRepository(engine), KeyRepository(engine)
    _, token_prefix, _, key_prefix = alices_token_and_key(engine)
    made = tokens.get(token_prefix)
    assert made is not None
    assert made.made_by == ALICE_AS_ADMIN
    by_token = CredentialMaker(token_prefix=token_prefix)
    _, second = tokens.create("bot", "tenant-viewer", "acme", None, T0, "ci", made_by=by_token)
    _, third = keys.create(
        "acme",
        "bot",
        [],
        None,
        RateLimits(),
        T0,
        "bot",
        made_by=CredentialMaker(token_prefix=second.prefix),
    )
    for credential in (second, third):
        assert credential.made_by is not None
        assert credential.made_by.subject == ALICE
        assert (credential.made_by.grant_role, credential.made_by.grant_tenant) == (
            "tenant-admin",
            "acme",
        )
    assert second.made_by is not None
    assert second.made_by.token_prefix == token_prefix
    assert third.made_by is not None
    assert third.made_by.token_prefix == second.prefix
    # a token of no person passes nothing on; a credential made outside the API records nothing
    _, plain = tokens.create("ops", "platform-admin", None, None, T0, "root")
    _, by_plain = keys.create(
        "acme",
        "x",
        [],
        None,
        RateLimits(),
        T0,
        "ops",
        made_by=CredentialMaker(token_prefix=plain.prefix),
    )
    assert by_plain.made_by == CredentialMaker(token_prefix=plain.prefix)
    assert plain.made_by is None
    (create,) = [
        e for e in AuditLog(engine).entries("key.create") if e.target == f"key:{key_prefix}"
    ]
    assert create.detail["made_by"] == {
        "token": None,
        "person": f"oidc {ALICE} at {ISSUER}",
        "grant": {"role": "tenant-admin", "tenant": "acme", "groups": ["gpu-acme-admins"]},
    }


def test_a_group_gone_at_the_persons_next_sighting_suspends_and_its_return_resumes(
    engine: Engine,
) -> None:
    tokens, keys = TokenRepository(engine), KeyRepository(engine)
    token, token_prefix, _, key_prefix = alices_token_and_key(engine)
    version = keys.version()
    later = T0 + timedelta(minutes=5)
    lowered = see_alice(engine, ["gpu-acme-viewers"], at=later)  # admin -> viewer
    assert lowered == [GrantTransition.SUSPEND, GrantTransition.SUSPEND]
    assert keys.active_records(later) == []
    assert keys.version() != version
    with pytest.raises(CredentialSuspended, match="suspended"):
        tokens.authenticate(token, later)
    assert [t.state(later) for t in tokens.list()] == ["suspended"]
    assert [k.state(later) for k in keys.list()] == ["suspended"]
    suspend_token, suspend_key = AuditLog(engine).entries()[-2:]
    assert (suspend_token.action, suspend_token.target, suspend_token.tenant) == (
        "token.suspend",
        f"token:{token_prefix}",
        "acme",
    )
    assert suspend_token.actor == ALICE_ACTOR
    assert suspend_token.detail["made_by"]["person"] == f"oidc {ALICE} at {ISSUER}"
    assert "no longer holds" in suspend_token.detail["reason"]
    assert suspend_token.before["suspended_at"] is None
    assert suspend_token.after["suspended_at"] == later.isoformat()
    assert suspend_token.before | {"suspended_at": None} == suspend_token.after | {
        "suspended_at": None
    }  # nothing else changed
    assert (suspend_key.action, suspend_key.target) == ("key.suspend", f"key:{key_prefix}")
    # seen again with the same groups: nothing written
    entries = len(AuditLog(engine).entries())
    assert see_alice(engine, ["gpu-acme-viewers"], at=later) == []
    assert len(AuditLog(engine).entries()) == entries
    # back in the admins' group: both resume, audited
    back = T0 + timedelta(minutes=9)
    suspended_version = keys.version()
    assert see_alice(engine, ["gpu-acme-admins", "coffee"], at=back) == [GrantTransition.RESUME] * 2
    assert tokens.authenticate(token, back) is not None
    assert [r.key.prefix for r in keys.active_records(back)] == [key_prefix]
    assert keys.version() != suspended_version
    actions = [e.action for e in AuditLog(engine).entries()[-2:]]
    assert actions == ["token.resume", "key.resume"]
    assert verify_audit(engine).ok


def test_a_spec_without_the_rule_suspends_in_its_own_transaction_and_with_it_resumes(
    engine: Engine,
) -> None:
    tokens, keys = TokenRepository(engine), KeyRepository(engine)
    apply_rules(engine, RULES, T0)
    token, token_prefix, _, key_prefix = alices_token_and_key(engine)
    by_token = CredentialMaker(token_prefix=token_prefix)
    _, chained = keys.create("acme", "bot", [], None, RateLimits(), T0, "ci", made_by=by_token)
    at = T0 + timedelta(hours=1)
    revision = apply_rules(engine, WITHOUT_ADMINS, at)
    assert keys.active_records(at) == []
    with pytest.raises(CredentialSuspended):
        tokens.authenticate(token, at)
    entries = AuditLog(engine).entries()
    assert [e.action for e in entries[-4:]] == [
        "spec.apply",
        "token.suspend",
        "key.suspend",
        "key.suspend",
    ]
    assert {e.target for e in entries[-3:]} == {
        f"token:{token_prefix}",
        f"key:{key_prefix}",
        f"key:{chained.prefix}",
    }
    assert all(e.detail["cause"] == f"spec revision {revision} applied" for e in entries[-3:])
    assert all(e.actor == "ops" for e in entries[-3:])
    # the person's grants are kept current: a key of a request judged under the old rules and
    # stored after the apply starts suspended
    _, born = keys.create("acme", "late", [], None, RateLimits(), at, "a", made_by=ALICE_AS_ADMIN)
    assert born.state(at) == "suspended"
    assert AuditLog(engine).entries()[-1].action == "key.suspend"
    # the rule back: everything resumes
    again = T0 + timedelta(hours=2)
    apply_rules(engine, RULES, again)
    assert len(keys.active_records(again)) == 3
    assert tokens.authenticate(token, again) is not None
    # no auth.oidc at all: a person's credentials hold nothing
    apply_rules(engine, None, again)
    assert keys.active_records(again) == []


def test_revoked_credentials_and_those_of_no_person_are_never_judged(engine: Engine) -> None:
    tokens, keys = TokenRepository(engine), KeyRepository(engine)
    plain, _ = tokens.create("ops", "tenant-admin", "acme", None, T0, "root")
    plain_key, _ = keys.create("acme", "demo", [], None, RateLimits(), T0, "up")
    token, _, _, key_prefix = alices_token_and_key(engine)
    see_alice(engine, [], at=T0 + timedelta(minutes=1))
    # a platform admin revokes a suspended credential; it stays revoked when the grant returns
    revoked = keys.revoke(key_prefix, T0 + timedelta(minutes=2), "ops")
    assert revoked.state(T0 + timedelta(minutes=2)) == "revoked"
    assert see_alice(engine, ADMINS, at=T0 + timedelta(minutes=3)) == [GrantTransition.RESUME]
    assert tokens.authenticate(token, T0 + timedelta(minutes=3)) is not None
    assert tokens.authenticate(plain, T0 + timedelta(minutes=3)) is not None
    prefixes = {r.key.prefix for r in keys.active_records(T0 + timedelta(minutes=3))}
    assert key_prefix not in prefixes
    assert len(prefixes) == 1  # the demo key of no person, untouched throughout
    assert plain_key.split("_")[1] in prefixes


def test_a_persons_sessions_take_the_groups_seen_last(engine: Engine) -> None:
    sessions = WebSessions(engine)
    cookie, _ = sessions.create(
        issuer=ISSUER,
        subject=ALICE,
        name="alice",
        groups=ADMINS,
        now=T0,
        expires_at=T0 + timedelta(hours=12),
    )
    see_alice(engine, ADMINS)
    see_alice(engine, ["gpu-acme-viewers"], at=T0 + timedelta(minutes=1))
    found = sessions.find(cookie, T0 + timedelta(minutes=2))
    assert found is not None
    assert found.groups == ("gpu-acme-viewers",)
    person = OidcPeople(engine).get(ISSUER, ALICE)
    assert person is not None
    assert person.groups == ("gpu-acme-viewers",)
    assert [(g.role, g.tenant) for g in person.grants] == [(Role.TENANT_VIEWER, "acme")]


def test_credentials_stored_before_revision_0012_record_no_maker_and_work_as_before(
    engine: Engine,
) -> None:
    token, _ = TokenRepository(engine).create("ci", "tenant-admin", "acme", None, T0, "root")
    key, _ = KeyRepository(engine).create("acme", "app", [], None, RateLimits(), T0, "root")
    downgrade_store(engine, "0011")
    upgrade_store(engine)
    tokens, keys = TokenRepository(engine), KeyRepository(engine)
    assert [(t.made_by, t.suspended_at) for t in tokens.list()] == [(None, None)]
    assert [(k.made_by, k.suspended_at) for k in keys.list()] == [(None, None)]
    apply_rules(engine, WITHOUT_ADMINS, T0 + timedelta(minutes=1))
    assert tokens.authenticate(token, T0 + timedelta(minutes=1)) is not None
    (record,) = keys.active_records(T0 + timedelta(minutes=1))
    assert key.split("_")[1] == record.key.prefix


def test_every_credential_entry_has_one_shape_whatever_its_kind_and_verb(engine: Engine) -> None:
    """Keys and tokens, created, suspended, resumed, revoked and revoked again: one `detail` shape
    (a suspension or resumption adds why), one shape of `before` and `after` (the credential as
    shown, never its secret or hash), `before` None only for a new one."""
    tokens, keys = TokenRepository(engine), KeyRepository(engine)
    _, token_prefix, _, key_prefix = alices_token_and_key(engine)
    see_alice(engine, ["gpu-acme-viewers"], at=T0 + timedelta(minutes=1))  # suspends both
    see_alice(engine, ["gpu-acme-admins"], at=T0 + timedelta(minutes=2))  # resumes both
    for _ in range(2):
        tokens.revoke(token_prefix, T0 + timedelta(minutes=3), "ops")
        keys.revoke(key_prefix, T0 + timedelta(minutes=3), "ops")
    entries = [e for e in AuditLog(engine).entries() if e.action.split(".")[0] in ("key", "token")]
    verbs = {e.action for e in entries}
    assert verbs == {
        f"{kind}.{verb}"
        for kind in ("key", "token")
        for verb in ("create", "suspend", "resume", "revoke")
    }
    detail = {"kind", "name", "tenant", "role", "made_by", "changed"}
    shown = {"name", "tenant", "role", "models", "limits", "expires_at", "revoked_at"}
    shown |= {"suspended_at"}
    for entry in entries:
        kind, verb = entry.action.split(".")
        why = {"reason", "cause"} if verb in ("suspend", "resume") else set()
        assert set(entry.detail) == detail | why, entry
        assert entry.detail["kind"] == kind
        assert entry.target == f"{kind}:{key_prefix if kind == 'key' else token_prefix}"
        assert set(entry.after) == shown, entry
        assert entry.before is None if verb == "create" else set(entry.before) == shown, entry
        assert all("hash" not in field for field in (*entry.detail, *entry.after))
    assert [e.detail["changed"] for e in entries if e.action == "key.revoke"] == [True, False]
    assert verify_audit(engine).ok
