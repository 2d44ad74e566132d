"""The host abuse tests drive real `gpuplex host ...` processes on this machine's cgroups, with the
integration tests' fixtures; `other_host` is a second instance (state directory) beside `host`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.host.conftest import cgroups, host
from tests.integration.host.hostrun import Host, host_fixture

__all__ = ["cgroups", "host", "other_host"]


@pytest.fixture
def other_host(tmp_path: Path) -> Iterator[Host]:
    yield from host_fixture(tmp_path / "other")
