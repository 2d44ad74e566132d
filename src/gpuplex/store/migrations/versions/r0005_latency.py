"""Usage records keep the latency the tenant saw: the wait in the fair queue, the time to first
token and the mean inter-token gap of a streamed reply (all nullable: older records have none, and
a whole reply has no token timing).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None

COLUMNS = ("queue_wait_s", "ttft_s", "itl_s")


def upgrade() -> None:
    with op.batch_alter_table("usage_records") as usage:
        for name in COLUMNS:
            usage.add_column(sa.Column(name, sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("usage_records") as usage:
        for name in reversed(COLUMNS):
            usage.drop_column(name)
