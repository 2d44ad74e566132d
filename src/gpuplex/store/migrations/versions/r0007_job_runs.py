"""Each run of a job on a GPU (`job_runs`: what it held, from when until when, for metering), what
the host last saw of each job's process (`job_reports`), and for a preempted job the job it makes
room for (`jobs.preempted_for`).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("preempted_for", sa.String(16), nullable=True))
    op.create_table(
        "job_runs",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(16), nullable=False),
        sa.Column("tenant", sa.String(253), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("placement", sa.JSON(), nullable=False),
        sa.Column("gpu_share", sa.String(32), nullable=False),
        sa.Column("started_at", UTC_DATETIME, nullable=False),
        sa.Column("ended_at", UTC_DATETIME, nullable=True),
        sa.Column("end_state", sa.String(16), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_job_runs"),
    )
    op.create_index("ix_job_runs_job_id", "job_runs", ["job_id"])
    op.create_index("ix_job_runs_started_at", "job_runs", ["started_at"])
    op.create_index("ix_job_runs_ended_at", "job_runs", ["ended_at"])
    op.create_table(
        "job_reports",
        sa.Column("job_id", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("alive", sa.Boolean(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("reported_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("job_id", name="pk_job_reports"),
    )


def downgrade() -> None:
    op.drop_table("job_reports")
    op.drop_table("job_runs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("preempted_for")
