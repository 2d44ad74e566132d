"""Settings for the whole suite.

`make test` runs it on four pytest-xdist workers (`-n 4 --dist loadgroup`; two cores are enough:
with two workers the tests left the CPU idle about half the time, waiting on the processes they
start). A test that needs a worker to itself says so with a marker, and the tests of each such
marker form a group run on one worker, one test at a time:

- `lane`: tests that measure what a stack of processes does under load (the gateway's fairness
  and latency, the front door's limits) or that stall the shared Redis (`CLIENT PAUSE`);
- `stacks`: tests that check what a stack does across starts, stops and kills (the host runtime
  and `gpuplex up` against a hostile tenant, jobs end to end, the benches' own runs);
- `kube`: the `kube_real` tests, which share one Kubernetes control plane per worker;
- `vllm`: every test that asks for a real vLLM (tests/vllm_real/fixtures.py), wherever it lives,
  so that one worker starts the one server of the session; those tests may take
  VLLM_TEST_TIMEOUT_S, the first one waiting for the server to build and start.

pytest-xdist hands out the units with the most tests first, so each group starts at once, on a
worker of its own. A `lane` test and the processes it starts run at a higher CPU priority
(LANE_NICENESS) where the OS allows it (as root, as in CI): with four workers on two cores the
other three keep the CPU busy, and what a lane test measures is its stack, not its neighbours.
Everything else (unit tests, integration tests that each keep to their own temporary directory,
PostgreSQL database, Redis key prefix and cgroup instance, single CLI runs) is shared between the
workers, test by test, around the groups. Every test of a group finds its own processes by its own
state directory, never by a name another test's process could share. Run without `-n`, everything
runs in one process.

Hypothesis runs without its per-example deadline: on a loaded machine (another worker, a CI
neighbour) a slow example is not a failure; the tests assert what they check, not its speed."""

from __future__ import annotations

import contextlib
import os

import pytest
from hypothesis import settings

#: `vllm_model` and `vllm` for any test folder (tests/vllm_real/fixtures.py); the session services
#: stopped after their last test (tests/early_stop.py).
pytest_plugins = ["tests.early_stop", "tests.vllm_real.fixtures"]

settings.register_profile("gpuplex", deadline=None)
settings.load_profile("gpuplex")

#: The markers that put a test in a group of its own (see above), and the group each names.
GROUP_OF_MARKER = {"lane": "lane", "stacks": "stacks", "kube_real": "kube"}
#: The fixtures that need a real vLLM: a test that asks for one (directly or through another
#: fixture) runs in the `vllm` group, whatever its folder.
VLLM_FIXTURES = frozenset({"vllm", "vllm_model"})
#: Those tests' timeout: the first waits for the model's build and the server's start, about 100 s
#: on a quiet 2-core machine, more beside another pytest worker.
VLLM_TEST_TIMEOUT_S = 600


def group_of_item(item: pytest.Item) -> str | None:
    """`vllm` for a test that asks for a real vLLM, else the group its marker names, else None:
    shared between the workers."""
    if VLLM_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return "vllm"
    for marker, group in GROUP_OF_MARKER.items():
        if item.get_closest_marker(marker) is not None:
            return group
    return None


@pytest.hookimpl(trylast=True)  # after the folders' own markers (tests/kube_real/conftest.py)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = group_of_item(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        if group == "vllm" and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(VLLM_TEST_TIMEOUT_S))
    server_users_last(items)


def server_users_last(items: list[pytest.Item]) -> None:
    """The `vllm` group in one block where its first test was (the other tests in their order):
    first the modules none of whose tests asks for the session's vLLM server, then the others, so
    that those run one after another and the server stops after the last (tests/early_stop.py),
    and a module that starts a vLLM of its own (tests/e2e/test_up_vllm.py) does not run beside the
    session's. Modules stay whole, in their order otherwise."""
    in_group = [group_of_item(item) == "vllm" for item in items]
    if not any(in_group):
        return
    first = in_group.index(True)
    group = [item for item, grouped in zip(items, in_group, strict=True) if grouped]
    rest = [item for item, grouped in zip(items, in_group, strict=True) if not grouped]
    users = {item.path for item in group if "vllm" in getattr(item, "fixturenames", ())}
    block = sorted(group, key=lambda item: item.path in users)
    items[:] = rest[:first] + block + rest[first:]


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's worker sends its test ids to the controller
def pytest_collection_finish(session: pytest.Session) -> None:
    """Keep `--dist loadgroup` grouping on pytest 9.2. pytest-xdist (3.8) tells the controller a
    test's group by appending `@group` to its node id in the worker, through `item._nodeid`, which
    pytest 9.2 no longer reads (a node's id is the structured `item._id` now): the groups were then
    silently spread over both workers (pytest-dev/pytest-xdist#1386). Where a grouped test's id
    lacks its suffix, this appends it as pytest-xdist would; where pytest-xdist did, it does
    nothing."""
    if not getattr(session.config.option, "loadgroup", False):  # set in xdist's workers only
        return
    for item in session.items:
        names = {
            str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
            for mark in item.iter_markers("xdist_group")
        }
        suffix = "@" + "_".join(sorted(names))
        if names and not item.nodeid.endswith(suffix):
            from _pytest.nodeid import NodeId  # pytest >= 9.2, the only one that gets here

            item._id = NodeId.parse(item.nodeid + suffix)


#: The niceness a `lane` test runs at, and so every process it starts (inherited at the fork):
#: under contention Linux gives a thread at -5 about three times the CPU of one at 0. At -10
#: (nine times) the lane tests held as well, but the whole suite took 722-742 s in three runs
#: against 688 s at -5: the rest of the suite was preempted more. Raising a priority needs root
#: (or RLIMIT_NICE); elsewhere the test runs at the niceness it was given.
LANE_NICENESS = -5
#: The niceness a `lane` test's thread had before, given back when the test ends.
NICENESS_BEFORE = pytest.StashKey[int]()


def set_niceness(niceness: int) -> None:
    """This thread's niceness (Linux keeps one per thread; the tests run in the main thread), where
    the OS allows it."""
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, 0, niceness)


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures start its processes
def pytest_runtest_setup(item: pytest.Item) -> None:
    if group_of_item(item) == "lane":
        item.stash[NICENESS_BEFORE] = os.getpriority(os.PRIO_PROCESS, 0)
        set_niceness(LANE_NICENESS)


@pytest.hookimpl(trylast=True)  # after its fixtures have stopped them
def pytest_runtest_teardown(item: pytest.Item) -> None:
    if NICENESS_BEFORE in item.stash:
        set_niceness(item.stash[NICENESS_BEFORE])


#: `record_property(RESULT_TABLE, text)` in a test: the text is printed at the end of the run,
#: after the summary, also from an xdist worker (whose own output pytest does not show)
RESULT_TABLE = "result_table"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The tables the tests recorded (a measured comparison a reader of CI's log should see)."""
    for reports in list(terminalreporter.stats.values()):
        for report in reports:
            if getattr(report, "when", None) != "call":
                continue
            for name, value in getattr(report, "user_properties", ()):
                if name == RESULT_TABLE:
                    terminalreporter.write_sep("-", f"{report.nodeid}")
                    terminalreporter.write_line(str(value))
