"""Metric families of usage so far and money: counters from the roll-ups (GPU-seconds, memory,
requests and tokens), this month's spend against each tenant's budget, and the budget alerts this
server has fired.

The counters come from the roll-ups, the same numbers statements bill, so they trail the gateway's
own live counters (`gpuplex_gateway_*`) by up to one roll-up window plus the roll-up interval.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator, Mapping
from decimal import Decimal

from prometheus_client.core import CounterMetricFamily, Metric

from gpuplex.core.meter import (
    BUSY_GPU_SECONDS,
    COMPLETION_TOKENS,
    FAILED_REQUESTS,
    FLEET_GPU_SECONDS,
    FLEET_TENANT,
    GPU_SECONDS,
    MEMORY_MIB_SECONDS,
    PROMPT_TOKENS,
    REQUESTS,
)
from gpuplex.server.metrics.plan_metrics import Values, gauge_family
from gpuplex.server.metrics.tenant_labels import TenantLabels
from gpuplex.store.metric_queries import RollupKey

#: (source, metric) of a roll-up -> the `source` label of gpuplex_tenant_gpu_seconds_total.
_GPU_SECONDS = {
    ("allocation", GPU_SECONDS): "allocation",
    ("measured", BUSY_GPU_SECONDS): "measured",
}
_TOKEN_KINDS = {PROMPT_TOKENS: "prompt", COMPLETION_TOKENS: "completion"}


class FiredAlerts:
    """Budget alerts fired by this process, per tenant and threshold (a counter: it only grows)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, int], int] = defaultdict(int)

    def count(self, tenant: str, threshold_percent: int) -> None:
        with self._lock:
            self._counts[tenant, threshold_percent] += 1

    def snapshot(self) -> dict[tuple[str, int], int]:
        with self._lock:
            return dict(self._counts)


class CounterFloor:
    """What each counter series last reported, so that it never reports less: a counter that goes
    down, by a millionth even, is read by Prometheus as a reset and rate() shows its whole value as
    one spike. Sums of the roll-ups can go down: regrouped as windows settle (rounded to DIGITS),
    a recent window rolled up again with less, a model label that moved when the spec changed. A
    lower sum reports the last value until the sum passes it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[tuple[str, tuple[str, ...]], float] = {}

    def at_least_last(self, name: str, values: Values) -> Values:
        with self._lock:
            kept: Values = {}
            for label_values, value in values.items():
                key = (name, label_values)
                kept[label_values] = self._last[key] = max(value, self._last.get(key, value))
            return kept


def usage_counters(
    totals: Mapping[RollupKey, float], labels: TenantLabels, floor: CounterFloor
) -> Iterator[Metric]:
    gpu_seconds: Values = defaultdict(float)
    memory: Values = defaultdict(float)
    requests: Values = defaultdict(float)
    failed: Values = defaultdict(float)
    tokens: Values = defaultdict(float)
    fleet = 0.0
    for (tenant, source, metric, dimension), quantity in totals.items():
        if tenant == FLEET_TENANT:
            fleet += quantity if metric == FLEET_GPU_SECONDS else 0.0
            continue
        who = labels.tenant(tenant)
        if (source, metric) in _GPU_SECONDS:
            gpu_seconds[who, _GPU_SECONDS[source, metric]] += quantity
        elif source == "measured" and metric == MEMORY_MIB_SECONDS:
            memory[who,] += quantity
        elif source == "gateway":
            model = labels.model(tenant, dimension)
            if metric == REQUESTS:
                requests[who, model] += quantity
            elif metric == FAILED_REQUESTS:
                failed[who, model] += quantity
            elif metric in _TOKEN_KINDS:
                tokens[who, model, _TOKEN_KINDS[metric]] += quantity
    yield _counter(
        "gpuplex_tenant_gpu_seconds",
        "GPU-seconds rolled up so far: source allocation is what the plan reserved (a whole GPU "
        "for a second counts 1), measured is utilization-weighted busy time from GPU samples.",
        ["tenant", "source"],
        floor.at_least_last("gpuplex_tenant_gpu_seconds", gpu_seconds),
    )
    yield _counter(
        "gpuplex_tenant_gpu_memory_mib_seconds",
        "GPU memory held times seconds (MiB-seconds), from GPU samples, rolled up so far.",
        ["tenant"],
        floor.at_least_last("gpuplex_tenant_gpu_memory_mib_seconds", memory),
    )
    yield _counter(
        "gpuplex_fleet_gpu_seconds",
        "Capacity: every GPU of the plan in force times seconds, rolled up so far.",
        [],
        floor.at_least_last("gpuplex_fleet_gpu_seconds", {(): fleet}),
    )
    yield _counter(
        "gpuplex_tenant_requests",
        "Gateway requests rolled up so far, whatever their status, by tenant and served model "
        "(_other: a model the tenant does not serve).",
        ["tenant", "model"],
        floor.at_least_last("gpuplex_tenant_requests", requests),
    )
    yield _counter(
        "gpuplex_tenant_failed_requests",
        "Gateway requests answered with status 400 or above, rolled up so far.",
        ["tenant", "model"],
        floor.at_least_last("gpuplex_tenant_failed_requests", failed),
    )
    yield _counter(
        "gpuplex_tenant_tokens",
        "Tokens the gateway served, rolled up so far, by kind (prompt, completion).",
        ["tenant", "model", "kind"],
        floor.at_least_last("gpuplex_tenant_tokens", tokens),
    )


def money_gauges(
    spend: Mapping[str, Decimal],
    budgets: Mapping[str, Decimal],
    currency: str,
    labels: TenantLabels,
) -> Iterator[Metric]:
    spent: Values = {(name, currency): 0.0 for name in labels.own}
    for tenant, amount in spend.items():
        key = (labels.tenant(tenant), currency)
        spent[key] = spent.get(key, 0.0) + float(amount)
    budgeted: Values = defaultdict(float)
    for tenant, amount in budgets.items():
        budgeted[labels.tenant(tenant), currency] += float(amount)
    used: Values = {
        (tenant,): spent.get((tenant, currency), 0.0) / amount
        for (tenant, _), amount in budgeted.items()
        if amount > 0
    }
    yield gauge_family(
        "gpuplex_tenant_spend_month_to_date",
        "The tenant's statement total for this calendar month (UTC) so far, in `currency`.",
        ["tenant", "currency"],
        spent,
    )
    yield gauge_family(
        "gpuplex_tenant_budget_monthly",
        "The tenant's monthly budget (set through the API, else the spec's monthly_budget), in "
        "`currency`; no series for a tenant without one.",
        ["tenant", "currency"],
        budgeted,
    )
    yield gauge_family(
        "gpuplex_tenant_budget_used_ratio",
        "This month's spend divided by the monthly budget (1 = the whole budget).",
        ["tenant"],
        used,
    )


def alert_counter(fired: Mapping[tuple[str, int], int], labels: TenantLabels) -> Metric:
    counts: Values = defaultdict(float)
    for (tenant, threshold), count in fired.items():
        counts[labels.tenant(tenant), str(threshold)] += count
    return _counter(
        "gpuplex_budget_alerts_fired",
        "Budget alerts this server process fired (each threshold fires once per tenant and "
        "month), by tenant and threshold in percent of the budget.",
        ["tenant", "threshold_percent"],
        counts,
    )


def _counter(name: str, documentation: str, label_names: list[str], values: Values) -> Metric:
    family = CounterMetricFamily(name, documentation, labels=label_names)
    for label_values, value in sorted(values.items()):
        family.add_metric(list(label_values), value)
    return family
