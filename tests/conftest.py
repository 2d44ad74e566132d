"""Settings for the whole suite.

`make test` runs it on two pytest-xdist workers (`-n 2 --dist loadgroup`). The tests that start
whole stacks of real processes and measure them (tests/e2e, tests/abuse, tests/kube_real), and those
that stall the shared Redis (`CLIENT PAUSE`), form one group, `lane`, that runs on one worker, one
test at a time, as they always did; the rest (pure unit tests, and integration tests that each
keep to their own temporary directory, PostgreSQL schema, Redis key prefix and cgroup instance) is
shared between the workers. Run without `-n`, everything runs in one process, as before.

Hypothesis runs without its per-example deadline: on a loaded machine (another worker, a CI
neighbour) a slow example is not a failure; the tests assert what they check, not its speed."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("gpuplex", deadline=None)
settings.load_profile("gpuplex")

TESTS = Path(__file__).resolve().parent
#: Folders and files whose tests run in the `lane` group (relative to tests/).
LANE = ("e2e", "abuse", "kube_real", "integration/gateway/test_limiter_redis.py")


def in_lane(path: Path) -> bool:
    relative = path.resolve().relative_to(TESTS).as_posix()
    return any(relative == entry or relative.startswith(f"{entry}/") for entry in LANE)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if in_lane(item.path):
            item.add_marker(pytest.mark.xdist_group("lane"))
