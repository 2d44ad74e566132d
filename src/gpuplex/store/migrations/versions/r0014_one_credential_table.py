"""One table for every secret credential: the gateway's API keys (`api_keys`) and the control
plane's tokens (`api_tokens`) move, with their prefixes, hashes, state and makers, into
`credentials`, told apart by `kind` ("key" or "token"). Each kind keeps its own order (its rows are
copied oldest first); a key's creator, which `api_keys` never kept, is NULL.

The downgrade moves them back, each kind to its old table.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision: str | None = "0013"
branch_labels: str | None = None
depends_on: str | None = None

UTC_DATETIME = sa.DateTime(timezone=True)
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

#: The columns every kind has, under the same name in the old tables and the new one.
SHARED = (
    "prefix",
    "name",
    "tenant",
    "created_at",
    "expires_at",
    "revoked_at",
    "made_by_token",
    "creator_issuer",
    "creator_subject",
    "grant_role",
    "grant_tenant",
    "grant_groups",
    "suspended_at",
    "suspension_changes",
)
KEY_ONLY = ("models", "requests_per_min", "tokens_per_min", "concurrent_requests")
TOKEN_ONLY = ("role", "created_by")


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


def _copy(source: str, target: str, columns: tuple[str, ...], renamed: dict[str, str]) -> None:
    """INSERT INTO target SELECT ... FROM source, oldest first. `renamed`: a target column and
    the source expression that fills it (a column of another name, or a constant)."""
    names = ", ".join((*columns, *renamed))
    values = ", ".join((*columns, *renamed.values()))
    op.execute(
        f"INSERT INTO {target} ({names}) SELECT {values} FROM {source} ORDER BY id"  # noqa: S608
    )


def upgrade() -> None:
    op.create_table(
        "credentials",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("tenant", sa.String(253), nullable=True),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("created_by", sa.String(253), nullable=True),
        sa.Column("expires_at", UTC_DATETIME, nullable=True),
        sa.Column("revoked_at", UTC_DATETIME, nullable=True),
        sa.Column("role", sa.String(32), nullable=True),
        sa.Column("models", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("requests_per_min", sa.BigInteger(), nullable=True),
        sa.Column("tokens_per_min", sa.BigInteger(), nullable=True),
        sa.Column("concurrent_requests", sa.BigInteger(), nullable=True),
        *_made_by_columns(),
        sa.PrimaryKeyConstraint("id", name="pk_credentials"),
        sa.UniqueConstraint("kind", "prefix", name="uq_credentials_kind_prefix"),
    )
    op.create_index("ix_credentials_tenant", "credentials", ["tenant"])
    op.create_index("ix_credentials_creator_subject", "credentials", ["creator_subject"])
    _copy(
        "api_keys", "credentials", SHARED + KEY_ONLY, {"kind": "'key'", "secret_hash": "key_hash"}
    )
    _copy(
        "api_tokens",
        "credentials",
        SHARED + TOKEN_ONLY,
        {"kind": "'token'", "secret_hash": "token_hash"},
    )
    op.drop_table("api_keys")
    op.drop_table("api_tokens")


def downgrade() -> None:
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
        *_made_by_columns(),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
    )
    op.create_table(
        "api_tokens",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("tenant", sa.String(253), nullable=True),
        sa.Column("created_at", UTC_DATETIME, nullable=False),
        sa.Column("created_by", sa.String(253), nullable=False),
        sa.Column("expires_at", UTC_DATETIME, nullable=True),
        sa.Column("revoked_at", UTC_DATETIME, nullable=True),
        *_made_by_columns(),
        sa.PrimaryKeyConstraint("id", name="pk_api_tokens"),
    )
    for name in ("api_keys", "api_tokens"):
        op.create_index(f"ix_{name}_prefix", name, ["prefix"], unique=True)
        op.create_index(f"ix_{name}_tenant", name, ["tenant"])
        op.create_index(f"ix_{name}_creator_subject", name, ["creator_subject"])
    _copy(
        "(SELECT * FROM credentials WHERE kind = 'key') AS old",
        "api_keys",
        SHARED + KEY_ONLY,
        {"key_hash": "secret_hash"},
    )
    _copy(
        "(SELECT * FROM credentials WHERE kind = 'token') AS old",
        "api_tokens",
        SHARED + TOKEN_ONLY,
        {"token_hash": "secret_hash"},
    )
    op.drop_table("credentials")
