"""The store: SQLAlchemy tables, alembic migrations and repositories for API keys, usage records,
the hash-chained audit log, spec revisions, control-plane tokens, GPU samples, usage roll-ups,
budgets and jobs, on SQLite (the embedded default) or PostgreSQL. Nothing in gpuplex.core imports
it."""

from sqlalchemy import Engine

from gpuplex.store.audit import AuditEntry, AuditLog, AuditVerdict, verify_audit
from gpuplex.store.budgets import Budget, BudgetAlert, BudgetRepository
from gpuplex.store.db import open_store, safe_url
from gpuplex.store.keys import ApiKey, KeyRecord, KeyRepository
from gpuplex.store.rollups import RollupRepository, UsageRollup
from gpuplex.store.samples import SampleRepository
from gpuplex.store.spec_revisions import SpecRevision, SpecRevisions
from gpuplex.store.tokens import ApiToken, TokenIdentity, TokenRepository
from gpuplex.store.usage import UsageRepository

__all__ = [
    "ApiKey",
    "ApiToken",
    "AuditEntry",
    "AuditLog",
    "AuditVerdict",
    "Budget",
    "BudgetAlert",
    "BudgetRepository",
    "Engine",
    "KeyRecord",
    "KeyRepository",
    "RollupRepository",
    "SampleRepository",
    "SpecRevision",
    "SpecRevisions",
    "TokenIdentity",
    "TokenRepository",
    "UsageRepository",
    "UsageRollup",
    "open_store",
    "safe_url",
    "verify_audit",
]
