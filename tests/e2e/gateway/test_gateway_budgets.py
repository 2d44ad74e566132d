"""Budgets enforced by the real gateway: a tenant (or a key name) whose budget's action is `block`
gets 402 budget_exceeded within one roll-up window (plus one roll-up pass and the gateway's refresh)
of its spend crossing the budget, and is served again as soon as the budget is raised. A key cannot
escape its key-name budget by being revoked and created again under the same name. A throttled
tenant is held to its budget's rate with 429 budget_throttled and Retry-After.

The control plane's reconciler runs in this process with a 2 s roll-up window; the gateway runs as
`gpuplex gateway` on the store's applied revision, as in production."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

import httpx
import pytest

from gpuplex.clock import SYSTEM_CLOCK
from gpuplex.core.report.enforcement import BudgetAction
from gpuplex.core.spec import RateLimits
from gpuplex.server.budget_enforcement import enforce_budgets
from gpuplex.server.context import ServerContext
from gpuplex.server.run import Reconciler
from gpuplex.server.spec_apply import apply
from gpuplex.settings import ServerSettings
from gpuplex.store.budgets import Enforcement
from gpuplex.store.db import open_store
from tests.e2e.gateway.load import chat_body
from tests.e2e.gateway.stack import Gateway, Stack, free_port, stack, wait_for_key

__all__ = ["stack"]

pytestmark = [pytest.mark.slow, pytest.mark.lane]

WINDOW_S = 2
PASS_S = 0.5
#: After spend crosses: the usage mover (1 s), the window's end (WINDOW_S), a roll-up pass
#: (PASS_S), the gateway's refresh (0.5 s), and a second of slack for a loaded machine.
REFUSED_WITHIN_S = 1 + WINDOW_S + PASS_S + 0.5 + 1.0
#: A token costs a cent: each request of ~20 completion tokens and a short prompt costs ~0.30.
SPEC = """
fleet:
  nodes: [{{name: n1, gpus: [{{model: H100-80GB, count: 1}}]}}]
tenants:
  - name: acme
    isolation: mps
    requirement: moderate
    workloads:
      - name: chat
        gpu: {{memory_gib: 20}}
        serve: {{model: llm, port: 9100}}
pricing:
  tokens_per_million: {{llm: {{prompt: 10000, completion: 10000}}}}
gateway:
  port: {gateway_port}
  backends:
    acme/chat: ["http://127.0.0.1:{sim_port}"]
"""


@dataclass
class Budgeted:
    ctx: ServerContext
    gateway: Gateway
    stack: Stack

    def key(self, name: str) -> str:
        secret, _ = self.ctx.keys.create(
            "acme", name, [], None, RateLimits(), datetime.now(UTC), "test"
        )
        wait_for_key(self.gateway.url, secret)
        return secret

    def block(
        self, amount: str, key_name: str = "", action: BudgetAction = BudgetAction.BLOCK
    ) -> None:
        """Set a budget as a platform admin would (the API does the same, then decides)."""
        self.ctx.budgets.set(
            "acme",
            Decimal(amount),
            "USD",
            now=datetime.now(UTC),
            actor="platform-admin",
            key_name=key_name,
            enforcement=Enforcement(action, throttle_requests_per_min=1, locked=True),
        )
        applied = self.ctx.current.get()
        assert applied is not None
        enforce_budgets(self.ctx.budget_books, applied, datetime.now(UTC))

    def send(self, key: str) -> httpx.Response:
        return httpx.post(
            f"{self.gateway.url}/v1/chat/completions",
            content=chat_body("llm", 20),
            headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
            timeout=10,
        )

    def spent(self) -> Decimal:
        """What the tenant has spent by the usage records in the store (a cent a token)."""
        records = self.stack.usage().records(tenant="acme")
        tokens = sum(r.prompt_tokens + r.completion_tokens for r in records)
        return Decimal(tokens) / 100

    def until_refused(self, key: str, budget: Decimal, timeout_s: float = 40) -> float:
        """Send until a 402; returns how long after the spend crossed `budget` it came."""
        crossed_at: float | None = None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            reply = self.send(key)
            if reply.status_code == 402:
                assert crossed_at is not None, "refused before the budget was reached"
                error = reply.json()["error"]
                assert error["code"] == "budget_exceeded"
                assert f"{budget:.2f} USD" in error["message"]
                return time.monotonic() - crossed_at
            assert reply.status_code == 200, reply.text
            if crossed_at is None:
                time.sleep(1.2)  # the mover moves the record within a second
                if self.spent() >= budget:
                    crossed_at = time.monotonic() - 1.2
            time.sleep(0.1)
        raise AssertionError(f"never refused\n{self.gateway.log()}")

    def until_served(self, key: str, timeout_s: float = 3) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self.send(key).status_code == 200:
                return time.monotonic() - started
            time.sleep(0.05)
        raise AssertionError(f"not served again within {timeout_s} s")


@pytest.fixture
def budgeted(stack: Stack) -> Iterator[Budgeted]:
    sim_port = stack.sim(["llm"])
    gateway_port = free_port()
    engine = open_store(stack.store_url)
    ctx = ServerContext.open(engine, SYSTEM_CLOCK, rollup_window_s=WINDOW_S)
    apply(
        ctx.spec_history, SPEC.format(gateway_port=gateway_port, sim_port=sim_port), 0, actor="test"
    )
    gateway = Gateway(None, stack.store_url, stack.tmp / "spool", gateway_port)
    stack.gateways.append(gateway)
    gateway.start()
    reconciler = Reconciler(ctx, ServerSettings(stack.store_url, rollup_interval_s=PASS_S))
    reconciler.start()
    try:
        yield Budgeted(ctx, gateway, stack)
    finally:
        reconciler.stopping.set()
        reconciler.join(10)
        engine.dispose()


def test_a_blocked_tenant_is_refused_within_a_window_and_served_once_the_budget_is_raised(
    budgeted: Budgeted,
) -> None:
    key = budgeted.key("ci")
    budgeted.block("1.00")
    assert budgeted.until_refused(key, Decimal("1.00")) <= REFUSED_WITHIN_S
    budgeted.block("1000.00")  # raised: lifted at once, not at the next roll-up
    assert budgeted.until_served(key) < 1.5
    actions = [e.action for e in budgeted.ctx.audit.entries(tenant="acme")]
    assert "budget.enforce" in actions
    assert "budget.lift" in actions


def test_a_blocked_key_name_stays_blocked_when_recreated_and_other_keys_go_on(
    budgeted: Budgeted,
) -> None:
    ci, web = budgeted.key("ci"), budgeted.key("web")
    budgeted.block("0.50", key_name="ci")
    assert budgeted.until_refused(ci, Decimal("0.50")) <= REFUSED_WITHIN_S
    assert budgeted.send(web).status_code == 200  # the tenant itself is not blocked
    for key in budgeted.ctx.keys.list("acme"):
        if key.name == "ci":
            budgeted.ctx.keys.revoke(key.prefix, datetime.now(UTC), "tenant-admin")
    again = budgeted.key("ci")
    reply = budgeted.send(again)
    assert reply.status_code == 402, reply.text
    assert reply.json()["error"]["code"] == "budget_exceeded"
    budgeted.block("1000.00", key_name="ci")
    assert budgeted.until_served(again) < 1.5


def test_a_throttled_tenant_gets_one_request_a_minute_then_429_budget_throttled(
    budgeted: Budgeted,
) -> None:
    key = budgeted.key("ci")
    assert budgeted.send(key).status_code == 200
    budgeted.block("0.01", action=BudgetAction.THROTTLE)
    deadline = time.monotonic() + REFUSED_WITHIN_S  # once the request's window is rolled up
    while not budgeted.ctx.enforcement.current() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [e.action for e in budgeted.ctx.enforcement.current()] == [BudgetAction.THROTTLE]
    time.sleep(1.0)  # the gateway's refresh
    statuses = [budgeted.send(key) for _ in range(3)]
    codes = [r.status_code for r in statuses]
    assert codes.count(429) >= 2, codes  # 1 request a minute: at most one more gets through
    refused = next(r for r in statuses if r.status_code == 429)
    assert refused.json()["error"]["code"] == "budget_throttled"
    assert "0.01 USD" in refused.json()["error"]["message"]
    assert int(refused.headers["retry-after"]) >= 1
    budgeted.block("1000.00", action=BudgetAction.THROTTLE)
    assert budgeted.until_served(key) < 1.5
