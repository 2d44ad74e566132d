"""The host reports what the control plane used to read from the host's state folder, so the two
may run on different machines and share only the store: the tail of each job's output
(`job_logs`) and the host runtime's events (`host_events`).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision: str | None = "0012"
branch_labels: str | None = None
depends_on: str | None = None

UTC_DATETIME = sa.DateTime(timezone=True)
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "job_logs",
        sa.Column("job_id", sa.String(16), nullable=False),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("stdout", sa.JSON(), nullable=False),
        sa.Column("stderr", sa.JSON(), nullable=False),
        sa.Column("reading", sa.JSON(), nullable=False),
        sa.Column("reported_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("job_id", name="pk_job_logs"),
    )
    op.create_table(
        "host_events",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("at", UTC_DATETIME, nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("tenant", sa.String(253), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_host_events"),
    )
    op.create_index("ix_host_events_node", "host_events", ["node"])
    op.create_index("ix_host_events_at", "host_events", ["at"])
    op.create_index("ix_host_events_tenant", "host_events", ["tenant"])


def downgrade() -> None:
    op.drop_table("host_events")
    op.drop_table("job_logs")
