"""Chargeback, pure: the price book from `pricing:`, statements per tenant and for the fleet whose
cents add up exactly, each job's part of them, CSV and JSON renderings, budget threshold crossings. See docs/chargeback.md."""

from __future__ import annotations

from gpuplex.core.report.budget import (
    DEFAULT_THRESHOLDS_PERCENT,
    RUN_RATE_WINDOW_S,
    budget_crossings,
    projected_spend,
    run_rate_window,
)
from gpuplex.core.report.enforcement import (
    BudgetAction,
    BudgetRule,
    action_in_force,
    key_budget_name,
    key_spends,
    stronger,
)
from gpuplex.core.report.job_charges import job_charge, job_charges, with_job_charges
from gpuplex.core.report.prices import (
    DEFAULT_HYBRID_ALLOCATION_PERCENT,
    PriceBook,
    Rate,
    mig_compute_fraction,
)
from gpuplex.core.report.render import (
    CSV_COLUMNS,
    PLATFORM,
    fleet_statement_csv,
    fleet_statement_json,
    statement_csv,
    statement_json,
)
from gpuplex.core.report.rounding import apportion_cents, to_cents
from gpuplex.core.report.statement import (
    IDLE_SHARE,
    FleetStatement,
    JobCharge,
    LineItem,
    Statement,
    build_fleet_statement,
)

__all__ = [
    "CSV_COLUMNS",
    "DEFAULT_HYBRID_ALLOCATION_PERCENT",
    "DEFAULT_THRESHOLDS_PERCENT",
    "IDLE_SHARE",
    "PLATFORM",
    "RUN_RATE_WINDOW_S",
    "BudgetAction",
    "BudgetRule",
    "FleetStatement",
    "JobCharge",
    "LineItem",
    "PriceBook",
    "Rate",
    "Statement",
    "action_in_force",
    "apportion_cents",
    "budget_crossings",
    "build_fleet_statement",
    "fleet_statement_csv",
    "fleet_statement_json",
    "job_charge",
    "job_charges",
    "key_budget_name",
    "key_spends",
    "mig_compute_fraction",
    "projected_spend",
    "run_rate_window",
    "statement_csv",
    "statement_json",
    "stronger",
    "to_cents",
    "with_job_charges",
]
