"""The control plane: a hash-chained audit log, spec revisions, control-plane tokens, GPU samples,
usage roll-ups, budgets and budget alerts.

The audit log's existing entries are chained here, oldest first, so `gpuplex audit verify` passes
on a store that issue 4 wrote; key entries get their tenant from their detail.

Revision ID: 0002
Revises: 0001
Create Date: 2025-03-15
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from gpuplex.store.audit_chain import GENESIS_HASH, ChainedFields, entry_hash
from gpuplex.store.columns import UtcDateTime

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UTC_DATETIME = sa.DateTime(timezone=True)
MONEY = sa.String(40)
NULLABLE_JSON = sa.JSON(none_as_null=True)


def upgrade() -> None:
    with op.batch_alter_table("audit_log") as audit:
        audit.add_column(sa.Column("tenant", sa.String(253), nullable=True))
        audit.add_column(sa.Column("before", NULLABLE_JSON, nullable=True))
        audit.add_column(sa.Column("after", NULLABLE_JSON, nullable=True))
        audit.add_column(sa.Column("prev_hash", sa.String(64), nullable=True))
        audit.add_column(sa.Column("entry_hash", sa.String(64), nullable=True))
        audit.create_index("ix_audit_log_tenant", ["tenant"])
    _chain_existing_entries()
    with op.batch_alter_table("audit_log") as audit:
        audit.alter_column("prev_hash", existing_type=sa.String(64), nullable=False)
        audit.alter_column("entry_hash", existing_type=sa.String(64), nullable=False)
    _create_tables()


def downgrade() -> None:
    for table in (
        "budget_alerts",
        "budgets",
        "usage_rollups",
        "gpu_samples",
        "api_tokens",
        "spec_revisions",
    ):
        op.drop_table(table)
    with op.batch_alter_table("audit_log") as audit:
        audit.drop_index("ix_audit_log_tenant")
        for column in ("entry_hash", "prev_hash", "after", "before", "tenant"):
            audit.drop_column(column)


def _chain_existing_entries() -> None:
    audit_log = sa.table(
        "audit_log",
        sa.column("id", sa.BigInteger()),
        sa.column("at", UtcDateTime()),
        sa.column("actor", sa.String()),
        sa.column("action", sa.String()),
        sa.column("target", sa.String()),
        sa.column("detail", sa.JSON()),
        sa.column("tenant", sa.String()),
        sa.column("prev_hash", sa.String()),
        sa.column("entry_hash", sa.String()),
    )
    connection = op.get_bind()
    rows = connection.execute(sa.select(audit_log).order_by(audit_log.c.id)).all()
    prev_hash = GENESIS_HASH
    for row in rows:
        detail: Any = row.detail if row.detail is not None else {}
        tenant = detail.get("tenant") if isinstance(detail, dict) else None
        if not (row.action.startswith("key.") and isinstance(tenant, str)):
            tenant = None
        fields = ChainedFields(
            id=row.id,
            at=row.at,
            actor=row.actor,
            action=row.action,
            target=row.target,
            tenant=tenant,
            detail=detail,
            before=None,
            after=None,
            prev_hash=prev_hash,
        )
        sealed = entry_hash(fields)
        connection.execute(
            sa.update(audit_log)
            .where(audit_log.c.id == row.id)
            .values(tenant=tenant, prev_hash=prev_hash, entry_hash=sealed)
        )
        prev_hash = sealed


def _create_tables() -> None:
    op.create_table(
        "spec_revisions",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("actor", sa.String(253), nullable=False),
        sa.Column("spec_yaml", sa.Text(), nullable=False),
        sa.Column("spec_sha256", sa.String(64), nullable=False),
        sa.Column("plan", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_spec_revisions"),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("tenant", sa.String(253), nullable=True),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("created_by", sa.String(253), nullable=False),
        sa.Column("expires_at", UTC_DATETIME, nullable=True),
        sa.Column("revoked_at", UTC_DATETIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_tokens"),
    )
    op.create_index("ix_api_tokens_prefix", "api_tokens", ["prefix"], unique=True)
    op.create_index("ix_api_tokens_tenant", "api_tokens", ["tenant"])
    op.create_table(
        "gpu_samples",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("at", UTC_DATETIME, nullable=False),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("gpu_uuid", sa.String(64), nullable=True),
        sa.Column("tenant", sa.String(253), nullable=False),
        sa.Column("workload", sa.String(253), nullable=False),
        sa.Column("replica", sa.Integer(), nullable=False),
        sa.Column("memory_used_mib", sa.BigInteger(), nullable=False),
        sa.Column("utilization_percent", sa.Float(), nullable=True),
        sa.Column("source", sa.String(16), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_gpu_samples"),
    )
    op.create_index("ix_gpu_samples_at", "gpu_samples", ["at"])
    op.create_index("ix_gpu_samples_tenant_at", "gpu_samples", ["tenant", "at"])
    op.create_table(
        "usage_rollups",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("window_start", UTC_DATETIME, nullable=False),
        sa.Column("window_end", UTC_DATETIME, nullable=False),
        sa.Column("tenant", sa.String(253), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("metric", sa.String(64), nullable=False),
        sa.Column("dimension", sa.String(253), nullable=False),
        sa.Column("quantity", MONEY, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_usage_rollups"),
        sa.UniqueConstraint(
            "window_start",
            "window_end",
            "tenant",
            "source",
            "metric",
            "dimension",
            name="uq_usage_rollups_window_line",
        ),
    )
    op.create_index(
        "ix_usage_rollups_tenant_window_start", "usage_rollups", ["tenant", "window_start"]
    )
    op.create_table(
        "budgets",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(253), nullable=False),
        sa.Column("amount", MONEY, nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("period", sa.String(16), nullable=False),
        sa.Column("thresholds_percent", sa.JSON(), nullable=False),
        sa.Column("webhook_url", sa.String(2048), nullable=True),
        sa.Column("updated_at", UTC_DATETIME, nullable=False),
        sa.Column("updated_by", sa.String(253), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_budgets"),
        sa.UniqueConstraint("tenant", name="uq_budgets_tenant"),
    )
    op.create_table(
        "budget_alerts",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(253), nullable=False),
        sa.Column("period_start", UTC_DATETIME, nullable=False),
        sa.Column("threshold_percent", sa.Integer(), nullable=False),
        sa.Column("spend", MONEY, nullable=False),
        sa.Column("budget", MONEY, nullable=False),
        sa.Column("fired_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_budget_alerts"),
        sa.UniqueConstraint(
            "tenant",
            "period_start",
            "threshold_percent",
            name="uq_budget_alerts_tenant_period_start_threshold_percent",
        ),
    )
