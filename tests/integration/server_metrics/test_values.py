"""What /metrics reports for the example SaaS spec, against numbers worked out independently: the
plan's allocations, GPU-seconds over the two rolled-up hours, the samples' memory and utilization,
the gateway's requests and tokens, spend, budgets and fired alerts."""

from __future__ import annotations

import re
import shutil
import subprocess
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import Engine

from gpuplex.core.meter import MeterWindow, month_window
from gpuplex.server.budget_alerts import check_budgets
from gpuplex.server.context import ServerContext
from tests.clocks import ManualClock
from tests.integration.server_metrics.conftest import (
    APPLIED_AT,
    NOW,
    Stack,
    build_stack,
    finish_spend_refreshes,
)
from tests.services import missing

HOURS_2_S = 7200.0


def test_allocations_follow_the_applied_plan(stack: Stack) -> None:
    scrape = stack.scrape()
    assert scrape.value("gpuplex_spec_revision") == 1
    assert scrape.value("gpuplex_tenant_allocated_gpus", tenant="northwind") == 3
    assert scrape.value("gpuplex_tenant_allocated_gpus", tenant="hobbyists") == pytest.approx(0.8)
    assert scrape.value("gpuplex_tenant_allocated_gpus", tenant="adatum") == 0  # a LoRA adapter
    for tenant in ("northwind", "contoso", "fabrikam", "hobbyists"):
        placed = stack.placements(tenant)
        assert scrape.value("gpuplex_tenant_allocated_gpu_memory_mib", tenant=tenant) == sum(
            p.memory_mib for p in placed
        )
        for mode in {p.mode.value for p in placed}:
            count = sum(1 for p in placed if p.mode.value == mode)
            assert scrape.value("gpuplex_tenant_placed_replicas", tenant=tenant, mode=mode) == count
    assert scrape.value("gpuplex_tenant_placed_replicas", tenant="northwind", mode="dedicated") == 2
    assert scrape.value("gpuplex_tenant_placed_replicas", tenant="hobbyists", mode="mps") == 4
    assert scrape.value("gpuplex_tenant_mig_slices", tenant="contoso", profile="3g.40gb") == 2
    slices = sum(v for (n, _), v in scrape.series.items() if n == "gpuplex_tenant_mig_slices")
    assert slices == sum(1 for p in stack.applied.plan.placements if p.mig is not None)


def test_every_gpu_of_the_plan_has_its_series(stack: Stack) -> None:
    scrape = stack.scrape()
    sampled = {(s.node, s.gpu_index) for s in stack.ctx.samples.window(APPLIED_AT, NOW)}
    assert len(sampled) == 2
    gpus = stack.applied.plan.gpus
    assert len(gpus) == 8
    for gpu in gpus:
        # the plan names no UUIDs; the samples do, for the GPUs they come from
        uuid = f"GPU-{gpu.node}-{gpu.index}" if (gpu.node, gpu.index) in sampled else ""
        labels = {"node": gpu.node, "gpu": str(gpu.index), "uuid": uuid, "gpu_model": gpu.model}
        assert scrape.value("gpuplex_gpu_memory_total_mib", **labels) == gpu.memory_mib
        assert scrape.value("gpuplex_gpu_occupants", **labels) == len(gpu.occupants)
        mode = gpu.mode.value if gpu.mode is not None else "idle"
        assert scrape.value("gpuplex_gpu_info", **labels, mode=mode, pool="") == 1


def test_counters_from_the_rollups_and_they_only_grow(engine: Engine) -> None:
    stack = build_stack(engine)
    client = stack.client()
    scrape = stack.scrape(client)
    gpu_seconds = "gpuplex_tenant_gpu_seconds_total"
    assert scrape.value(gpu_seconds, tenant="northwind", source="allocation") == 3 * HOURS_2_S
    # one sample a minute, each counting for the minute up to the next, 40 % busy
    assert scrape.value(gpu_seconds, tenant="northwind", source="measured") == 0.4 * HOURS_2_S
    assert not scrape.has(gpu_seconds, tenant="hobbyists", source="measured")  # no utilization
    memory = "gpuplex_tenant_gpu_memory_mib_seconds_total"
    assert scrape.value(memory, tenant="northwind") == 60_000 * HOURS_2_S
    assert scrape.value(memory, tenant="hobbyists") == 9_000 * HOURS_2_S
    assert scrape.value("gpuplex_fleet_gpu_seconds_total") == 8 * HOURS_2_S

    requests, failed = "gpuplex_tenant_requests_total", "gpuplex_tenant_failed_requests_total"
    assert scrape.value(requests, tenant="northwind", model="northwind-chat") == 3
    assert scrape.value(requests, tenant="northwind", model="_other") == 1
    assert scrape.value(requests, tenant="hobbyists", model="playground-8b") == 2
    assert scrape.value(failed, tenant="northwind", model="northwind-chat") == 1
    assert scrape.value(failed, tenant="northwind", model="_other") == 1
    tokens = "gpuplex_tenant_tokens_total"
    assert scrape.value(tokens, tenant="northwind", model="northwind-chat", kind="prompt") == 310
    assert (
        scrape.value(tokens, tenant="northwind", model="northwind-chat", kind="completion") == 130
    )
    assert scrape.value(tokens, tenant="hobbyists", model="playground-8b", kind="completion") == 45

    # two more hours: the first scrape's settled hours are kept, the new windows added once,
    # also when a window is rolled up twice
    later = NOW + timedelta(hours=2)
    stack.clock.at = later
    stack.ctx.metering.roll_up_range(NOW, later)
    stack.ctx.metering.roll_up_range(NOW, later)
    again = stack.scrape(client)
    assert again.value(gpu_seconds, tenant="northwind", source="allocation") == 6 * HOURS_2_S
    assert again.value("gpuplex_fleet_gpu_seconds_total") == 16 * HOURS_2_S
    assert again.value(requests, tenant="northwind", model="northwind-chat") == 3
    # a fresh collector (a restarted server) sums the same store to the same totals
    assert stack.scrape().value(gpu_seconds, tenant="northwind", source="allocation") == (
        6 * HOURS_2_S
    )


def test_memory_and_utilization_from_the_newest_samples(stack: Stack) -> None:
    scrape = stack.scrape()
    assert scrape.value("gpuplex_tenant_gpu_memory_used_mib", tenant="northwind") == 60_000
    assert scrape.value("gpuplex_tenant_gpu_memory_used_mib", tenant="hobbyists") == 9_000
    assert scrape.value("gpuplex_tenant_gpu_utilization_percent", tenant="northwind") == 40
    assert not scrape.has("gpuplex_tenant_gpu_utilization_percent", tenant="hobbyists")
    chat = next(p for p in stack.placements("northwind") if p.workload == "chat-70b")
    gpu = next(g for g in stack.applied.plan.gpus if g.index == chat.gpu_indices[0])
    labels = {
        "node": chat.node,
        "gpu": str(gpu.index),
        "uuid": f"GPU-{chat.node}-{gpu.index}",  # from the samples: the plan has no UUIDs
        "gpu_model": gpu.model,
    }
    assert scrape.value("gpuplex_gpu_memory_used_mib", **labels) == 60_000
    assert scrape.value("gpuplex_gpu_utilization_percent", **labels) == 40

    stack.clock.at = NOW + timedelta(minutes=10)  # the samplers stopped at NOW
    stale = stack.scrape()
    assert "gpuplex_tenant_gpu_memory_used_mib" not in stale.names()
    assert "gpuplex_gpu_memory_used_mib" not in stale.names()


def test_spend_budget_and_fired_alerts(stack: Stack) -> None:
    client = stack.client()
    scrape = stack.scrape(client)
    spend = stack.ctx.metering.spend(month_window("2025-03"), stack.applied)
    assert spend["northwind"] == Decimal("23.40")  # 3 whole GPUs x 2 h x 3.90 USD
    name = "gpuplex_tenant_spend_month_to_date"
    assert scrape.value(name, tenant="northwind", currency="USD") == float(spend["northwind"])
    assert scrape.value(name, tenant="adatum", currency="USD") == 0
    budget = "gpuplex_tenant_budget_monthly"
    assert scrape.value(budget, tenant="northwind", currency="USD") == 40_000  # the spec's
    assert not scrape.has(budget, tenant="hobbyists", currency="USD")  # none

    stack.ctx.budgets.set("northwind", Decimal(30), "USD", now=NOW, actor="test")
    fired = "gpuplex_budget_alerts_fired_total"
    key = (fired, frozenset({("tenant", "northwind"), ("threshold_percent", "50")}))
    before = scrape.series.get(key, 0.0)  # the count is the process's: other tests fire too
    alerts = check_budgets(stack.ctx.budget_books, stack.applied, NOW, webhook_timeout_s=1.0)
    assert [(a.tenant, a.threshold_percent) for a in alerts] == [("northwind", 50)]
    # fires nothing new
    check_budgets(stack.ctx.budget_books, stack.applied, NOW, webhook_timeout_s=1.0)
    after = stack.scrape(client)
    assert after.value(budget, tenant="northwind", currency="USD") == 30
    assert after.value(fired, tenant="northwind", threshold_percent="50") == before + 1
    assert after.value("gpuplex_tenant_budget_used_ratio", tenant="northwind") == pytest.approx(
        float(spend["northwind"]) / 30
    )


def test_spend_is_refreshed_in_the_background_once_a_minute_old(stack: Stack) -> None:
    client = stack.client()
    name, labels = "gpuplex_tenant_spend_month_to_date", {"tenant": "northwind", "currency": "USD"}
    first = stack.scrape(client)
    computed = first.value("gpuplex_spend_computed_timestamp_seconds")
    assert computed == NOW.timestamp()
    later = NOW + timedelta(hours=1)
    stack.ctx.metering.roll_up_range(NOW, later)  # an hour more to bill
    stack.clock.at = later
    # the scrape does not wait: it reports the previous value and starts the computation
    assert stack.scrape(client).value(name, **labels) == first.value(name, **labels)
    finish_spend_refreshes()
    refreshed = stack.scrape(client)
    assert refreshed.value("gpuplex_spend_computed_timestamp_seconds") == later.timestamp()
    expected = stack.ctx.metering.spend(month_window("2025-03"), stack.applied)["northwind"]
    assert refreshed.value(name, **labels) == float(expected) > first.value(name, **labels)


def test_before_the_first_apply_only_the_fleet_wide_series(sqlite_engine: Engine) -> None:
    clock = ManualClock(APPLIED_AT)
    scrape = Stack(ServerContext.open(sqlite_engine, clock), clock).scrape()
    assert scrape.value("gpuplex_spec_revision") == 0
    assert scrape.value("gpuplex_fleet_gpu_seconds_total") == 0
    assert not any(name.startswith("gpuplex_tenant_allocated") for name in scrape.names())


def test_every_family_is_named_gpuplex_and_documented(stack: Stack) -> None:
    text = stack.scrape().text
    helps = [line for line in text.splitlines() if line.startswith("# HELP ")]
    assert len(helps) >= 25
    for line in helps:
        _, _, name, documentation = line.split(" ", 3)
        assert name.startswith("gpuplex_"), name
        assert len(documentation) > 20, line


def test_promtool_accepts_the_exposition(stack: Stack) -> None:
    text = stack.scrape().text
    promtool = shutil.which("promtool")
    if promtool is None:
        missing("promtool (Debian package prometheus)")
        return
    checked = subprocess.run(  # noqa: S603
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout + checked.stderr == ""  # no lint warnings either


def test_the_operations_guide_lists_exactly_the_exported_metrics(stack: Stack) -> None:
    check_budgets(stack.ctx.budget_books, stack.applied, NOW, webhook_timeout_s=1.0)
    guide = (Path(__file__).parents[3] / "docs" / "operations.md").read_text()
    section = guide.split("## Metrics", 1)[1]
    documented = set(re.findall(r"^\| `(gpuplex_\w+)` \|", section, flags=re.MULTILINE))
    lines = stack.scrape().text.splitlines()
    exported = {line.split(" ")[2] for line in lines if line.startswith("# HELP")}  # _total too
    assert len(documented) >= 25
    assert documented == exported


def test_windows_rolled_up_after_a_downtime_reach_the_counters(sqlite_engine: Engine) -> None:
    """A server that was down for hours is scraped before its first roll-up pass: the windows that
    pass then rolls up are older than the settled boundary, and still count (as in statements)."""
    stack = build_stack(sqlite_engine)
    client = stack.client()
    gpu_seconds = "gpuplex_tenant_gpu_seconds_total"
    later = NOW + timedelta(hours=3)
    stack.clock.at = later
    before = stack.scrape(client)
    assert before.value(gpu_seconds, tenant="northwind", source="allocation") == 3 * HOURS_2_S
    stack.ctx.metering.roll_up_range(NOW, later)
    after = stack.scrape(client)
    assert after.value(gpu_seconds, tenant="northwind", source="allocation") == 3 * (
        HOURS_2_S + 3 * 3600
    )
    assert after.value("gpuplex_fleet_gpu_seconds_total") == 8 * (HOURS_2_S + 3 * 3600)


def test_a_counter_never_reports_less_than_it_did(sqlite_engine: Engine) -> None:
    """A recent window rolled up again with less (here: by hand) lowers the roll-ups' sum; the
    counter keeps its last value (a decrease would read as a reset: rate() would spike)."""
    stack = build_stack(sqlite_engine)
    client = stack.client()
    memory = "gpuplex_tenant_gpu_memory_mib_seconds_total"
    before = stack.scrape(client).value(memory, tenant="northwind")
    window_s = stack.ctx.metering.window_s
    last = MeterWindow(NOW - timedelta(seconds=window_s), NOW)
    stack.ctx.rollups.replace_window(last.start, last.end, "measured", [])
    assert stack.scrape(client).value(memory, tenant="northwind") == before
    stack.clock.at = NOW + timedelta(minutes=10)
    stack.ctx.metering.roll_up_range(NOW - timedelta(minutes=5), NOW + timedelta(minutes=10))
    assert stack.scrape(client).value(memory, tenant="northwind") == before  # ends at NOW
