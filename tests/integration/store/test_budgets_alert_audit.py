"""A budget alert is a change like any other: recording it writes its audit entry, once."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from sqlalchemy import Engine

from gpuplex.store import AuditLog
from gpuplex.store.audit import verify_audit
from gpuplex.store.budgets import BudgetAlert, BudgetRepository


def test_a_new_alert_is_audited_once_and_the_chain_holds(engine: Engine) -> None:
    alert = BudgetAlert(
        tenant="contoso",
        period_start=datetime(2026, 11, 1, tzinfo=UTC),
        threshold_percent=80,
        spend=Decimal("7300.00"),
        budget=Decimal("9000"),
        fired_at=datetime(2026, 11, 20, 12, tzinfo=UTC),
    )
    budgets = BudgetRepository(engine)

    assert budgets.record_alert(alert) is True
    assert budgets.record_alert(alert) is False

    entries = AuditLog(engine).entries(action="budget.alert")
    assert [(e.tenant, e.target, e.detail["threshold_percent"]) for e in entries] == [
        ("contoso", "budget:contoso", 80)
    ]
    assert entries[0].detail["spend"] == "7300.00"
    assert verify_audit(engine).ok
