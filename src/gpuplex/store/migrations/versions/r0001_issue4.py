"""Issue 4's schema, exactly as its create_all made it: api_keys, usage_records, audit_log.

A store created by issue 4 (these tables, no alembic_version) is stamped at this revision and then
upgraded. Never change this file: stores in the field were made by it or its create_all.

Revision ID: 0001
Revises:
Create Date: 2025-03-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("tenant", sa.String(253), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("models", sa.JSON(), nullable=False),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("expires_at", UTC_DATETIME, nullable=True),
        sa.Column("revoked_at", UTC_DATETIME, nullable=True),
        sa.Column("requests_per_min", sa.BigInteger(), nullable=True),
        sa.Column("tokens_per_min", sa.BigInteger(), nullable=True),
        sa.Column("concurrent_requests", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
    )
    op.create_index("ix_api_keys_prefix", "api_keys", ["prefix"], unique=True)
    op.create_index("ix_api_keys_tenant", "api_keys", ["tenant"])
    op.create_table(
        "usage_records",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("tenant", sa.String(253), nullable=False),
        sa.Column("key_prefix", sa.String(16), nullable=False),
        sa.Column("model", sa.String(253), nullable=False),
        sa.Column("endpoint", sa.String(64), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("latency_s", sa.Float(), nullable=False),
        sa.Column("started_at", UTC_DATETIME, nullable=False),
        sa.Column("stream", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_usage_records"),
        sa.UniqueConstraint("request_id", name="uq_usage_records_request_id"),
    )
    op.create_index("ix_usage_records_tenant_started_at", "usage_records", ["tenant", "started_at"])
    op.create_table(
        "audit_log",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("at", UTC_DATETIME, nullable=False),
        sa.Column("actor", sa.String(253), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(253), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_audit_log"),
    )
    op.create_index("ix_audit_log_at", "audit_log", ["at"])


def downgrade() -> None:
    op.drop_table("audit_log")
    op.drop_table("usage_records")
    op.drop_table("api_keys")
