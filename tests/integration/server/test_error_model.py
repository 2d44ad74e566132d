"""The control plane and the one error model: the published OpenAPI document lists every code the
API answers with, under the status the code carries; errors from the store reach the client with
their code's status; and the background reconciler survives a failed pass and retries it."""

from __future__ import annotations

import logging
from datetime import datetime

import pytest

from gpuplex.errors import ErrorCode, StoreError
from gpuplex.server.problems import API_CODES
from gpuplex.server.run import Reconciler
from gpuplex.settings import ServerSettings
from tests.integration.server.conftest import Api, error_of

OPERATIONS = frozenset({"get", "put", "post", "delete", "patch"})


def test_every_operation_documents_every_code_the_api_answers_with(api: Api) -> None:
    document = api.client.get("/api/v1/openapi.json").json()
    operations = [
        (f"{method.upper()} {path}", operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in OPERATIONS
    ]
    assert len(operations) > 20
    for name, operation in operations:
        for code in API_CODES:
            answer = operation["responses"].get(str(code.status))
            assert answer is not None, f"{name} does not document {code.status} ({code})"
            assert f"`{code}`" in answer["description"], f"{name}: {code} under {code.status}"
            schema = answer["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorReply"}, name


def test_a_store_outage_reaches_the_client_as_its_code_says(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    def store_down(*_: object) -> None:
        raise StoreError("store sqlite:///x failed: disk I/O error; check that it is up")

    monkeypatch.setattr(api.ctx.revisions, "newest_number", store_down)
    reply = api.get("/spec")
    assert reply.status_code == ErrorCode.STORE_UNAVAILABLE.status
    assert error_of(reply)["code"] == "store_unavailable"


def test_the_reconciler_logs_a_failed_pass_and_the_next_pass_runs(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settings = ServerSettings(store_url="sqlite://", rollup_interval_s=60)
    reconciler = Reconciler(api.ctx, settings)
    real_catch_up = api.ctx.metering.catch_up
    failures = [
        StoreError("store sqlite:///x failed: database is locked"),
        KeyError("a bug"),
    ]

    def flaky_catch_up(now: datetime) -> object:
        if failures:
            raise failures.pop(0)
        return real_catch_up(now)

    monkeypatch.setattr(api.ctx.metering, "catch_up", flaky_catch_up)
    with caplog.at_level(logging.WARNING, logger="gpuplex.server"):
        reconciler.pass_once()  # the store is out: a warning, no traceback
        reconciler.pass_once()  # a bug: an error with its traceback
        reconciler.pass_once()  # back to normal
    outage, bug = caplog.records
    assert outage.levelno == logging.WARNING
    assert outage.exc_info is None
    assert "database is locked" in outage.getMessage()
    assert bug.levelno == logging.ERROR
    assert bug.exc_info is not None
    assert reconciler.checked_once  # the third pass got through to the budget check
