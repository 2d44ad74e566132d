from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuplex.host.cgroups import Cgroups
from tests.integration.host.hostrun import Host, host_fixture


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    yield from host_fixture(tmp_path)


@pytest.fixture
def cgroups() -> Cgroups:
    """This host's real cgroups: skipped where there are none, unless GPUPLEX_REQUIRE_CGROUPS=1
    (CI), where that is a failure."""
    found = Cgroups.detect()
    if found is None:
        reason = Cgroups.unavailable_reason()
        if os.environ.get("GPUPLEX_REQUIRE_CGROUPS") == "1":
            pytest.fail(f"GPUPLEX_REQUIRE_CGROUPS=1 but: {reason}")
        pytest.skip(reason)
    return found
