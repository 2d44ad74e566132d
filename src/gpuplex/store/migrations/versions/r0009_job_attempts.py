"""Every start of a job is an attempt of its own: each run keeps its exit status and why it ended
(`job_runs.exit_code`, `end_reason`); a job counts its failed attempts against its retries
(`jobs.failures`) and a retry waits (`jobs.not_before`); a host's report of a job says when its
process started and ended and how (`job_reports.started_at`, `ended_at`, `end`); and each node's
host runtime says when it last reported (`host_reports`).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None

UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("failures", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("not_before", UTC_DATETIME, nullable=True))
    with op.batch_alter_table("jobs") as batch:
        batch.alter_column("failures", server_default=None)
    with op.batch_alter_table("job_runs") as batch:
        batch.add_column(sa.Column("exit_code", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("end_reason", sa.Text(), nullable=True))
    with op.batch_alter_table("job_reports") as batch:
        batch.add_column(sa.Column("started_at", UTC_DATETIME, nullable=True))
        batch.add_column(sa.Column("ended_at", UTC_DATETIME, nullable=True))
        batch.add_column(sa.Column("end", sa.String(16), nullable=True))
    op.create_table(
        "host_reports",
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("started_at", UTC_DATETIME, nullable=False),
        sa.Column("reported_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("node", name="pk_host_reports"),
    )


def downgrade() -> None:
    op.drop_table("host_reports")
    with op.batch_alter_table("job_reports") as batch:
        batch.drop_column("end")
        batch.drop_column("ended_at")
        batch.drop_column("started_at")
    with op.batch_alter_table("job_runs") as batch:
        batch.drop_column("end_reason")
        batch.drop_column("exit_code")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("not_before")
        batch.drop_column("failures")
