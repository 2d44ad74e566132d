"""The client flows' tests share a token endpoint on loopback (token_endpoint.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tests.unit.client.token_endpoint import TokenEndpoint


@pytest.fixture
def endpoint() -> Iterator[TokenEndpoint]:
    found = TokenEndpoint()
    thread = threading.Thread(target=found.server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield found
    found.server.shutdown()
    found.server.server_close()
