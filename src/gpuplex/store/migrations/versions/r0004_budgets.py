"""Budgets that enforce: budgets per tenant or per API key name with an action at 100 % and at a
soft threshold, alerts per key name, the enforcement the gateway reads, and per-key usage roll-ups.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UTC_DATETIME = sa.DateTime(timezone=True)
MONEY = sa.String(40)


def upgrade() -> None:
    with op.batch_alter_table("budgets") as budgets:
        budgets.add_column(sa.Column("key_name", sa.String(200), nullable=False, server_default=""))
        for name, default in (("action", "alert"), ("soft_action", "alert")):
            budgets.add_column(
                sa.Column(name, sa.String(16), nullable=False, server_default=default)
            )
        budgets.add_column(sa.Column("soft_percent", sa.Integer(), nullable=True))
        budgets.add_column(
            sa.Column(
                "throttle_requests_per_min", sa.Integer(), nullable=False, server_default="10"
            )
        )
        budgets.add_column(
            sa.Column("locked", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        budgets.drop_constraint("uq_budgets_tenant", type_="unique")
        budgets.create_unique_constraint("uq_budgets_tenant_key_name", ["tenant", "key_name"])
    with op.batch_alter_table("budgets") as budgets:  # the defaults were for existing rows only
        for name in ("key_name", "action", "soft_action", "throttle_requests_per_min", "locked"):
            budgets.alter_column(name, server_default=None)
    with op.batch_alter_table("budget_alerts") as alerts:
        alerts.add_column(sa.Column("key_name", sa.String(200), nullable=False, server_default=""))
        alerts.drop_constraint(
            "uq_budget_alerts_tenant_period_start_threshold_percent", type_="unique"
        )
        alerts.create_unique_constraint(
            "uq_budget_alerts_tenant_key_name_period_start_threshold_percent",
            ["tenant", "key_name", "period_start", "threshold_percent"],
        )
    with op.batch_alter_table("budget_alerts") as alerts:
        alerts.alter_column("key_name", server_default=None)
    op.create_table(
        "budget_enforcement",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(253), nullable=False),
        sa.Column("key_name", sa.String(200), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("spend", MONEY, nullable=False),
        sa.Column("budget", MONEY, nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("period", sa.String(16), nullable=False),
        sa.Column("throttle_requests_per_min", sa.Integer(), nullable=False),
        sa.Column("since", UTC_DATETIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_budget_enforcement"),
        sa.UniqueConstraint("tenant", "key_name", name="uq_budget_enforcement_tenant_key_name"),
    )
    op.create_table(
        "key_usage_rollups",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("window_start", UTC_DATETIME, nullable=False),
        sa.Column("window_end", UTC_DATETIME, nullable=False),
        sa.Column("tenant", sa.String(253), nullable=False),
        sa.Column("key_prefix", sa.String(16), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_key_usage_rollups"),
    )
    op.create_index("ix_key_usage_rollups_window_start", "key_usage_rollups", ["window_start"])


def downgrade() -> None:
    op.drop_table("key_usage_rollups")
    op.drop_table("budget_enforcement")
    op.execute("DELETE FROM budget_alerts WHERE key_name <> ''")
    with op.batch_alter_table("budget_alerts") as alerts:
        alerts.drop_constraint(
            "uq_budget_alerts_tenant_key_name_period_start_threshold_percent", type_="unique"
        )
        alerts.create_unique_constraint(
            "uq_budget_alerts_tenant_period_start_threshold_percent",
            ["tenant", "period_start", "threshold_percent"],
        )
        alerts.drop_column("key_name")
    op.execute("DELETE FROM budgets WHERE key_name <> ''")
    with op.batch_alter_table("budgets") as budgets:
        budgets.drop_constraint("uq_budgets_tenant_key_name", type_="unique")
        budgets.create_unique_constraint("uq_budgets_tenant", ["tenant"])
        for name in (
            "locked",
            "throttle_requests_per_min",
            "soft_percent",
            "soft_action",
            "action",
            "key_name",
        ):
            budgets.drop_column(name)
