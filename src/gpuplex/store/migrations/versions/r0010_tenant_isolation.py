"""A tenant's job never touches another tenant: who each replica runs as, for the gateway
(`replica_identities`), and jobs stored with `network: host` moved to `network: none` (a job
always runs in a network namespace of its own now; the host runtime would hold it there anyway,
and the job file would no longer validate as stored).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None

UTC_DATETIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "replica_identities",
        sa.Column("node", sa.String(253), nullable=False),
        sa.Column("tenant", sa.String(253), nullable=False),
        sa.Column("workload", sa.String(253), nullable=False),
        sa.Column("replica", sa.Integer(), nullable=False),
        sa.Column("port", sa.Integer(), nullable=False),
        sa.Column("uid", sa.BigInteger(), nullable=True),
        sa.Column("started_at", UTC_DATETIME, nullable=True),
        sa.Column("published_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint(
            "node", "tenant", "workload", "replica", name="pk_replica_identities"
        ),
    )
    op.create_index("ix_replica_identities_port", "replica_identities", ["port"])
    jobs = sa.table("jobs", sa.column("id", sa.String(16)), sa.column("job", sa.JSON()))
    connection = op.get_bind()
    for job_id, job in connection.execute(sa.select(jobs.c.id, jobs.c.job)).all():
        if isinstance(job, dict) and job.get("network", "none") != "none":
            moved = {**job, "network": "none"}
            connection.execute(jobs.update().where(jobs.c.id == job_id).values(job=moved))


def downgrade() -> None:
    op.drop_table("replica_identities")
