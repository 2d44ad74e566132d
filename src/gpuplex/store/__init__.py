"""The store: SQLAlchemy tables and repositories for API keys, usage records and the audit log, on
SQLite (the embedded default) or PostgreSQL. Nothing in gpuplex.core imports it."""

from gpuplex.store.audit import AuditEntry, AuditLog
from gpuplex.store.db import open_store, safe_url
from gpuplex.store.keys import ApiKey, KeyLimits, KeyRecord, KeyRepository
from gpuplex.store.usage import UsageRepository

__all__ = [
    "ApiKey",
    "AuditEntry",
    "AuditLog",
    "KeyLimits",
    "KeyRecord",
    "KeyRepository",
    "UsageRepository",
    "open_store",
    "safe_url",
]
