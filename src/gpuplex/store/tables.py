"""Every table of the store, in one place. The schema changes only through the alembic
migrations in gpuplex/store/migrations, whose result must equal these tables (a test compares them).

Datetimes are stored as UTC and always come back timezone-aware UTC (see columns.py); money is a
Decimal stored as text.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# UtcDateTime is re-exported: older code and tests import it from here
from gpuplex.store.columns import BigId, Money, UtcDateTime as UtcDateTime

#: A JSON column whose Python None is SQL NULL (not the JSON text `null`).
NullableJson = JSON(none_as_null=True)


class Base(DeclarativeBase):
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_N_name)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class CredentialRow(Base):
    """One secret credential, of either kind: a gateway API key (`kind` "key") or a control-plane
    token ("token"). Its public prefix (unique within its kind) and the SHA-256 of the whole
    credential, never the credential itself; what it may do (a key's models and limits, a token's
    role); its state (expiry, revocation, suspension); and who made it.

    A web session is not a row here: it is a person's sign-in (found by its cookie's hash, holding
    the groups their identity provider gave), not a credential a person makes, lists or revokes."""

    __tablename__ = "credentials"
    __table_args__ = (UniqueConstraint("kind", "prefix"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(8))  # key | token
    prefix: Mapped[str] = mapped_column(String(16))
    secret_hash: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(200), default="")
    #: the tenant it acts for; NULL only for a platform-admin token
    tenant: Mapped[str | None] = mapped_column(String(253), nullable=True, index=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    #: the actor that created it (NULL: a key made before revision 0014, which did not keep it)
    created_by: Mapped[str | None] = mapped_column(String(253), nullable=True)
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    #: a token's role: platform-admin | tenant-admin | tenant-viewer (NULL for a key)
    role: Mapped[str | None] = mapped_column(String(32), nullable=True)
    #: a key's models (empty: every model of its tenant; NULL for a token)
    models: Mapped[list[str] | None] = mapped_column(NullableJson, nullable=True)
    #: a key's own rate limits, on top of its tenant's (NULL: none; always NULL for a token)
    requests_per_min: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    tokens_per_min: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    concurrent_requests: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # Who made it, for the rule that a person's credentials hold only while the person could
    # make them (core.access.credential_grants); all NULL for one made outside any person's chain
    # (a token of no person, the CLI, before 0012).
    #: the control-plane token that made it (its prefix), if a token did
    made_by_token: Mapped[str | None] = mapped_column(String(16), nullable=True)
    #: the person at the root of its chain: their issuer and subject
    creator_issuer: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    creator_subject: Mapped[str | None] = mapped_column(String(255), nullable=True, index=True)
    #: the grant the person acted under: a role, on a tenant (NULL: the platform), and the groups
    #: that gave it
    grant_role: Mapped[str | None] = mapped_column(String(32), nullable=True)
    grant_tenant: Mapped[str | None] = mapped_column(String(253), nullable=True)
    grant_groups: Mapped[list[str] | None] = mapped_column(NullableJson, nullable=True)
    #: since when it is refused because the person no longer holds such a grant (NULL: it is not)
    suspended_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    #: how many times it was suspended or resumed: the gateway's key version counts it
    suspension_changes: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class UsageRow(Base):
    """One gateway request, as its UsageRecord says; `request_id` makes inserts idempotent."""

    __tablename__ = "usage_records"
    __table_args__ = (Index("ix_usage_records_tenant_started_at", "tenant", "started_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    request_id: Mapped[str] = mapped_column(String(64), unique=True)
    tenant: Mapped[str] = mapped_column(String(253))
    key_prefix: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(253))
    endpoint: Mapped[str] = mapped_column(String(64))
    status: Mapped[int] = mapped_column(Integer)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger)
    completion_tokens: Mapped[int] = mapped_column(BigInteger)
    latency_s: Mapped[float] = mapped_column(Float)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime())
    stream: Mapped[bool] = mapped_column(Boolean, default=False)
    queue_wait_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    ttft_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    itl_s: Mapped[float | None] = mapped_column(Float, nullable=True)


class AuditRow(Base):
    """One entry of the append-only audit log: who did what to which thing, and when; linked to the
    entry before it by `prev_hash`, and sealed by `entry_hash` (see audit_chain.py)."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    actor: Mapped[str] = mapped_column(String(253))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(253))
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    tenant: Mapped[str | None] = mapped_column(String(253), nullable=True, index=True)
    before: Mapped[Any] = mapped_column(NullableJson, nullable=True)
    after: Mapped[Any] = mapped_column(NullableJson, nullable=True)
    prev_hash: Mapped[str] = mapped_column(String(64))
    entry_hash: Mapped[str] = mapped_column(String(64))


class SpecRevisionRow(Base):
    """One applied spec; the revision number is the id, and the current revision the highest."""

    __tablename__ = "spec_revisions"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    actor: Mapped[str] = mapped_column(String(253))
    spec_yaml: Mapped[str] = mapped_column(Text)
    spec_sha256: Mapped[str] = mapped_column(String(64))
    plan: Mapped[dict[str, Any]] = mapped_column(JSON)


class GpuSampleRow(Base):
    """What one replica held on one GPU at one moment (NVML, DCGM or the simulator)."""

    __tablename__ = "gpu_samples"
    __table_args__ = (Index("ix_gpu_samples_tenant_at", "tenant", "at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    node: Mapped[str] = mapped_column(String(253))
    gpu_index: Mapped[int] = mapped_column(Integer)
    gpu_uuid: Mapped[str | None] = mapped_column(String(64), nullable=True)
    tenant: Mapped[str] = mapped_column(String(253))
    workload: Mapped[str] = mapped_column(String(253))
    replica: Mapped[int] = mapped_column(Integer)
    memory_used_mib: Mapped[int] = mapped_column(BigInteger)
    utilization_percent: Mapped[float | None] = mapped_column(Float, nullable=True)
    source: Mapped[str] = mapped_column(String(16))  # nvml | sim | dcgm


class GpuSamplePruningRow(Base):
    """One row (id 1): raw GPU samples of the windows that start before `pruned_before` are gone
    (kept as roll-ups only)."""

    __tablename__ = "gpu_sample_pruning"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    pruned_before: Mapped[datetime] = mapped_column(UtcDateTime())


class UsageRollupRow(Base):
    """One metered quantity of one tenant in one window; a window's rows of one source are
    replaced together, so re-running a roll-up never counts twice."""

    __tablename__ = "usage_rollups"
    __table_args__ = (
        UniqueConstraint(
            "window_start",
            "window_end",
            "tenant",
            "source",
            "metric",
            "dimension",
            name="uq_usage_rollups_window_line",
        ),
        Index("ix_usage_rollups_tenant_window_start", "tenant", "window_start"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    window_start: Mapped[datetime] = mapped_column(UtcDateTime())
    window_end: Mapped[datetime] = mapped_column(UtcDateTime())
    tenant: Mapped[str] = mapped_column(String(253))
    source: Mapped[str] = mapped_column(String(16))  # allocation | measured | gateway
    metric: Mapped[str] = mapped_column(String(64))
    dimension: Mapped[str] = mapped_column(String(253), default="")
    quantity: Mapped[Decimal] = mapped_column(Money())


class BudgetRow(Base):
    """A spending limit per period of a tenant (key_name '') or of its API keys of one name, the
    percentages at which it alerts, and what it enforces at 100 % and from a soft threshold on.
    `locked`: set by a platform admin with an enforcing action, so only a platform admin changes it."""

    __tablename__ = "budgets"
    __table_args__ = (UniqueConstraint("tenant", "key_name"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(253))
    key_name: Mapped[str] = mapped_column(String(200), default="")
    amount: Mapped[Decimal] = mapped_column(Money())
    currency: Mapped[str] = mapped_column(String(3))
    period: Mapped[str] = mapped_column(String(16), default="month")
    thresholds_percent: Mapped[list[int]] = mapped_column(JSON)
    webhook_url: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    action: Mapped[str] = mapped_column(String(16), default="alert")
    soft_percent: Mapped[int | None] = mapped_column(Integer, nullable=True)
    soft_action: Mapped[str] = mapped_column(String(16), default="alert")
    throttle_requests_per_min: Mapped[int] = mapped_column(Integer, default=10)
    locked: Mapped[bool] = mapped_column(Boolean, default=False)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())
    updated_by: Mapped[str] = mapped_column(String(253))


class BudgetAlertRow(Base):
    """A budget threshold crossed in one period: at most one row per (tenant, key name, period,
    threshold); key_name '' is the tenant's own budget."""

    __tablename__ = "budget_alerts"
    __table_args__ = (UniqueConstraint("tenant", "key_name", "period_start", "threshold_percent"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(253))
    key_name: Mapped[str] = mapped_column(String(200), default="")
    period_start: Mapped[datetime] = mapped_column(UtcDateTime())
    threshold_percent: Mapped[int] = mapped_column(Integer)
    spend: Mapped[Decimal] = mapped_column(Money())
    budget: Mapped[Decimal] = mapped_column(Money())
    fired_at: Mapped[datetime] = mapped_column(UtcDateTime())


class BudgetEnforcementRow(Base):
    """A budget the gateway enforces now (throttle or block), as the control plane's last roll-up
    decided: one row per tenant (key_name '') or key name; no row, nothing enforced."""

    __tablename__ = "budget_enforcement"
    __table_args__ = (UniqueConstraint("tenant", "key_name"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(253))
    key_name: Mapped[str] = mapped_column(String(200), default="")
    action: Mapped[str] = mapped_column(String(16))
    spend: Mapped[Decimal] = mapped_column(Money())
    budget: Mapped[Decimal] = mapped_column(Money())
    currency: Mapped[str] = mapped_column(String(3))
    period: Mapped[str] = mapped_column(String(16))  # YYYY-MM
    throttle_requests_per_min: Mapped[int] = mapped_column(Integer)
    since: Mapped[datetime] = mapped_column(UtcDateTime())


class KeyUsageRollupRow(Base):
    """Per roll-up window, each API key's gateway requests and tokens (prompt + completion)."""

    __tablename__ = "key_usage_rollups"
    __table_args__ = (Index("ix_key_usage_rollups_window_start", "window_start"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    window_start: Mapped[datetime] = mapped_column(UtcDateTime())
    window_end: Mapped[datetime] = mapped_column(UtcDateTime())
    tenant: Mapped[str] = mapped_column(String(253))
    key_prefix: Mapped[str] = mapped_column(String(16))
    requests: Mapped[int] = mapped_column(BigInteger)
    tokens: Mapped[int] = mapped_column(BigInteger)


class JobRow(Base):
    """A job a tenant submitted: its job file (JSON, as validated), where it is in its life
    (gpuplex.core.jobs.states) and why, and where it ran. `id` is `j` + 8 hex digits."""

    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_tenant_submitted_at", "tenant", "submitted_at"),
        Index("ix_jobs_state", "state"),
    )

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(253))
    name: Mapped[str | None] = mapped_column(String(63), nullable=True)
    job: Mapped[dict[str, Any]] = mapped_column(JSON)
    priority: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    submitted_at: Mapped[datetime] = mapped_column(UtcDateTime())
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    placement: Mapped[Any] = mapped_column(NullableJson, nullable=True)
    actor: Mapped[str] = mapped_column(String(253))
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    #: while `preempting`: the job it makes room for (the capacity stays held for that one)
    preempted_for: Mapped[str | None] = mapped_column(String(16), nullable=True)
    #: failed attempts that counted against its retries (`backoff_limit`)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    #: a queued retry starts no earlier than this
    not_before: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


class JobEventRow(Base):
    """One step of a job's life: the state it entered, when, and why."""

    __tablename__ = "job_events"
    __table_args__ = (Index("ix_job_events_job_id", "job_id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(16))
    at: Mapped[datetime] = mapped_column(UtcDateTime())
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")


class JobRunRow(Base):
    """One run of a job: the GPU capacity it held (its placement and share of a GPU) from the
    moment it was placed until it left the GPU (`ended_at` None: it still holds it). Metering bills
    job GPU time from these rows, as it bills replicas from the applied plans."""

    __tablename__ = "job_runs"
    __table_args__ = (
        Index("ix_job_runs_job_id", "job_id"),
        Index("ix_job_runs_started_at", "started_at"),
        Index("ix_job_runs_ended_at", "ended_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(16))
    tenant: Mapped[str] = mapped_column(String(253))
    attempt: Mapped[int] = mapped_column(Integer)
    node: Mapped[str] = mapped_column(String(253))
    placement: Mapped[dict[str, Any]] = mapped_column(JSON)
    gpu_share: Mapped[str] = mapped_column(String(32))  # a Decimal, as text: exact
    started_at: Mapped[datetime] = mapped_column(UtcDateTime())
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    end_state: Mapped[str | None] = mapped_column(String(16), nullable=True)
    #: how the attempt ended: its process's exit status, and the words of the change that ended it
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    end_reason: Mapped[str | None] = mapped_column(Text, nullable=True)


class JobReportRow(Base):
    """What the host running a job last saw of its process, for the attempt it ran: alive, or its
    exit code (or, when it has none, a note: killed by a signal, could not start)."""

    __tablename__ = "job_reports"

    job_id: Mapped[str] = mapped_column(String(16), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer)
    node: Mapped[str] = mapped_column(String(253))
    alive: Mapped[bool] = mapped_column(Boolean)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    note: Mapped[str | None] = mapped_column(Text, nullable=True)
    reported_at: Mapped[datetime] = mapped_column(UtcDateTime())
    #: when the host started its process and saw it end; how it ended (core.jobs.states.ProcessEnd)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    ended_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    end: Mapped[str | None] = mapped_column(String(16), nullable=True)


class HostReportRow(Base):
    """When the host runtime of a node last reported its jobs, and when it started: the job
    runner decides nothing on a node's jobs until its host has reported since the runner
    started."""

    __tablename__ = "host_reports"

    node: Mapped[str] = mapped_column(String(253), primary_key=True)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime())
    reported_at: Mapped[datetime] = mapped_column(UtcDateTime())


class JobLogRow(Base):
    """The tail of a job's output as its host last read it (at most the last MAX_LOG_BYTES of each
    stream, host/log_tail.py): the lines, whether more came before them, and why a stream was not
    read (a link, not a plain file). The control plane answers a job's logs from this row only."""

    __tablename__ = "job_logs"

    job_id: Mapped[str] = mapped_column(String(16), primary_key=True)
    node: Mapped[str] = mapped_column(String(253))
    stdout: Mapped[list[str]] = mapped_column(JSON)
    stderr: Mapped[list[str]] = mapped_column(JSON)
    #: per stream: {"truncated": bool, "refused": str | None}
    reading: Mapped[dict[str, Any]] = mapped_column(JSON)
    reported_at: Mapped[datetime] = mapped_column(UtcDateTime())


class HostEventRow(Base):
    """One event of a node's host runtime (a preemption, restart, watchdog stop, revision), as
    the host reported it; `tenant` is the tenant it is about (None: the node's own)."""

    __tablename__ = "host_events"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    node: Mapped[str] = mapped_column(String(253), index=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    kind: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(Text)
    tenant: Mapped[str | None] = mapped_column(String(253), nullable=True, index=True)
    message: Mapped[str] = mapped_column(Text)


class WebSessionRow(Base):
    """A person signed in to the dashboard with the identity provider: the SHA-256 of the session
    cookie (never the cookie), who they are at the issuer, and the groups their token carried at
    sign-in; roles are derived from the groups on each request."""

    __tablename__ = "web_sessions"

    session_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    issuer: Mapped[str] = mapped_column(String(2048))
    subject: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(255))
    groups: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)


class WebSignInRow(Base):
    """A dashboard sign-in under way (authorization code + PKCE): found by the SHA-256 of its
    `state`, bound to the browser that began it by the SHA-256 of a cookie, used once."""

    __tablename__ = "web_sign_ins"

    state_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    browser_hash: Mapped[str] = mapped_column(String(64))
    code_verifier: Mapped[str] = mapped_column(String(128))
    nonce: Mapped[str] = mapped_column(String(128))
    return_to: Mapped[str] = mapped_column(String(2048))
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    #: SHA-256 of the client address that began it (NULL: begun before gpuplex kept it).
    client_hash: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)


class OidcPersonRow(Base):
    """A person (or service account) of the identity provider as gpuplex last saw them: their
    groups at their last sign-in or bearer token, and the grants those give under the rules
    applied since (kept current by every spec apply), as `[{"role": ..., "tenant": ...}]`."""

    __tablename__ = "oidc_people"

    subject: Mapped[str] = mapped_column(String(255), primary_key=True)
    issuer: Mapped[str] = mapped_column(String(2048), primary_key=True)
    name: Mapped[str] = mapped_column(String(255))
    groups: Mapped[list[str]] = mapped_column(JSON)
    grants: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    seen_at: Mapped[datetime] = mapped_column(UtcDateTime())


metadata = Base.metadata


class ReplicaIdentityRow(Base):
    """Who a replica the host runtime runs on `node` is, for the gateway: the port it serves on
    and the Unix user it runs as (the owner of its listening socket; NULL: none the host can
    vouch for, so nothing answering there is taken), and when its process last started. One row
    per replica, replaced by the host as its replicas change; the gateway checks the owner of
    each new connection to a replica on its own host against it."""

    __tablename__ = "replica_identities"

    node: Mapped[str] = mapped_column(String(253), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(253), primary_key=True)
    workload: Mapped[str] = mapped_column(String(253), primary_key=True)
    replica: Mapped[int] = mapped_column(Integer, primary_key=True)
    port: Mapped[int] = mapped_column(Integer, index=True)
    uid: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    published_at: Mapped[datetime] = mapped_column(UtcDateTime())
