"""schemathesis against the published OpenAPI, as a platform admin and as a tenant viewer, with
valid and with invalid inputs: no generated request gets a 5xx, and every answer has a status the
schema documents, its content type, and a body that matches the schema. Examples are few and
derandomized, so a run is reproducible and stays within a minute."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from sqlalchemy import Engine

from tests.integration.server.conftest import Api, make_api
from tests.integration.store.conftest import new_sqlite_store, store_templates

__all__ = ["new_sqlite_store", "store_templates"]  # fixtures

pytestmark = pytest.mark.slow

#: Examples per operation, caller and mode: enough for odd numbers, text and dates on each field
#: (derandomized, so every run tries the same ones; 12 keeps the suite inside its time budget).
EXAMPLES = 12
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def fuzz_operation(api: Api, operation: Any, caller: str, mode: GenerationMode) -> str | None:
    """Run one operation's examples; the first failure's text, or None."""
    headers = api.headers(caller)

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        response = case.call(headers=headers)
        case.validate_response(response, checks=CHECKS, headers=headers)

    try:
        run()
    except Exception as failure:  # every operation is tried; the failures are reported together
        return f"{operation.label} ({mode.value}): {failure}"
    return None


@pytest.fixture
def sqlite_engine(tmp_path: Path, new_sqlite_store: Callable[[Path], Engine]) -> Iterator[Engine]:
    """One backend is enough here: the store's own tests cover both, the API tests too."""
    engine = new_sqlite_store(tmp_path / "fuzz.db")
    try:
        yield engine
    finally:
        engine.dispose()


@pytest.mark.parametrize("caller", ["admin", "a-viewer"])
def test_no_generated_request_gets_a_server_error_or_an_undocumented_answer(
    sqlite_engine: Engine, tmp_path: Path, caller: str
) -> None:
    api = make_api(sqlite_engine, tmp_path)
    schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", api.client.app)
    failures = []
    operations = 0
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operation = result.ok()
        operations += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            failure = fuzz_operation(api, operation, caller, mode)
            if failure is not None:
                failures.append(failure)
    assert operations >= 20
    assert failures == [], "\n\n".join(failures)
