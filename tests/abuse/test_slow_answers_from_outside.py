"""Servers gpuplex calls that answer as slowly as they can: a budget webhook, the identity provider's
token endpoint and its discovery document, each sending its answer's head one byte every 0.1 s
for as long as gpuplex listens. Every read then gets a byte well within its stall timeout, so only a
deadline on the whole exchange ends it (gpuplex.http_client's `deadline_s`). Before one HTTP
client, urllib's timeout was per read: each of these calls waited for as long as the bytes kept
coming (an hour and more before a 64 KiB header line ran out), holding the roll-up pass's thread,
or a sign-in's provider lane, all that time.

The bounds asserted are generous (many times each deadline): what is checked is that the call
ends, not how fast the machine is."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from gpuplex.core.report.enforcement import BudgetAction
from gpuplex.core.spec.auth import OidcSpec
from gpuplex.errors import IdentityProviderUnavailable
from gpuplex.oidc.keys import ANSWER_DEADLINE_S, fetch_json
from gpuplex.server.budget_alerts import BudgetView, post_webhook
from gpuplex.server.oidc_code_flow import exchange_code
from gpuplex.store.budgets import BudgetAlert, Enforcement
from tests.raw_server import raw_server

#: How long a dripping server would go on: far past every deadline below.
DRIP_FOR_S = 600.0


@pytest.fixture
def dripping_url() -> Iterator[str]:
    """A server that answers every request with a head that never ends, a byte every 0.1 s."""
    stop = threading.Event()

    def drip(connection: socket.socket) -> None:
        connection.recv(65536)
        connection.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        ends = time.monotonic() + DRIP_FOR_S
        while not stop.is_set() and time.monotonic() < ends:
            connection.sendall(b"a")
            stop.wait(0.1)

    with raw_server(drip) as url:
        yield url
        stop.set()


def seconds(call: Callable[[], object]) -> float:
    started = time.monotonic()
    call()
    return time.monotonic() - started


def test_a_webhook_that_drips_its_answer_holds_the_budget_pass_only_to_its_timeout(
    dripping_url: str,
) -> None:
    now = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
    alert = BudgetAlert("acme", now, 100, Decimal("2"), Decimal("1"), now)
    view = BudgetView(
        "acme", "", "set", Decimal("1"), "USD", "month", Decimal("2"), Decimal("9"), None,
        (100,), dripping_url, Enforcement(), BudgetAction.ALERT, [alert],
    )  # fmt: skip
    delivered: list[bool] = []
    took = seconds(lambda: delivered.append(post_webhook(dripping_url, alert, view, 1.0)))
    assert delivered == [False]  # logged as failed, never fatal
    assert took < 20  # its timeout is 1 s; the server would drip for 600


def test_a_token_endpoint_that_drips_ends_a_sign_in_at_the_deadline(dripping_url: str) -> None:
    oidc = OidcSpec(issuer=dripping_url, client_id="dashboard")

    def sign_in() -> None:
        with pytest.raises(IdentityProviderUnavailable, match="timed out"):
            exchange_code(
                f"{dripping_url}/token",
                oidc,
                code="c",
                redirect_uri="http://127.0.0.1/auth/callback",
                code_verifier="v" * 43,
            )

    assert seconds(sign_in) < 60  # the exchange's deadline is 5 s


def test_a_discovery_document_that_drips_is_given_up_at_the_deadline(dripping_url: str) -> None:
    def discover() -> None:
        with pytest.raises(IdentityProviderUnavailable, match="timed out"):
            fetch_json(f"{dripping_url}/.well-known/openid-configuration")

    assert seconds(discover) < 10 * ANSWER_DEADLINE_S
