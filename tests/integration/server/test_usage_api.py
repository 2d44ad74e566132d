"""Usage, roll-ups, statements and budgets over the API, with the spec applied at T0 and the clock
moved by hand: roll-ups are idempotent, statements add up (lines to the total; tenants and idle to
the fleet's cost), and a budget alert fires once."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest

from gpuplex.server.budget_alerts import check_budgets
from tests.integration.server.conftest import T0, TENANT_A, TENANT_B, TENANT_C, Api, error_of

HOUR = timedelta(hours=1)
PERIOD = "2026-03"


def iso(delta: timedelta = timedelta(0)) -> str:
    return (T0 + delta).isoformat()


def roll_up(api: Api, start: timedelta, end: timedelta) -> dict[str, Any]:
    reply = api.post("/meter/rollup", json={"start": iso(start), "end": iso(end)})
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def gpu_seconds(api: Api, tenant: str, hours: int = 1) -> dict[str, Decimal]:
    reply = api.get(
        f"/tenants/{tenant}/usage",
        params={"start": iso(), "end": iso(hours * HOUR), "metric": "gpu_seconds"},
    )
    assert reply.status_code == 200, reply.text
    points = reply.json()["points"]
    assert {p["tenant"] for p in points} <= {tenant}
    totals: dict[str, Decimal] = {}
    for point in points:
        totals[point["dimension"]] = totals.get(point["dimension"], Decimal(0)) + Decimal(
            point["quantity"]
        )
    return totals


def test_a_rollup_of_a_past_hour_shows_each_tenants_gpu_seconds_once(api: Api) -> None:
    api.clock.advance(2 * HOUR)
    assert gpu_seconds(api, TENANT_A) == {}
    first = roll_up(api, timedelta(0), HOUR)
    assert (first["windows"], first["window_s"]) == (60, 60)
    assert gpu_seconds(api, TENANT_A) == {"H100-80GB/mps": Decimal(1800)}
    assert gpu_seconds(api, TENANT_B) == {"H100-80GB/mps": Decimal(1800)}
    [(dimension, mig)] = gpu_seconds(api, TENANT_C).items()
    assert dimension.startswith("H100-80GB/mig")
    applied = api.ctx.current.get()
    assert applied is not None
    [slice_] = [p for p in applied.plan.placements if p.tenant == TENANT_C]
    assert 0 < slice_.compute_percent < 100
    assert mig == Decimal(3600) * slice_.compute_percent / 100

    again = roll_up(api, timedelta(0), HOUR)
    assert again == first
    assert gpu_seconds(api, TENANT_A) == {"H100-80GB/mps": Decimal(1800)}
    roll_up(api, timedelta(minutes=30), 2 * HOUR)  # overlapping the first: replaced, not added
    assert gpu_seconds(api, TENANT_A, hours=2) == {"H100-80GB/mps": Decimal(3600)}


def test_usage_buckets_and_filters(api: Api) -> None:
    api.clock.advance(2 * HOUR)
    roll_up(api, timedelta(0), 2 * HOUR)
    reply = api.get(
        f"/tenants/{TENANT_A}/usage",
        params={"start": iso(), "end": iso(2 * HOUR), "bucket_s": 1800, "source": "allocation"},
    )
    points = reply.json()["points"]
    assert {(p["metric"], p["start"]) for p in points} == {
        (metric, (T0 + k * timedelta(minutes=30)).isoformat().replace("+00:00", "Z"))
        for metric in ("gpu_seconds", "instance_seconds")
        for k in range(4)
    }
    assert all(Decimal(p["quantity"]) == 900 for p in points if p["metric"] == "gpu_seconds")
    gateway = api.get(
        f"/tenants/{TENANT_A}/usage",
        params={"start": iso(), "end": iso(2 * HOUR), "source": "gateway"},
    )
    assert gateway.json()["points"] == []


def test_fleet_usage_keeps_tenants_apart_and_shows_the_capacity(api: Api) -> None:
    api.clock.advance(2 * HOUR)
    roll_up(api, timedelta(0), HOUR)
    reply = api.get("/usage", params={"start": iso(), "end": iso(HOUR), "source": "allocation"})
    assert reply.status_code == 200, reply.text
    by_tenant = {(p["tenant"], p["metric"]): Decimal(p["quantity"]) for p in reply.json()["points"]}
    assert by_tenant[TENANT_A, "gpu_seconds"] == 1800
    assert by_tenant[TENANT_B, "gpu_seconds"] == 1800
    assert by_tenant["", "fleet_gpu_seconds"] == 2 * 3600


def test_bad_usage_ranges_and_future_rollups_are_422(api: Api) -> None:
    cases: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", f"/tenants/{TENANT_A}/usage", {"params": {"start": iso(HOUR), "end": iso()}}),
        (
            "GET",
            f"/tenants/{TENANT_A}/usage",
            {"params": {"start": iso(), "end": iso(timedelta(days=401))}},
        ),
        (
            "GET",
            f"/tenants/{TENANT_A}/usage",
            {"params": {"start": "2026-03-10T12:00:00", "end": iso(HOUR)}},
        ),
        ("POST", "/meter/rollup", {"json": {"start": iso(), "end": iso(HOUR)}}),  # the future
        ("POST", "/meter/rollup", {"json": {"start": "2026-03-10T12:00:00", "end": iso()}}),
        # more than a day of windows in one call: refused, not computed for minutes
        ("POST", "/meter/rollup", {"json": {"start": iso(-HOUR * 25), "end": iso()}}),
    ]
    for method, path, kwargs in cases:
        reply = api.call(method, path, **kwargs)
        assert reply.status_code == 422, (path, kwargs, reply.text)
        assert error_of(reply)["code"] == "invalid_request"


def test_statements_add_up_in_json_and_csv(api: Api) -> None:
    api.clock.advance(3 * HOUR)
    roll_up(api, timedelta(0), 2 * HOUR)
    reply = api.get(f"/tenants/{TENANT_A}/statements/{PERIOD}", "a-viewer")
    assert reply.status_code == 200, reply.text
    statement = reply.json()
    assert statement["tenant"] == TENANT_A
    total = Decimal(statement["total"])
    assert total == Decimal("3.60")  # 2 h x half an H100 x 3.60
    assert sum(Decimal(line["amount"]) for line in statement["lines"]) == total

    as_csv = api.get(f"/tenants/{TENANT_A}/statements/{PERIOD}", params={"format": "csv"})
    assert as_csv.status_code == 200
    assert as_csv.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(as_csv.text)))
    assert {row["tenant"] for row in rows} == {TENANT_A}
    *line_rows, total_row = rows
    assert (total_row["description"], Decimal(total_row["amount"])) == ("Total", total)
    assert sum(Decimal(row["amount"]) for row in line_rows) == total

    fleet = api.get(f"/statements/{PERIOD}").json()
    tenants = {s["tenant"]: Decimal(s["total"]) for s in fleet["tenants"]}
    assert set(tenants) == {TENANT_A, TENANT_B, TENANT_C}
    assert tenants[TENANT_A] == total
    fleet_cost = Decimal(fleet["fleet_cost"])
    assert fleet_cost == Decimal("14.40")  # 2 GPUs x 2 h x 3.60
    assert sum(tenants.values()) + Decimal(fleet["idle"]) == fleet_cost
    for tenant_statement in fleet["tenants"]:
        lines = sum(Decimal(line["amount"]) for line in tenant_statement["lines"])
        assert lines == Decimal(tenant_statement["total"])
    fleet_csv = api.get(f"/statements/{PERIOD}", params={"format": "csv"})
    assert fleet_csv.status_code == 200
    assert fleet_csv.headers["content-type"].startswith("text/csv")
    amounts = {
        (row["tenant"], row["description"]): Decimal(row["amount"])
        for row in csv.DictReader(io.StringIO(fleet_csv.text))
        if row["description"] in ("Total", "Idle capacity", "Fleet cost")
    }
    csv_tenants = {owner: amount for (owner, what), amount in amounts.items() if what == "Total"}
    assert csv_tenants == tenants
    [idle] = [amount for (_, what), amount in amounts.items() if what == "Idle capacity"]
    [cost] = [amount for (_, what), amount in amounts.items() if what == "Fleet cost"]
    assert (sum(csv_tenants.values()) + idle, cost) == (fleet_cost, fleet_cost)


def test_a_statement_has_one_line_per_dimension(api: Api) -> None:
    api.clock.advance(2 * HOUR)
    roll_up(api, timedelta(0), HOUR)
    statement = api.get(f"/tenants/{TENANT_A}/statements/{PERIOD}").json()
    assert len(statement["lines"]) == 1


def test_bad_periods_are_422_naming_period(api: Api) -> None:
    for period in ("2026-13", "2026-00", "26-03", "2026-3", "march"):
        for path in (f"/tenants/{TENANT_A}/statements/{period}", f"/statements/{period}"):
            reply = api.get(path)
            assert reply.status_code == 422, (path, reply.text)
            assert error_of(reply)["field"] == "period"


def test_budgets_put_get_delete(api: Api) -> None:
    spec_budget = api.get(f"/tenants/{TENANT_A}/budget", "a-viewer").json()
    assert spec_budget["source"] == "spec"
    assert Decimal(spec_budget["amount"]) == 100
    assert api.get(f"/tenants/{TENANT_C}/budget").json()["source"] == "none"

    body = {"amount": "250.50", "thresholds_percent": [90, 50, 50], "webhook_url": None}
    reply = api.put(f"/tenants/{TENANT_A}/budget", "a-admin", json=body)
    assert reply.status_code == 200, reply.text
    set_budget = reply.json()
    assert (set_budget["source"], set_budget["amount"]) == ("set", "250.50")
    assert set_budget["thresholds_percent"] == [50, 90]
    assert set_budget["period"] == PERIOD
    assert api.get(f"/tenants/{TENANT_A}/budget").json() == set_budget

    hooked = api.put(
        f"/tenants/{TENANT_A}/budget",
        json={"amount": "10", "webhook_url": "https://hooks.example/secret-path"},
    )
    assert hooked.json()["webhook"] is True
    assert "secret-path" not in hooked.text

    # with a webhook, only a platform admin deletes it (test_budget_webhooks.py)
    deleted = api.delete(f"/tenants/{TENANT_A}/budget")
    assert deleted.status_code == 200
    assert deleted.json()["source"] == "spec"
    again = api.delete(f"/tenants/{TENANT_A}/budget")
    assert again.status_code == 404
    assert error_of(again)["code"] == "not_found"
    actions = [e["action"] for e in api.get("/audit", params={"tenant": TENANT_A}).json()["items"]]
    assert actions[:3] == ["budget.delete", "budget.set", "budget.set"]


def test_projected_spend_runs_at_the_rate_of_the_windows_rolled_up(api: Api) -> None:
    """The run rate is over the windows rolled up since the tenant's first spend (it started on
    the 10th at 12:00, mid-month), not since the 1st and not up to now (roll-ups trail the clock;
    after a downtime by hours); the reply names that window."""
    api.clock.advance(HOUR)
    roll_up(api, timedelta(0), HOUR)  # A: half a GPU for an hour at 3.60: 1.80
    api.clock.advance(23 * HOUR)  # nothing rolled up since
    budget = api.get(f"/tenants/{TENANT_A}/budget").json()
    assert Decimal(budget["spend"]) == Decimal("1.80")
    hours_left = 31 * 24 - (9 * 24 + 13)  # from the 10th 13:00 to April 1st
    assert Decimal(budget["projected_spend"]) == Decimal("1.80") * (1 + hours_left)
    assert budget["projection_window_start"].startswith("2026-03-10T12:00:00")
    assert budget["projection_window_end"].startswith("2026-03-10T13:00:00")


@pytest.mark.parametrize(
    "body",
    [
        {"amount": "-1"},
        {"amount": "1.001"},
        {"amount": "1e13"},
        {"amount": "NaN"},
        {"amount": "10", "thresholds_percent": []},
        {"amount": "10", "thresholds_percent": [0]},
        {"amount": "10", "webhook_url": "ftp://example.com/x"},
        {},
    ],
)
def test_bad_budgets_are_422(api: Api, body: dict[str, Any]) -> None:
    reply = api.put(f"/tenants/{TENANT_A}/budget", json=body)
    assert reply.status_code == 422, reply.text
    assert error_of(reply)["code"] == "invalid_request"
    assert api.ctx.budgets.get(TENANT_A) is None


def test_a_budget_alert_fires_once_per_threshold(api: Api) -> None:
    api.put(
        f"/tenants/{TENANT_A}/budget", json={"amount": "2", "thresholds_percent": [50, 80, 100]}
    )
    api.clock.advance(3 * HOUR)
    roll_up(api, timedelta(0), HOUR)  # A has spent 1.80 of 2: 90 %
    applied = api.ctx.current.get()
    assert applied is not None
    fired = check_budgets(api.ctx.budget_books, applied, api.clock.utc_now(), webhook_timeout_s=1)
    assert sorted((a.tenant, a.threshold_percent) for a in fired) == [
        (TENANT_A, 50),
        (TENANT_A, 80),
    ]
    assert (
        check_budgets(api.ctx.budget_books, applied, api.clock.utc_now(), webhook_timeout_s=1) == []
    )
    budget = api.get(f"/tenants/{TENANT_A}/budget", "a-viewer").json()
    assert [a["threshold_percent"] for a in budget["alerts"]] == [50, 80]
    assert Decimal(budget["spend"]) == Decimal("1.80")

    roll_up(api, HOUR, 2 * HOUR)  # 3.60 of 2: the 100 % threshold, once
    fired = check_budgets(api.ctx.budget_books, applied, api.clock.utc_now(), webhook_timeout_s=1)
    assert [(a.tenant, a.threshold_percent) for a in fired] == [(TENANT_A, 100)]
    assert (
        check_budgets(api.ctx.budget_books, applied, api.clock.utc_now(), webhook_timeout_s=1) == []
    )
    assert api.get(f"/tenants/{TENANT_B}/budget").json()["alerts"] == []
