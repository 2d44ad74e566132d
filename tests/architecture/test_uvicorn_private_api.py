"""gpuplex/http_guard.py subclasses uvicorn's private `HttpToolsProtocol` (and its
`RequestResponseCycle`): it overrides and calls methods that uvicorn does not publish, reads the
attributes they set, and replaces `data_received` without calling it. pyproject.toml pins uvicorn
to the range this was tested with; these tests fail, saying what changed, as soon as the installed
uvicorn no longer has that shape, before the front door breaks at run time.

What to do when one fails: read what uvicorn changed in the named method (its changelog and
source), carry it over into gpuplex/http_guard.py, update the tables below (`EXPECTED_METHODS`,
`EXPECTED_ATTRIBUTES`, `FINGERPRINTS`), run
tests/abuse/test_http_front_door.py and `make bench-abuse`, then set the uvicorn bound in
pyproject.toml to the versions tested and run `make lock`."""

from __future__ import annotations

import ast
import asyncio
import hashlib
import inspect
import textwrap
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from gpuplex.http_guard import GuardedHttpProtocol, Http10Cycle
from gpuplex.http_limits import HttpLimits

GUARD = Path(__file__).resolve().parents[2] / "src" / "gpuplex" / "http_guard.py"
UVICORN = version("uvicorn")
WHAT_TO_DO = (
    "gpuplex/http_guard.py relies on it: carry the change over (see this test module's text), "
    "run tests/abuse/test_http_front_door.py and `make bench-abuse`, then widen the uvicorn bound "
    "in pyproject.toml and run `make lock`"
)

#: The private methods http_guard overrides or calls, by class, with their parameters.
EXPECTED_METHODS: dict[type, dict[str, list[str]]] = {
    HttpToolsProtocol: {
        "__init__": ["self", "config", "server_state", "app_state", "_loop"],
        "connection_made": ["self", "transport"],
        "connection_lost": ["self", "exc"],
        "data_received": ["self", "data"],
        "_unset_keepalive_if_required": ["self"],
        "_should_upgrade": ["self"],
        "handle_websocket_upgrade": ["self"],
        "on_message_begin": ["self"],
        "on_url": ["self", "url"],
        "on_header": ["self", "name", "value"],
        "on_headers_complete": ["self"],
        "on_message_complete": ["self"],
        "on_response_complete": ["self"],
    },
    RequestResponseCycle: {"send": ["self", "message"]},
    FlowControl: {"pause_reading": ["self"], "resume_reading": ["self"]},
}
#: The attributes http_guard reads or sets, which the class's own methods set.
EXPECTED_ATTRIBUTES: dict[type, set[str]] = {
    HttpToolsProtocol: {"client", "transport", "loop", "cycle", "parser", "flow", "pipeline", "scope"},
    RequestResponseCycle: {
        "scope", "response_started", "response_complete", "more_body", "chunked_encoding",
        "expected_content_length",
    },
}  # fmt: skip
#: uvicorn methods whose body http_guard depends on, not only their names: `data_received` is
#: replaced without being called (its steps are repeated in GuardedHttpProtocol.data_received),
#: and Http10Cycle.send relies on how `send` frames a reply (no transfer-encoding when
#: `chunked_encoding` is already False; a body counted against `expected_content_length`).
#: The SHA-256 of each one's source, comments and layout aside (`ast.unparse`), in uvicorn 0.54.
FINGERPRINTS = {
    (HttpToolsProtocol, "data_received"): (
        "8583b7d501b5b5dddad7f37b563f35deb5ee1e6fb3d07204cbc8d1e5dc3e186f"
    ),
    (
        RequestResponseCycle,
        "send",
    ): "e4355b337add5d7cfc5db147c9bceee858e46a8d2e39126476bc679b838e7d3e",
}


def parameters(method: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(method).parameters)


def assigned_attributes(cls: type) -> set[str]:
    """The names a class's methods assign on `self`, and its class-level names."""
    names = set(dir(cls))
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(cls)))):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        names.update(
            target.attr
            for target in targets
            if isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
        )
    return names


def fingerprint(method: Callable[..., Any]) -> str:
    source = ast.unparse(ast.parse(textwrap.dedent(inspect.getsource(method))))
    return hashlib.sha256(source.encode()).hexdigest()


def relied_on(source: str, class_name: str) -> set[str]:
    """The names class `class_name` uses on `super()`, or on `self` without defining them itself
    (its own methods and the attributes its own `__init__` sets)."""
    cls = next(
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef) and node.name == class_name
    )
    methods = [node for node in cls.body if isinstance(node, ast.FunctionDef)]
    own = {method.name for method in methods}
    for method in methods:
        if method.name == "__init__":
            own.update(
                node.attr
                for node in ast.walk(method)
                if isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            )
    on_self: set[str] = set()
    on_super: set[str] = set()
    for node in ast.walk(cls):
        if not isinstance(node, ast.Attribute):
            continue
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            on_self.add(node.attr)
        elif (
            isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id == "super"
        ):
            on_super.add(node.attr)
    return (on_self - own) | on_super


def test_the_subclasses_still_derive_from_uvicorns_classes() -> None:
    assert issubclass(GuardedHttpProtocol, HttpToolsProtocol)
    assert issubclass(Http10Cycle, RequestResponseCycle)
    # Http10Cycle takes over a live cycle by `__class__` assignment and keeps a flag in its
    # `__dict__`: neither works once uvicorn's cycle declares __slots__
    assert "__slots__" not in vars(RequestResponseCycle), (
        f"uvicorn {UVICORN}: RequestResponseCycle now has __slots__. {WHAT_TO_DO}"
    )


@pytest.mark.parametrize(
    ("cls", "name", "expected"),
    [(cls, name, params) for cls, methods in EXPECTED_METHODS.items() for name, params in methods.items()],
    ids=lambda value: value.__name__ if isinstance(value, type) else None,
)  # fmt: skip
def test_each_private_method_relied_on_keeps_its_signature(
    cls: type, name: str, expected: list[str]
) -> None:
    method = getattr(cls, name, None)
    assert callable(method), f"uvicorn {UVICORN}: {cls.__name__}.{name} is gone. {WHAT_TO_DO}"
    found = parameters(method)
    assert found == expected, (
        f"uvicorn {UVICORN}: {cls.__name__}.{name} now takes ({', '.join(found)}), "
        f"was ({', '.join(expected)}). {WHAT_TO_DO}"
    )


@pytest.mark.parametrize("cls", list(EXPECTED_ATTRIBUTES), ids=lambda cls: cls.__name__)
def test_each_attribute_read_is_still_set_by_uvicorn(cls: type) -> None:
    missing = sorted(EXPECTED_ATTRIBUTES[cls] - assigned_attributes(cls))
    assert not missing, (
        f"uvicorn {UVICORN}: {cls.__name__} no longer sets {', '.join(missing)}. {WHAT_TO_DO}"
    )


@pytest.mark.parametrize(
    ("cls", "name"), list(FINGERPRINTS), ids=lambda v: getattr(v, "__name__", v)
)
def test_the_bodies_http_guard_repeats_or_relies_on_are_unchanged(cls: type, name: str) -> None:
    found = fingerprint(getattr(cls, name))
    assert found == FINGERPRINTS[(cls, name)], (
        f"uvicorn {UVICORN}: the body of {cls.__name__}.{name} changed (its fingerprint is now "
        f"{found}, to set in FINGERPRINTS once http_guard.py is updated). {WHAT_TO_DO}"
    )


def test_the_tables_name_everything_http_guard_uses_from_uvicorn() -> None:
    """A new use of a uvicorn name in http_guard.py must be added to the tables above."""
    source = GUARD.read_text()
    listed_protocol = (
        set(EXPECTED_METHODS[HttpToolsProtocol]) | EXPECTED_ATTRIBUTES[HttpToolsProtocol]
    )
    listed_cycle = (
        set(EXPECTED_METHODS[RequestResponseCycle]) | EXPECTED_ATTRIBUTES[RequestResponseCycle]
    )
    unlisted = {
        "HttpToolsProtocol": relied_on(source, "GuardedHttpProtocol") - listed_protocol,
        # __dict__: the __slots__ check above
        "RequestResponseCycle": relied_on(source, "Http10Cycle") - listed_cycle - {"__dict__"},
    }
    assert not any(unlisted.values()), (
        f"http_guard.py now uses these names of uvicorn's classes: {unlisted}. Add each to "
        "EXPECTED_METHODS (with its parameters) or EXPECTED_ATTRIBUTES"
    )


def test_the_table_check_sees_a_new_use() -> None:
    source = (
        "class GuardedHttpProtocol(HttpToolsProtocol):\n"
        "    def __init__(self, config):\n"
        "        super().__init__(config)\n"
        "        self.mine = 1\n"
        "    def on_url(self, url):\n"
        "        self.helper()\n"
        "        super().on_url(url)\n"
        "        self._new_private_hook(self.mine)\n"
        "        self.chunked_encoding = False\n"
        "    def helper(self):\n"
        "        return self.transport\n"
    )
    assert relied_on(source, "GuardedHttpProtocol") == {
        "__init__", "on_url", "_new_private_hook", "chunked_encoding", "transport",
    }  # fmt: skip


def test_a_guarded_protocol_can_still_be_built_on_uvicorns_constructor() -> None:
    """The constructor's arguments as uvicorn's server passes them (positional, then the
    partial's keywords of uvicorn_options)."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("never called")

    config = Config(app, http="httptools", ws="none")
    config.load()
    loop = asyncio.new_event_loop()
    try:
        protocol = GuardedHttpProtocol(config, ServerState(), {}, loop, limits=HttpLimits())
    finally:
        loop.close()
    missing = [
        name
        for name in ("loop", "parser", "pipeline", "transport", "flow", "cycle", "client")
        if not hasattr(protocol, name)
    ]
    assert not missing, f"uvicorn {UVICORN}: a new protocol lacks {missing}. {WHAT_TO_DO}"
