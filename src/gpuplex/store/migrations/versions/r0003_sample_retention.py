"""Retention of raw GPU samples: the one-row table that says before when samples were pruned, so
that a window rolled up again after pruning keeps its measured roll-ups instead of recomputing
them from the samples that are gone.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "gpu_sample_pruning",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("pruned_before", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_gpu_sample_pruning"),
    )


def downgrade() -> None:
    op.drop_table("gpu_sample_pruning")
