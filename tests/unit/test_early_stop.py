"""tests/early_stop.py: a session service stops right after the module of the last test that asks
for it, before the tests after it run; a test that asks for it later fails at its setup, saying
why. And the
`vllm` group is one block with the server's users last (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import server_users_last

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = """\
import os
import pytest
from tests import early_stop

def note(line):
    with open(os.environ["EARLY_STOP_LOG"], "a") as log:
        log.write(line + "\\n")

@pytest.fixture(scope="session")
def vllm(request):
    note("start")
    early_stop.started(request, lambda: note("stop"))
    yield "the server"
    note("session teardown")

@pytest.fixture(scope="module")
def behind(vllm):
    yield vllm
    note("module teardown")
"""

TESTS = """\
from conftest import note

def test_1(behind):
    note("test_1")

def test_2(vllm):
    note("test_2")

def test_3():
    note("test_3")
"""

LATER = """\
from conftest import note

def test_4():
    note("test_4")
"""

#: Run after early_stop's own pytest_collection_finish: test_1 (a user) moved to the end.
REORDER = """
@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    session.items.append(session.items.pop(0))
"""


def run_inner(tmp_path: Path, conftest: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    (tmp_path / "conftest.py").write_text(conftest)
    (tmp_path / "test_services.py").write_text(TESTS)
    (tmp_path / "test_then.py").write_text(LATER)
    log = tmp_path / "log"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    environment |= {"EARLY_STOP_LOG": str(log), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "pytest", "-p", "tests.early_stop", "-p", "no:cacheprovider"]
    command += ["-n", "0", "-q", str(tmp_path)]
    done = subprocess.run(  # noqa: S603 - pytest on a folder written here
        command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120
    )
    return done, log.read_text().splitlines()


def test_the_service_stops_after_its_last_user_and_its_module_and_before_the_next_test(
    tmp_path: Path,
) -> None:
    done, log = run_inner(tmp_path, CONFTEST)
    assert done.returncode == 0, done.stdout + done.stderr
    # test_3 asks for nothing, but is in the users' module: the module's fixture ends first
    assert log == [
        *("start", "test_1", "test_2", "test_3", "module teardown"),
        *("stop", "test_4", "session teardown"),
    ]


def test_a_test_run_after_the_stop_that_asks_for_the_service_fails_saying_why(
    tmp_path: Path,
) -> None:
    done, log = run_inner(tmp_path, CONFTEST + REORDER)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "vllm stopped after the module of the test collected as its last user" in done.stdout
    assert "3 passed, 1 error" in done.stdout
    assert log == ["start", "test_2", "test_3", "stop", "test_4", "session teardown"]


@dataclass(eq=False)  # items are told apart by identity, as pytest does
class Item:
    """What `server_users_last` and `group_of_item` read of a test item."""

    path: Path
    fixturenames: list[str] = field(default_factory=list)

    def get_closest_marker(self, name: str) -> None:
        return None


def test_the_vllm_group_is_one_block_where_it_began_with_the_servers_users_last() -> None:
    def item(module: str, *fixtures: str) -> Item:
        return Item(Path(module), list(fixtures))

    before = [
        item("a.py"),
        item("abuse.py", "vllm_model", "vllm"),
        item("abuse.py", "vllm_model", "vllm"),
        item("b.py"),
        item("up.py", "vllm_model"),
        item("up.py", "vllm_model"),
        item("c.py"),
        item("real.py", "vllm"),
    ]
    items = list(before)
    server_users_last(items)  # type: ignore[arg-type]
    assert [before.index(each) for each in items] == [0, 4, 5, 1, 2, 7, 3, 6]


def test_without_a_vllm_test_nothing_moves() -> None:
    items = [Item(Path("a.py")), Item(Path("b.py"))]
    before = list(items)
    server_users_last(items)  # type: ignore[arg-type]
    assert items == before


pytestmark = pytest.mark.filterwarnings("error")
