"""Sign-ins under way remember which client address began them (a SHA-256, never the address), so
that one address cannot fill the table that everyone's sign-ins share.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision: str | None = "0010"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("web_sign_ins") as table:
        table.add_column(sa.Column("client_hash", sa.String(64), nullable=True))
        table.create_index("ix_web_sign_ins_client_hash", ["client_hash"])


def downgrade() -> None:
    with op.batch_alter_table("web_sign_ins") as table:
        table.drop_index("ix_web_sign_ins_client_hash")
        table.drop_column("client_hash")
