from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.host.hostrun import Host, host_fixture


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    yield from host_fixture(tmp_path)
