"""What the budgets are read and decided from (server/budget_alerts.py, server/budget_enforcement.py):
the budgets themselves, what the gateway enforces now, the keys and their usage, the roll-ups and
the metering that prices them. Built by the composition root (`ServerContext.budget_books`) for the
background checks, and per request for the budget routes (server/dependencies.py)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuplex.server.metering import Metering
from gpuplex.store import KeyRepository
from gpuplex.store.budget_enforcement import EnforcementRepository
from gpuplex.store.budgets import BudgetRepository
from gpuplex.store.key_usage import KeyUsageRepository
from gpuplex.store.rollups import RollupRepository


@dataclass(frozen=True, slots=True)
class BudgetBooks:
    budgets: BudgetRepository
    #: what the gateway refuses or throttles now, per budget
    enforcement: EnforcementRepository
    keys: KeyRepository
    key_usage: KeyUsageRepository
    rollups: RollupRepository
    metering: Metering
