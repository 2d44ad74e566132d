"""deploy/grafana/gpuplex-dashboard.json only asks for what the server exports: every metric name in
every expression (and in the tenant variable's query) appears in a real /metrics scrape, and every
expression is PromQL that promtool parses."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplex.server.budget_alerts import check_budgets
from tests.integration.server_metrics.conftest import NOW, Stack
from tests.services import missing

DASHBOARD = Path(__file__).parents[3] / "deploy" / "grafana" / "gpuplex-dashboard.json"

#: PromQL words that are not metric names (aggregations, keywords, label names in clauses).
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_CLAUSES = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "group_left", "group_right"}


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: identifiers outside strings, label matchers,
    ranges and grouping clauses that are neither functions nor keywords."""
    bare = _CLAUSES.sub(" ", _RANGES.sub(" ", _MATCHERS.sub(" ", _STRINGS.sub('""', expr))))
    names = set()
    for word in _IDENTIFIER.finditer(bare):
        is_function = bare[word.end() :].lstrip().startswith("(")
        in_a_number = word.start() > 0 and bare[word.start() - 1] in "0123456789."
        if not (is_function or in_a_number or word.group() in _KEYWORDS):
            names.add(word.group())
    return names


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def expressions(dashboard: dict[str, Any]) -> list[str]:
    found = [t["expr"] for p in panels(dashboard) for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            text = query["query"] if isinstance(query, dict) else query
            found.append(re.sub(r"^label_values\((\w+),\s*\w+\)$", r"\1", text))
    return found


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def test_the_name_extraction_finds_metrics_and_only_metrics() -> None:
    expr = (
        'sum by (tenant, source) (rate(gpuplex_a_total{tenant=~"$tenant", x="y z"}[15m])) '
        "/ on (node) group_left gpuplex_b_mib or vector(0) * 2e3"
    )
    assert metric_names(expr) == {"gpuplex_a_total", "gpuplex_b_mib"}


def test_every_expression_uses_exported_metric_names(
    stack: Stack, dashboard: dict[str, Any]
) -> None:
    stack.ctx.budgets.set("northwind", Decimal(1), "USD", now=NOW, actor="t")
    # an alert series
    assert check_budgets(stack.ctx.budget_books, stack.applied, NOW, webhook_timeout_s=1.0)
    exported = stack.scrape().names()
    used: set[str] = set()
    for expr in expressions(dashboard):
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        assert names <= exported, f"{sorted(names - exported)} in {expr!r} are not exported"
        used |= names
    for wanted in (
        "gpuplex_tenant_allocated_gpus",
        "gpuplex_tenant_gpu_seconds_total",
        "gpuplex_tenant_gpu_memory_used_mib",
        "gpuplex_tenant_gpu_utilization_percent",
        "gpuplex_tenant_requests_total",
        "gpuplex_tenant_tokens_total",
        "gpuplex_tenant_spend_month_to_date",
        "gpuplex_tenant_budget_monthly",
        "gpuplex_budget_alerts_fired_total",
    ):
        assert wanted in used, f"the dashboard has no panel for {wanted}"


def test_the_dashboard_is_a_grafana_dashboard_with_a_tenant_variable(
    dashboard: dict[str, Any],
) -> None:
    assert dashboard["schemaVersion"] >= 36
    assert dashboard["uid"] == "gpuplex-control-plane"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["tenant"]["multi"] is True
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))
    for panel in panels(dashboard):
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"}
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}"
            tenant_scoped = "gpuplex_tenant_" in target["expr"] or "alerts" in target["expr"]
            by_tenant = '{tenant=~"$tenant"' in target["expr"]
            fleet_wide = panel["title"] in {"GPUs allocated", "Idle capacity", "Unplaced replicas"}
            assert by_tenant or fleet_wide or not tenant_scoped, target["expr"]


def test_promtool_parses_every_expression(dashboard: dict[str, Any], tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        missing("promtool (Debian package prometheus)")
        return
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:expr_{n}", "expr": expr}
                    for n, expr in enumerate(expressions(dashboard))
                ],
            }
        ]
    }
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    checked = subprocess.run(  # noqa: S603
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
