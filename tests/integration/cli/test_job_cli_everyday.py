"""`gpuplex job` as users hit it every day, against a real control plane (test_job_cli's): an
unbalanced quote in `--command` is one line and exit 2, not a traceback; a platform admin's
misspelt tenant gets the closest name; `job show`, `logs` and `cancel` need no `--tenant` for a
platform admin, while a tenant's token still gets one 404 for another tenant's job and a missing
one; `job list` says why each queued job waits now, as `job show` does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplex.error_codes import EXIT_BAD_INPUT, ErrorCode
from tests.integration.cli.test_job_cli import Running, control_plane, job
from tests.integration.server.conftest import TENANT_A, TENANT_B

# The store tests' engine fixture, shared, not copied.
from tests.integration.store.conftest import engine, store_templates

__all__ = ["control_plane", "engine", "store_templates"]

NOT_FOUND = ErrorCode.NOT_FOUND.exit_code


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    """A new SQLite store: these check the CLI and the API's answers, which do not depend on the
    store's backend (test_job_cli runs the same paths on PostgreSQL too)."""
    return f"sqlite:///{tmp_path / 'state' / 'gpuplex.db'}"


def _submit(running: Running, caller: str, *args: str, memory_gib: str = "5") -> str:
    done = job("submit", "--gpu-memory-gib", memory_gib, "--command", "sleep 60", "-o", "json",
               *args, env=running.env(caller))  # fmt: skip
    assert done.returncode == 0, done.stderr
    job_id: str = json.loads(done.stdout)["id"]
    return job_id


def test_an_unbalanced_quote_in_the_command_is_one_line_and_exit_2(control_plane: Running) -> None:
    for command, what in (
        ('python "train.py --epochs 3', "a quote is not closed"),
        ("python train.py \\", "ends with a backslash"),
    ):
        done = job("submit", "--gpu-memory-gib", "1", "--command", command,
                   env=control_plane.env("a-admin"))  # fmt: skip
        assert done.returncode == EXIT_BAD_INPUT, done.stderr
        assert "Traceback" not in done.stderr
        assert done.stderr.count("\n") == 1, done.stderr  # one line
        assert done.stderr.startswith("error: the flags: --command: cannot split"), done.stderr
        assert what in done.stderr
    listed = job("list", "-o", "json", env=control_plane.env("a-admin"))
    assert json.loads(listed.stdout) == []  # nothing was sent


def test_a_platform_admins_misspelt_tenant_gets_the_closest_name(control_plane: Running) -> None:
    admin = control_plane.env("admin")
    misspelt = TENANT_A.replace("alpha", "alfa")
    hint = f'no tenant {misspelt!r} (did you mean "{TENANT_A}"?)'
    listed = job("list", misspelt, env=admin)
    assert listed.returncode == NOT_FOUND
    assert hint in listed.stderr
    submitted = job("submit", "--tenant", misspelt, "--gpu-memory-gib", "1", "--command", "x",
                    env=admin)  # fmt: skip
    assert submitted.returncode == NOT_FOUND
    assert hint in submitted.stderr
    shown = job("show", "j00000000", "--tenant", misspelt, env=admin)
    assert hint in shown.stderr
    # a tenant's own caller is never told another tenant's name
    viewer = job("list", TENANT_B.replace("bravo", "brav"), env=control_plane.env("a-viewer"))
    assert viewer.returncode == NOT_FOUND
    assert "did you mean" not in viewer.stderr
    assert TENANT_B not in viewer.stderr


def test_show_logs_and_cancel_need_no_tenant_for_a_platform_admin(control_plane: Running) -> None:
    job_id = _submit(control_plane, "a-admin")
    admin = control_plane.env("admin")
    shown = job("show", job_id, "-o", "json", env=admin)
    assert shown.returncode == 0, shown.stderr
    body = json.loads(shown.stdout)
    assert (body["id"], body["tenant"], body["state"]) == (job_id, TENANT_A, "queued")
    assert body["waiting_reason"]
    logs = job("logs", job_id, env=admin)
    assert logs.returncode == 0, logs.stderr
    assert "no output yet" in logs.stdout
    cancelled = job("cancel", job_id, env=admin)
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"{job_id}: cancelled" in cancelled.stdout
    # the tenant's own token finds it too
    own = job("show", job_id, env=control_plane.env("a-viewer"))
    assert own.returncode == 0, own.stderr
    assert "cancelled" in own.stdout


def test_a_tenant_token_gets_one_404_for_another_tenants_job_and_a_missing_one(
    control_plane: Running,
) -> None:
    theirs = _submit(control_plane, "admin", "--tenant", TENANT_B)
    viewer = control_plane.env("a-viewer")
    other = job("show", theirs, env=viewer)
    missing = job("show", "j0badcafe", env=viewer)
    assert other.returncode == missing.returncode == NOT_FOUND
    assert other.stderr == missing.stderr
    assert f"tenant {TENANT_A!r} has no job with that id" in other.stderr
    for command in ("logs", "cancel"):
        refused = job(command, theirs, env=control_plane.env("a-admin"))
        assert refused.returncode == NOT_FOUND
        assert refused.stderr == missing.stderr
    assert TENANT_B not in other.stderr


def test_job_list_says_why_each_queued_job_waits_now(control_plane: Running) -> None:
    """alphaco may hold 40 GiB of GPU memory (its replicas hold 20): the first job is admitted, the
    second (35 GiB more)
    would pass the limit; `list` says both, as `show` does for each."""
    # the control plane's clock stands still: the priority, not the submit time, orders them
    first = _submit(control_plane, "a-admin", "--priority", "1", memory_gib="10")
    second = _submit(control_plane, "a-admin", memory_gib="35")
    viewer = control_plane.env("a-viewer")
    items = {j["id"]: j for j in json.loads(job("list", "-o", "json", env=viewer).stdout)}
    for job_id in (first, second):
        shown = json.loads(job("show", job_id, "-o", "json", env=viewer).stdout)
        assert items[job_id]["waiting_reason"] == shown["waiting_reason"], job_id
    assert items[first]["waiting_reason"].startswith("admitted by the queues")
    assert items[second]["waiting_reason"] == (
        f"{TENANT_A} would pass its limit: 30 GiB of GPU memory held + 35 asked > 40"
    )
    table = job("list", env=viewer).stdout
    assert "waits: admitted by the queues" in table
    assert f"waits: {TENANT_A} would pass its limit" in table
