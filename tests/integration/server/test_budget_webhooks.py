"""Budget webhooks for real: an alert is POSTed as JSON to a receiver on loopback, once; a webhook
that does not answer costs nothing but a log line; and only platform admins aim webhooks, since
the server POSTs from inside the operator's network."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gpuplex.server.budget_alerts import check_budgets
from tests.integration.server.conftest import TENANT_A, Api, error_of
from tests.integration.server.test_usage_api import HOUR, roll_up


class Receiver:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        received = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["content-length"])
                received.append(json.loads(self.rfile.read(length)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/budget"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    thread = threading.Thread(target=found.server.serve_forever, daemon=True)
    thread.start()
    yield found
    found.server.shutdown()
    found.server.server_close()


def _overspend(api: Api, webhook_url: str) -> None:
    reply = api.put(
        f"/tenants/{TENANT_A}/budget",
        json={"amount": "1", "thresholds_percent": [100], "webhook_url": webhook_url},
    )
    assert reply.status_code == 200, reply.text
    api.clock.advance(3 * HOUR)
    roll_up(api, timedelta(0), HOUR)  # A spends 1.80 of 1


def test_an_alert_is_posted_to_the_webhook_once(api: Api, receiver: Receiver) -> None:
    _overspend(api, receiver.url)
    applied = api.ctx.current.get()
    assert applied is not None

    check_budgets(api.ctx.budget_books, applied, api.clock.utc_now(), webhook_timeout_s=5)
    check_budgets(api.ctx.budget_books, applied, api.clock.utc_now(), webhook_timeout_s=5)

    assert len(receiver.bodies) == 1
    alert = receiver.bodies[0]
    assert alert["event"] == "budget.threshold_crossed"
    assert (alert["tenant"], alert["threshold_percent"]) == (TENANT_A, 100)
    assert (alert["spend"], alert["budget"]) == ("1.80", "1")
    # the projection, and the window its run rate was measured over: A's first hour
    assert alert["projection_window_start"].startswith("2026-03-10T12:00:00")
    assert alert["projection_window_end"].startswith("2026-03-10T13:00:00")
    assert float(alert["projected_spend"]) > 900  # 1.80 an hour for the rest of March


def test_a_dead_webhook_does_not_stop_the_alert(api: Api, receiver: Receiver) -> None:
    dead = receiver.url
    receiver.server.shutdown()
    receiver.server.server_close()
    _overspend(api, dead)
    applied = api.ctx.current.get()
    assert applied is not None

    fired = check_budgets(api.ctx.budget_books, applied, api.clock.utc_now(), webhook_timeout_s=1)

    assert [a.threshold_percent for a in fired] == [100]
    assert api.get("/audit").json()["items"][0]["action"] == "budget.alert"


def test_only_platform_admins_aim_webhooks_and_tenant_updates_keep_them(api: Api) -> None:
    refused = api.put(
        f"/tenants/{TENANT_A}/budget",
        "a-admin",
        json={"amount": "5", "webhook_url": "http://169.254.169.254/latest/meta-data"},
    )
    assert refused.status_code == 403
    assert error_of(refused)["field"] == "webhook_url"
    assert api.ctx.budgets.get(TENANT_A) is None

    api.put(
        f"/tenants/{TENANT_A}/budget",
        json={"amount": "5", "webhook_url": "https://hooks.example/team-a"},
    )
    updated = api.put(f"/tenants/{TENANT_A}/budget", "a-admin", json={"amount": "7"})

    assert updated.status_code == 200, updated.text
    assert updated.json()["webhook"] is True
    stored = api.ctx.budgets.get(TENANT_A)
    assert stored is not None
    assert (str(stored.amount), stored.webhook_url) == ("7", "https://hooks.example/team-a")


def test_a_tenant_admin_cannot_drop_the_webhook_by_deleting_the_budget(api: Api) -> None:
    api.put(
        f"/tenants/{TENANT_A}/budget",
        json={"amount": "5", "webhook_url": "https://hooks.example/team-a"},
    )
    refused = api.delete(f"/tenants/{TENANT_A}/budget", "a-admin")
    assert refused.status_code == 403
    assert error_of(refused)["code"] == "forbidden"
    assert "webhook" in error_of(refused)["message"]
    api.put(f"/tenants/{TENANT_A}/budget", "a-admin", json={"amount": "7"})  # then a fresh PUT
    stored = api.ctx.budgets.get(TENANT_A)
    assert stored is not None
    assert stored.webhook_url == "https://hooks.example/team-a"
    assert api.delete(f"/tenants/{TENANT_A}/budget").status_code == 200  # a platform admin may


def test_a_tenant_admin_deletes_a_budget_without_a_webhook(api: Api) -> None:
    api.put(f"/tenants/{TENANT_A}/budget", "a-admin", json={"amount": "5"})
    assert api.delete(f"/tenants/{TENANT_A}/budget", "a-admin").status_code == 200
    assert api.ctx.budgets.get(TENANT_A) is None
