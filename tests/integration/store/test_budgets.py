"""Budgets and alerts on SQLite and PostgreSQL: set, replace, delete (audited before and after,
webhook secrets kept out of the log), each alert recorded once, and bad budgets refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from sqlalchemy import Engine

from gpuplex.errors import NotFoundError
from gpuplex.store.audit import AuditLog, verify_audit
from gpuplex.store.budgets import Budget, BudgetAlert, BudgetRepository

T0 = datetime(2025, 3, 1, tzinfo=UTC)
HOOK = "https://hooks.example.com/services/T0/B0/xoxsecret"


def test_set_replace_and_delete_a_budget(engine: Engine) -> None:
    budgets = BudgetRepository(engine)
    assert budgets.get("acme") is None
    first = budgets.set("acme", Decimal("1000.00"), "USD", now=T0, actor="ops")
    assert first == Budget(
        "acme", Decimal("1000.00"), "USD", "month", (50, 80, 100), None, T0, "ops"
    )
    second = budgets.set(
        "acme",
        Decimal("1200.10"),
        "EUR",
        now=T0 + timedelta(days=1),
        actor="alice",
        thresholds_percent=[100, 90, 90],
        webhook_url=HOOK,
    )
    assert budgets.get("acme") == second
    assert second.thresholds_percent == (90, 100)
    assert second.amount == Decimal("1200.10")
    budgets.set("globex", Decimal("5"), "USD", now=T0, actor="ops")
    assert [b.tenant for b in budgets.list()] == ["acme", "globex"]
    assert budgets.delete("acme", T0 + timedelta(days=2), "ops") == second
    assert budgets.get("acme") is None
    created, replaced, _, deleted = AuditLog(engine).entries()
    assert (created.action, created.tenant, created.before) == ("budget.set", "acme", None)
    assert created.after["amount"] == "1000.00"
    assert replaced.before == created.after
    assert replaced.after["webhook_url"] == "https://hooks.example.com/..."
    assert (deleted.action, deleted.before, deleted.after) == (
        "budget.delete",
        replaced.after,
        None,
    )
    assert "xoxsecret" not in str(AuditLog(engine).entries())
    assert verify_audit(engine).ok


def test_deleting_a_missing_budget_is_not_found(engine: Engine) -> None:
    with pytest.raises(NotFoundError, match="tenant 'acme' has no budget"):
        BudgetRepository(engine).delete("acme", T0, "ops")


@pytest.mark.parametrize(
    ("amount", "currency", "thresholds", "says"),
    [
        (Decimal("-1"), "USD", [50], "at least 0"),
        (Decimal("NaN"), "USD", [50], "at least 0"),
        (Decimal("1"), "usd", [50], "ISO 4217"),
        (Decimal("1"), "USD", [], "percentages"),
        (Decimal("1"), "USD", [0, 50], "percentages"),
    ],
)
def test_bad_budgets_are_refused(
    engine: Engine, amount: Decimal, currency: str, thresholds: list[int], says: str
) -> None:
    budgets = BudgetRepository(engine)
    with pytest.raises(ValueError, match=says):
        budgets.set("acme", amount, currency, now=T0, actor="ops", thresholds_percent=thresholds)
    assert budgets.list() == []


def test_each_alert_is_recorded_once(engine: Engine) -> None:
    budgets = BudgetRepository(engine)
    march, april = T0, datetime(2025, 4, 1, tzinfo=UTC)

    def alert(period: datetime, threshold: int, spend: str) -> BudgetAlert:
        return BudgetAlert(
            "acme", period, threshold, Decimal(spend), Decimal("1000"), period + timedelta(days=20)
        )

    assert budgets.record_alert(alert(march, 50, "500.01")) is True
    assert budgets.record_alert(alert(march, 50, "612.00")) is False  # already fired
    assert budgets.record_alert(alert(march, 80, "800.00")) is True
    assert budgets.record_alert(alert(april, 50, "510.00")) is True
    assert budgets.alerts("acme", march) == [alert(march, 50, "500.01"), alert(march, 80, "800.00")]
    assert len(budgets.alerts()) == 3
    assert budgets.alerts("globex") == []
