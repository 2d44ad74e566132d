"""The suite's costliest session services stop as soon as the last test that asks for them is done,
not at the end of the session.

The real Kubernetes control plane with Kueue (`kube_cluster`, `kueue`) and the real vLLM (`vllm`)
are session fixtures of one pytest-xdist group each (tests/conftest.py), so one worker runs all
their tests one after another, early in the run, and then goes on with other tests for the rest of
it. Idle, the control plane and Kueue took about 5 % of a core and vLLM about 3.5 % (and 3.5 GiB)
on a 2-core machine, for some 460 and 350 s of a 910 s run: CPU the other workers' tests wait for.

How: a session fixture that is one of `SERVICES` calls `started(request, stop)` with what stops
it (idempotent: its own teardown at the end of the session calls it again). Once collected, the
last test (in run order) that asks for each service is known; after the teardown of the last test
of its module (and so of the module's fixtures, which may use the service) the service is
stopped, newest first. The group's tests run in collection order on their worker (pytest-xdist sends a group as one unit), and without `-n` the
whole suite runs in that order, so no later test asks for a stopped service; if one ever does (a
plugin that reorders tests), it fails at its setup saying so, rather than reaching a dead server.

tests/conftest.py orders the `vllm` group so that the tests that ask for the server come last,
one after another: those that only need the model files (tests/e2e/test_up_vllm.py starts vLLM
through `gpuplex up`) run before the session's server is started, not beside it."""

from __future__ import annotations

from collections.abc import Callable, Generator

import pytest

#: The session fixtures stopped after their last test.
SERVICES = ("kube_cluster", "kueue", "vllm")

_stop_point = pytest.StashKey[dict[str, pytest.Item]]()
_running = pytest.StashKey[dict[str, Callable[[], object]]]()
_stopped = pytest.StashKey[set[str]]()


def started(request: pytest.FixtureRequest, stop: Callable[[], object]) -> None:
    """`request.fixturename` (one of SERVICES) is running; `stop` stops it (may be called again)."""
    name = request.fixturename
    assert name in SERVICES, f"{name} is not one of {SERVICES}"
    request.config.stash.setdefault(_running, {})[name] = stop


def stop_points(items: list[pytest.Item]) -> dict[str, pytest.Item]:
    """For each service some test asks for (directly or through another fixture): the last test of
    the module of the last such test in `items`, after which that module's fixtures (which may
    use the service in their teardown) are done."""
    last_user = {
        name: at
        for at, item in enumerate(items)
        for name in SERVICES
        if name in getattr(item, "fixturenames", ())
    }
    points: dict[str, pytest.Item] = {}
    for name, end in last_user.items():
        module = items[end].path
        while end + 1 < len(items) and items[end + 1].path == module:
            end += 1
        points[name] = items[end]
    return points


def pytest_collection_finish(session: pytest.Session) -> None:
    session.config.stash[_stop_point] = stop_points(session.items)


def pytest_runtest_setup(item: pytest.Item) -> None:
    stopped = item.config.stash.get(_stopped, set())
    asked = stopped.intersection(getattr(item, "fixturenames", ()))
    if asked:
        pytest.fail(
            f"{', '.join(sorted(asked))} stopped after the module of the test collected as its "
            "last user (tests/early_stop.py), and this test, run later, asks for it: the tests "
            "ran in an order other than the one collected"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    yield  # the test's own teardown first: module fixtures that use the service end before it
    points = item.config.stash.get(_stop_point, {})
    running = item.config.stash.get(_running, {})
    for name in reversed(list(running)):  # newest first: Kueue before its control plane
        if points.get(name) is item:
            running.pop(name)()
            item.config.stash.setdefault(_stopped, set()).add(name)
