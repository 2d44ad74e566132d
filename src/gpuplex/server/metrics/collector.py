"""The control plane's Prometheus metrics: one collector that reads the current state at scrape time
(the applied plan, the newest GPU samples, the roll-ups, spend and budgets), so serving the API costs
nothing extra. Labels are bounded: tenants of the applied spec (at most TENANT_LABEL_CAP, the rest
under `_other`), the spec's models, isolation modes, MIG profiles, the fleet's GPUs, one currency.
Never key prefixes, request ids, or any text a client sent.

The metric names and their meaning are listed in docs/operations.md (Metrics).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from gpuplex.core.meter import month_of, month_window
from gpuplex.revision import AppliedRevision
from gpuplex.server.context import ServerContext
from gpuplex.server.metering import Metering
from gpuplex.server.metrics.dcgm_metrics import DCGM_STATS, DcgmScrapeStats
from gpuplex.server.metrics.plan_metrics import per_gpu, tenant_allocation, tenant_held
from gpuplex.server.metrics.sample_metrics import SAMPLE_STATS
from gpuplex.server.metrics.tenant_labels import TENANT_LABEL_CAP, TenantLabels
from gpuplex.server.metrics.usage_metrics import (
    CounterFloor,
    FiredAlerts,
    alert_counter,
    money_gauges,
    usage_counters,
)
from gpuplex.store.budgets import BudgetAlert
from gpuplex.store.metric_queries import RollupTotals, latest_samples

#: A replica whose newest GPU sample is older than this is not reported as holding anything.
SAMPLE_FRESH_S = 300
#: This month's spend is recomputed once it is this old (it changes when usage is rolled up).
SPEND_TTL_S = 60
SPEND_THREAD = "gpuplex-metrics-spend"

log = logging.getLogger("gpuplex.observe.metrics")
#: The budget alerts this process fired (server/budget_alerts.py counts them).
FIRED_ALERTS = FiredAlerts()


def count_fired_alert(alert: BudgetAlert) -> None:
    """Count an alert of a tenant's own budget (a key name's budget has no series of its own)."""
    if not alert.key_name:
        FIRED_ALERTS.count(alert.tenant, alert.threshold_percent)


@dataclass(frozen=True, slots=True)
class _Spend:
    revision: int
    period: str
    computed_at: datetime
    by_tenant: dict[str, Decimal]


class MonthSpend:
    """Each tenant's statement total this month so far. A statement over a month of roll-ups can
    take longer than a scrape may, so once the value is SPEND_TTL_S old (or the spec changed) it is
    recomputed in a background thread while scrapes go on reporting the previous one; only the first
    scrape of a month waits for it."""

    def __init__(self, metering: Metering) -> None:
        self._metering = metering
        self._lock = threading.Lock()
        self._cached: _Spend | None = None
        self._refresh: threading.Thread | None = None

    def get(self, applied: AppliedRevision, now: datetime) -> _Spend:
        period = month_of(now)
        with self._lock:
            cached = self._cached
            if cached is None or cached.period != period:
                cached = self._compute(applied, period, now)
                self._cached = cached
                return cached
            fresh = timedelta(0) <= now - cached.computed_at < timedelta(seconds=SPEND_TTL_S)
            refreshing = self._refresh is not None and self._refresh.is_alive()
            if (not fresh or cached.revision != applied.revision) and not refreshing:
                self._refresh = threading.Thread(
                    target=self._refresh_in_background,
                    args=(applied, period, now),
                    name=SPEND_THREAD,
                    daemon=True,
                )
                self._refresh.start()
            return cached

    def _compute(self, applied: AppliedRevision, period: str, now: datetime) -> _Spend:
        by_tenant = self._metering.spend(month_window(period), applied)
        return _Spend(applied.revision, period, now, by_tenant)

    def _refresh_in_background(self, applied: AppliedRevision, period: str, now: datetime) -> None:
        try:
            computed = self._compute(applied, period, now)
        except Exception:  # the next scrape tries again; until then the previous value stands
            log.exception("computing this month's spend for /metrics failed")
            return
        with self._lock:
            if self._cached is None or self._cached.period == period:
                self._cached = computed


class ServerCollector:
    """Reads the control plane's state at each scrape; register it in a CollectorRegistry."""

    def __init__(
        self,
        ctx: ServerContext,
        tenant_cap: int = TENANT_LABEL_CAP,
        alerts: FiredAlerts = FIRED_ALERTS,
        dcgm: DcgmScrapeStats = DCGM_STATS,
    ) -> None:
        self._ctx = ctx
        self._tenant_cap = tenant_cap
        self._alerts = alerts
        self._dcgm = dcgm
        self._totals = RollupTotals(ctx.engine)
        self._spend = MonthSpend(ctx.metering)
        self._floor = CounterFloor()

    def collect(self) -> Iterator[Metric]:
        now = self._ctx.now()
        applied = self._ctx.current.get()
        labels = TenantLabels.of(applied.spec if applied is not None else None, self._tenant_cap)
        yield _gauge(
            "gpuplex_spec_revision",
            "The applied spec revision (0 before the first apply).",
            applied.revision if applied is not None else 0,
        )
        yield _gauge(
            "gpuplex_metrics_tenants_beyond_cap",
            f'Tenants of the spec counted under tenant="_other" (beyond the first '
            f"{self._tenant_cap}).",
            labels.beyond_cap,
        )
        yield alert_counter(self._alerts.snapshot(), labels)
        yield from self._dcgm.families()
        yield from SAMPLE_STATS.families()
        yield from usage_counters(self._totals.totals(now), labels, self._floor)
        if applied is None:
            return
        yield from tenant_allocation(applied.plan, labels)
        samples = latest_samples(self._ctx.engine, now - timedelta(seconds=SAMPLE_FRESH_S), now)
        yield from tenant_held(samples, labels)
        yield from per_gpu(applied.plan, samples)
        spend = self._spend.get(applied, now)
        yield _gauge(
            "gpuplex_spend_computed_timestamp_seconds",
            "When this month's spend was last computed (Unix seconds); it is recomputed in the "
            f"background once it is {SPEND_TTL_S} s old.",
            spend.computed_at.timestamp(),
        )
        yield from money_gauges(
            spend.by_tenant,
            self._budgets(applied),
            applied.spec.pricing.currency,
            labels,
        )

    def _budgets(self, applied: AppliedRevision) -> dict[str, Decimal]:
        """Each tenant's monthly budget: the one set through the API, else the spec's."""
        stored = {b.tenant: b.amount for b in self._ctx.budgets.list() if not b.key_name}
        amounts = {}
        for tenant in applied.spec.tenants:
            amount = stored.get(tenant.name, tenant.monthly_budget)
            if amount is not None:
                amounts[tenant.name] = amount
        return amounts


def metrics_registry(ctx: ServerContext, tenant_cap: int = TENANT_LABEL_CAP) -> CollectorRegistry:
    """A registry of its own (not prometheus-client's global one, which the gateway uses)."""
    registry = CollectorRegistry()
    registry.register(ServerCollector(ctx, tenant_cap))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)
