"""The one error model: every code carries a status, an exit code and whether a retry helps; a code
cannot be declared without them; the docs list every code as the enum declares it; and both APIs
render a code with the status it carries (the gateway's one rule: 422 is 400, as OpenAI does)."""

from __future__ import annotations

import http
import re
from pathlib import Path

import orjson
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from gpuplex.error_codes import CodeWithAnswers
from gpuplex.errors import ErrorCode, GpuplexError, SpecError, SpecProblem, StoreError
from gpuplex.gateway.api_errors import GATEWAY_CODES, ApiError, error_body, openai_status
from gpuplex.http_limits import FRONT_DOOR_CODES, plain_error_body, reply_bytes
from gpuplex.server.problems import API_CODES, ApiProblem, install_handlers

DOCS = Path(__file__).resolve().parents[2] / "docs"
CODE = re.compile(r"`([a-z_]+)`")


def table_after(document: str, heading: str) -> list[list[str]]:
    """The cells of the first table after `heading`, without its header and separator rows."""
    lines = document[document.index(heading) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def statuses_in(document: str, heading: str) -> dict[str, int]:
    """code -> status, from a docs table whose rows are `| codes | status (words) |`."""
    found: dict[str, int] = {}
    for codes, status, *_ in table_after(document, heading):
        number = int(re.match(r"\d+", status).group())  # type: ignore[union-attr]
        for code in CODE.findall(re.sub(r"\(.*?\)", "", codes)):  # not the settings in brackets
            assert code not in found, f"{code} is in the table twice"
            found[code] = number
    return found


def test_every_code_has_an_error_status_an_exit_code_and_a_retryability() -> None:
    assert len(ErrorCode) >= 50
    for code in ErrorCode:
        assert 400 <= http.HTTPStatus(code.status).value <= 599, code
        assert 1 <= code.exit_code <= 255, code
        assert isinstance(code.retryable, bool), code
        assert str(code) == code.value, code
        assert re.fullmatch("[a-z_]+", code.value), code


def test_wire_strings_are_unique() -> None:
    assert len({str(code) for code in ErrorCode}) == len(ErrorCode)


def test_a_code_declared_without_its_status_exit_code_and_retryability_is_refused() -> None:
    with pytest.raises(TypeError):

        class OnlyAString(CodeWithAnswers):
            NEW_CODE = "new_code"

    with pytest.raises(TypeError):

        class NoRetryability(CodeWithAnswers):
            NEW_CODE = "new_code", 409, 1


def test_a_code_with_a_status_that_is_not_an_error_is_refused() -> None:
    with pytest.raises(ValueError, match="not an error status"):

        class Success(CodeWithAnswers):
            NEW_CODE = "new_code", 200, 1, False

    with pytest.raises(ValueError, match="exit code 0"):

        class ExitsClean(CodeWithAnswers):
            NEW_CODE = "new_code", 500, 0, False


def test_an_error_takes_its_exit_code_status_and_retryability_from_its_code() -> None:
    outage = StoreError("store sqlite:///x failed")
    assert (outage.status, outage.exit_code, outage.retryable) == (503, 1, True)
    bad_spec = SpecError("gpuplex.yaml", [SpecProblem(("tenants",), "must not be empty")])
    assert (bad_spec.status, bad_spec.exit_code, bad_spec.retryable) == (422, 2, False)
    assert GpuplexError("unclassified").code is ErrorCode.INTERNAL


def test_the_architecture_table_lists_every_code_as_the_enum_declares_it() -> None:
    rows = table_after((DOCS / "architecture.md").read_text(), "## Errors: one model")
    documented = {}
    for code, status, exit_code, retry, meaning in rows:
        (name,) = CODE.findall(code)
        retryable = {"yes": True, "no": False}[retry]
        documented[name] = (int(status.split()[0]), int(exit_code), retryable)
        assert meaning, name
    declared = {str(c): (c.status, c.exit_code, c.retryable) for c in ErrorCode}
    assert documented == declared


def test_the_control_plane_docs_list_every_code_it_answers_with_its_status() -> None:
    documented = statuses_in((DOCS / "control-plane.md").read_text(), "Every error has one shape")
    answered = {str(c): c.status for c in (*API_CODES, *FRONT_DOOR_CODES)}
    assert documented == answered


def test_the_gateway_docs_list_every_code_it_answers_with_its_status() -> None:
    documented = statuses_in((DOCS / "gateway.md").read_text(), "## Errors")
    answered = {str(c): openai_status(c) for c in (*GATEWAY_CODES, *FRONT_DOOR_CODES)}
    assert documented == answered


@pytest.mark.parametrize("code", GATEWAY_CODES, ids=str)
def test_the_gateway_renders_each_code_with_its_status_and_openai_type(code: ErrorCode) -> None:
    error = ApiError(code, "what happened", param="model")
    expected = 400 if code.status == 422 else code.status
    assert error.status == expected
    assert isinstance(error, GpuplexError)
    assert error.code is code
    body = orjson.loads(error.body())["error"]
    assert body == {
        "message": "what happened",
        "type": body["type"],
        "param": "model",
        "code": str(code),
    }
    kinds = {401: "authentication_error", 429: "rate_limit_error"}
    default = "server_error" if expected >= 500 else "invalid_request_error"
    assert body["type"] == kinds.get(expected, default)


def test_the_gateway_answers_an_invalid_request_with_400_as_openai_does() -> None:
    assert ErrorCode.INVALID_REQUEST.status == 422
    assert ApiError(ErrorCode.INVALID_REQUEST, "messages: required").status == 400


@pytest.mark.parametrize("code", FRONT_DOOR_CODES, ids=str)
def test_the_front_door_answers_each_code_with_its_status_in_both_formats(code: ErrorCode) -> None:
    for body_of in (plain_error_body, error_body):
        reply = reply_bytes(body_of, code, "refused")
        head, body = reply.split(b"\r\n\r\n", 1)
        assert head.startswith(f"HTTP/1.1 {code.status} ".encode())
        assert orjson.loads(body)["error"]["code"] == str(code)


def refusing_app(error: Exception) -> TestClient:
    app = FastAPI()
    install_handlers(app)

    @app.get("/fail")
    def fail() -> None:
        raise error

    return TestClient(app, raise_server_exceptions=False)


@pytest.mark.parametrize("code", API_CODES, ids=str)
def test_the_control_plane_renders_each_code_with_its_status(code: ErrorCode) -> None:
    reply = refusing_app(ApiProblem(code, "what happened", field="name")).get("/fail")
    assert reply.status_code == code.status
    assert reply.json() == {
        "error": {"code": str(code), "message": "what happened", "field": "name"}
    }
    assert ("www-authenticate" in reply.headers) == (code is ErrorCode.UNAUTHENTICATED)


def test_the_control_plane_renders_any_gpuplex_error_by_its_code() -> None:
    reply = refusing_app(StoreError("store sqlite:///x failed; check it")).get("/fail")
    assert reply.status_code == 503
    assert reply.json() == {
        "error": {"code": "store_unavailable", "message": "store sqlite:///x failed; check it"}
    }


def test_the_control_plane_answers_a_bug_with_internal_error_and_no_detail() -> None:
    reply = refusing_app(KeyError("secret detail")).get("/fail")
    assert reply.status_code == 500
    assert reply.json()["error"]["code"] == "internal_error"
    assert "secret" not in reply.text


def test_the_control_plane_gives_starlettes_own_refusals_a_code_with_their_status() -> None:
    client = refusing_app(KeyError("unused"))
    missing = client.get("/nothing-here")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "not_found")
    wrong_method = client.post("/fail")
    assert (wrong_method.status_code, wrong_method.json()["error"]["code"]) == (
        405,
        "method_not_allowed",
    )
