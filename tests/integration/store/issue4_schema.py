"""Issue 4's tables, frozen as its create_all made them (no alembic_version): the schema that
migration 0001 must reproduce exactly, and the stores in the field that open_store stamps."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Float, Index, Integer, MetaData, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from gpuplex.store.columns import BigId, UtcDateTime


class Base(DeclarativeBase):
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_N_name)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class ApiKeyRow(Base):
    """One API key: its public prefix and the SHA-256 of the whole key, never the key itself."""

    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    prefix: Mapped[str] = mapped_column(String(16), unique=True, index=True)
    key_hash: Mapped[str] = mapped_column(String(64))
    tenant: Mapped[str] = mapped_column(String(253), index=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    models: Mapped[list[str]] = mapped_column(JSON, default=list)  # empty: every model
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    expires_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    requests_per_min: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    tokens_per_min: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    concurrent_requests: Mapped[int | None] = mapped_column(BigInteger, nullable=True)


class UsageRow(Base):
    """One gateway request, as its UsageRecord says; `request_id` makes inserts idempotent."""

    __tablename__ = "usage_records"
    __table_args__ = (Index("ix_usage_records_tenant_started_at", "tenant", "started_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    request_id: Mapped[str] = mapped_column(String(64), unique=True)
    tenant: Mapped[str] = mapped_column(String(253))
    key_prefix: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(253))
    endpoint: Mapped[str] = mapped_column(String(64))
    status: Mapped[int] = mapped_column(Integer)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger)
    completion_tokens: Mapped[int] = mapped_column(BigInteger)
    latency_s: Mapped[float] = mapped_column(Float)
    started_at: Mapped[datetime] = mapped_column(UtcDateTime())
    stream: Mapped[bool] = mapped_column(Boolean, default=False)


class AuditRow(Base):
    """One entry of the append-only audit log: who did what to which thing, and when."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UtcDateTime(), index=True)
    actor: Mapped[str] = mapped_column(String(253))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str] = mapped_column(String(253))
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


issue4_metadata = Base.metadata
