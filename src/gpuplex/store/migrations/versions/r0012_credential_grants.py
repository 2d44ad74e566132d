"""Credentials follow the grant of the person who made them: API keys and control-plane tokens
record who made them (the making token's prefix; the person at the root of the chain and the grant
they acted under) and since when they are suspended; `oidc_people` keeps each person's groups as
last seen and the grants those give. Existing credentials get NULL: made by no person, they work as
before.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision: str | None = "0011"
branch_labels: str | None = None
depends_on: str | None = None

UTC_DATETIME = sa.DateTime(timezone=True)
CREDENTIAL_TABLES = ("api_keys", "api_tokens")


def _made_by_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("made_by_token", sa.String(16), nullable=True),
        sa.Column("creator_issuer", sa.String(2048), nullable=True),
        sa.Column("creator_subject", sa.String(255), nullable=True),
        sa.Column("grant_role", sa.String(32), nullable=True),
        sa.Column("grant_tenant", sa.String(253), nullable=True),
        sa.Column("grant_groups", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("suspended_at", UTC_DATETIME, nullable=True),
        sa.Column("suspension_changes", sa.Integer(), nullable=False, server_default="0"),
    ]


def upgrade() -> None:
    for name in CREDENTIAL_TABLES:
        with op.batch_alter_table(name) as table:
            for column in _made_by_columns():
                table.add_column(column)
            table.create_index(f"ix_{name}_creator_subject", ["creator_subject"])
    op.create_table(
        "oidc_people",
        sa.Column("subject", sa.String(255), nullable=False),
        sa.Column("issuer", sa.String(2048), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("groups", sa.JSON(), nullable=False),
        sa.Column("grants", sa.JSON(), nullable=False),
        sa.Column("seen_at", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("subject", "issuer", name="pk_oidc_people"),
    )


def downgrade() -> None:
    op.drop_table("oidc_people")
    for name in CREDENTIAL_TABLES:
        with op.batch_alter_table(name) as table:
            table.drop_index(f"ix_{name}_creator_subject")
            for column in reversed(_made_by_columns()):
                table.drop_column(column.name)
