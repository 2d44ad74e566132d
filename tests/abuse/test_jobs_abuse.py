"""A tenant who reads docs/jobs.md and tries to get around the jobs API, and an operator who reads
what a tenant wrote: the control plane's real app and store (SQLite and PostgreSQL), every caller
with a real token. Each test is one attack; docs/security.md#jobs lists them with what holds.

1. Another tenant's job: never seen, cancelled or read, by guessed ids, by a path naming another
   tenant, by a job file naming another tenant, by ids with path characters; a job that is
   another tenant's and one that does not exist get the same 404.
2. Limits: a tenant's jobs not finished are capped (`queues: max_active_jobs`, 429
   `too_many_jobs`), even for submits that race; a job file's env, command, image and name are
   bounded; the front door bounds the route's body in size and time.
3. Secrets: a job's env values are in no audit entry and no server log line, and a viewer sees
   their names only.
4. Logs: read only from the job's own plain files (no link, FIFO or hard link is followed),
   bounded in lines, bytes and line length; a viewer reads their own tenant's only.
5. Priority orders a tenant's own jobs: across tenants it neither jumps the queue nor preempts
   work inside another tenant's guarantee.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from sqlalchemy import Engine
from starlette.types import Message

from gpuplex.core.jobs.states import JobState
from gpuplex.core.queues.admission import Holding, QueuedJob, admit
from gpuplex.core.queues.tree import QueueNode, QueueTree
from gpuplex.core.spec.jobs import JobSpec
from gpuplex.core.spec.queues import JobCaps
from gpuplex.core.spec.quota_kinds import GPU_MEMORY_GIB
from gpuplex.errors import TooManyJobsError
from gpuplex.host.log_tail import CUT, MAX_LINE_CHARS, MAX_LOG_BYTES
from gpuplex.host.logs import log_paths
from gpuplex.server.app import create_app
from gpuplex.server.body_guard import BodyGuard
from gpuplex.store import jobs as jobs_store
from gpuplex.store.audit import AuditLog
from gpuplex.store.jobs import JOB_ID_PATTERN, new_job_id
from gpuplex.store.tables import JobRow
from tests.integration.server.conftest import (
    SPEC_YAML,
    TENANT_A,
    TENANT_B,
    Api,
    error_of,
    make_api,
)

# The store tests' fixtures (a new SQLite file or PostgreSQL schema per test), shared, not copied.
from tests.integration.store.conftest import (
    engine,
    new_sqlite_store,
    postgres_dsn,
    store_templates,
    store_url,
)

__all__ = ["engine", "new_sqlite_store", "postgres_dsn", "store_templates", "store_url"]

#: alphaco may have 3 jobs not finished and submit 6 a minute, bravoco 1 (its own cap); bravoco
#: is guaranteed 80 GiB (its embed replica holds 20 of them), alphaco nothing. Two H100s: 159.3
#: GiB in all.
QUEUES_SPEC_YAML = (
    SPEC_YAML
    + """\
queues:
  max_active_jobs: 3
  preemption: {min_runtime_s: 0}
  organisations:
    - name: acme
      guarantee: {gpu_memory_gib: 80}
      teams:
        - name: research
          guarantee: {gpu_memory_gib: 80}
          tenants:
            - name: alphaco
              max_submits_per_minute: 6
            - name: bravoco
              guarantee: {gpu_memory_gib: 80}
              max_active_jobs: 1
"""
)
#: A value a tenant keeps secret: it must appear in no audit entry, log line or viewer reply.
SECRET = "hunter2-do-not-log-7f3a"  # noqa: S105 - a marker to search for, not a credential


def share(memory_gib: float = 1, **fields: Any) -> dict[str, Any]:
    return {"gpu": {"memory_gib": memory_gib}, "command": ["python", "train.py"], **fields}


def queues_api(engine: Engine, tmp_path: Path) -> Iterator[Api]:
    made = make_api(engine, tmp_path)
    with made.client:
        made.apply(QUEUES_SPEC_YAML)
        yield made


@pytest.fixture
def api(engine: Engine, tmp_path: Path) -> Iterator[Api]:
    """The API on SQLite and on PostgreSQL: for what the store holds (ids, counts, audit)."""
    yield from queues_api(engine, tmp_path)


@pytest.fixture
def one_api(tmp_path: Path, new_sqlite_store: Callable[[Path], Engine]) -> Iterator[Api]:
    """The API on SQLite only: for what does not depend on the store (validation, files)."""
    engine = new_sqlite_store(tmp_path / "one.db")
    try:
        yield from queues_api(engine, tmp_path)
    finally:
        engine.dispose()


def submit(api: Api, body: dict[str, Any], caller: str = "a-admin", tenant: str = TENANT_A) -> str:
    api.clock.advance(timedelta(seconds=1))
    reply = api.post(f"/tenants/{tenant}/jobs", caller, json=body)
    assert reply.status_code == 201, reply.text
    job_id: str = reply.json()["id"]
    return job_id


def unused_id(api: Api) -> str:
    for n in range(16**8):
        candidate = f"j{n:08x}"
        if api.ctx.jobs.get(candidate) is None:
            return candidate
    raise AssertionError("no free id")


# 1. another tenant's job ------------------------------------------------------------------------

CALLS = [("GET", ""), ("GET", "/logs"), ("POST", "/cancel")]


@pytest.mark.parametrize(("method", "suffix"), CALLS)
@pytest.mark.parametrize("caller", ["a-admin", "a-viewer"])
def test_another_tenants_job_and_a_missing_one_get_the_same_404(
    api: Api, method: str, suffix: str, caller: str
) -> None:
    theirs = submit(api, share(), caller="b-admin", tenant=TENANT_B)
    missing = unused_id(api)
    for tenant in (TENANT_A, TENANT_B):
        # a viewer may not cancel in its own tenant at all: 403 before any job is looked up
        status = 403 if (caller, suffix, tenant) == ("a-viewer", "/cancel", TENANT_A) else 404
        answers = []
        for job_id in (theirs, missing):
            reply = api.call(method, f"/tenants/{tenant}/jobs/{job_id}{suffix}", caller)
            assert reply.status_code == status, (tenant, job_id, reply.text)
            answers.append(reply.text.replace(job_id, "ID"))
        assert answers[0] == answers[1], answers  # no oracle: the same words for both
    assert api.ctx.jobs.get(theirs).state is JobState.QUEUED  # type: ignore[union-attr]
    assert api.ctx.jobs.list(TENANT_A) == []


def test_guessing_ids_finds_nothing_of_another_tenant(api: Api) -> None:
    theirs = {submit(api, share(), caller="b-admin", tenant=TENANT_B) for _ in range(1)}
    guesses = [*theirs, *(f"j{n:08x}" for n in range(50))]
    for job_id in guesses:
        assert api.get(f"/tenants/{TENANT_A}/jobs/{job_id}", "a-admin").status_code == 404
    assert api.get(f"/tenants/{TENANT_A}/jobs", "a-admin").json()["items"] == []
    assert api.get(f"/tenants/{TENANT_B}/jobs", "a-admin").status_code == 404


def test_another_tenants_name_in_the_path_is_the_same_404_as_no_tenant(api: Api) -> None:
    for path in ("/jobs", "/jobs/j00000000", "/jobs/j00000000/logs"):
        theirs = api.get(f"/tenants/{TENANT_B}{path}", "a-viewer")
        nobody = api.get(f"/tenants/nosuchco{path}", "a-viewer")
        assert theirs.status_code == nobody.status_code == 404
        assert theirs.text.replace(TENANT_B, "T") == nobody.text.replace("nosuchco", "T")
    reply = api.post(f"/tenants/{TENANT_B}/jobs", "a-admin", json=share())
    assert reply.status_code == 404
    assert api.ctx.jobs.list(TENANT_B) == []


@pytest.mark.parametrize("caller", ["a-admin", "admin"])
def test_a_job_file_naming_another_tenant_is_refused(one_api: Api, caller: str) -> None:
    reply = one_api.post(f"/tenants/{TENANT_A}/jobs", caller, json=share(tenant=TENANT_B))
    assert reply.status_code == 422
    assert (error_of(reply)["code"], error_of(reply)["field"]) == ("job_invalid", "tenant")
    assert one_api.ctx.jobs.list() == []


#: (a bare `..` is resolved by the HTTP client itself; `%2e%2e` reaches the server as `..`)
WEIRD_IDS = [
    "../bravoco",
    "..%2Fbravoco%2Fjob-x",
    "%2e%2e",
    "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "j00000000%00",
    "J00000000",
    "j00000000.stdout.log",
    "j" * 4000,
    "%C3%A9t%C3%A9",
    "j00000000%20",
]


@pytest.mark.parametrize("job_id", WEIRD_IDS)
@pytest.mark.parametrize(("method", "suffix"), CALLS)
def test_ids_with_path_characters_are_404_and_read_nothing(
    one_api: Api, job_id: str, method: str, suffix: str
) -> None:
    theirs = submit(one_api, share(), caller="b-admin", tenant=TENANT_B)
    logs = one_api.host.logs
    stdout, _ = log_paths(logs, TENANT_B, f"job-{theirs}-0")
    stdout.write_text(f"{SECRET}\n")
    (logs / "passwd").write_text(f"{SECRET}\n")
    one_api.report_from_host(theirs)  # their secret is in the store, beside A's jobs
    reply = one_api.call(method, f"/tenants/{TENANT_A}/jobs/{job_id}{suffix}", "a-admin")
    assert reply.status_code == 404, reply.text
    assert error_of(reply)["code"] == "not_found"
    assert SECRET not in reply.text
    assert len(reply.content) < 1000  # a long id is not echoed back
    assert one_api.ctx.jobs.get(theirs).state is JobState.QUEUED  # type: ignore[union-attr]


# 2. limits ---------------------------------------------------------------------------------------


def test_past_its_cap_a_tenants_submit_is_429_saying_the_cap_and_how_many(api: Api) -> None:
    mine = [submit(api, share()) for _ in range(3)]
    reply = api.post(f"/tenants/{TENANT_A}/jobs", "a-admin", json=share())
    assert reply.status_code == 429, reply.text
    error = error_of(reply)
    assert error["code"] == "too_many_jobs"
    assert (error["max_active_jobs"], error["max_submits_per_minute"]) == (3, 6)
    assert "alphaco has 3 jobs not finished" in error["message"]
    assert "allows 3 (queues: max_active_jobs)" in error["message"]
    assert len(api.ctx.jobs.list(TENANT_A)) == 3
    # another tenant's own cap is its own: bravoco may have 1
    submit(api, share(), caller="b-admin", tenant=TENANT_B)
    assert api.post(f"/tenants/{TENANT_B}/jobs", "b-admin", json=share()).status_code == 429
    # a job that finishes (cancelled, failed) makes room; the finished ones count no more
    assert api.post(f"/tenants/{TENANT_A}/jobs/{mine[0]}/cancel", "a-admin").status_code == 200
    api.ctx.jobs.transition(mine[1], JobState.STARTING, "admitted", now=api.clock.utc_now())
    api.ctx.jobs.transition(mine[1], JobState.FAILED, "start failed", now=api.clock.utc_now())
    submit(api, share())
    submit(api, share())
    assert api.post(f"/tenants/{TENANT_A}/jobs", "a-admin", json=share()).status_code == 429
    # running jobs count as well as queued ones
    assert api.ctx.jobs.active_count(TENANT_A) == 3


def test_submitting_and_cancelling_in_a_loop_is_held_to_a_rate(api: Api) -> None:
    """Finished jobs stay in the store (and the audit log): the active cap alone would let a
    tenant that cancels each job at once grow them without end."""
    for _ in range(6):
        job_id = submit(api, share())  # one a second
        assert api.post(f"/tenants/{TENANT_A}/jobs/{job_id}/cancel", "a-admin").status_code == 200
    reply = api.post(f"/tenants/{TENANT_A}/jobs", "a-admin", json=share())
    assert reply.status_code == 429
    error = error_of(reply)
    assert error["code"] == "too_many_jobs"
    assert "alphaco submitted 6 jobs in the last 60 s" in error["message"]
    assert "allows 6 (queues: max_submits_per_minute)" in error["message"]
    assert len(api.ctx.jobs.list(TENANT_A)) == 6
    api.clock.advance(timedelta(seconds=55))  # the first submit is now 60 s old
    assert submit(api, share())


def test_a_list_reads_one_page_however_many_finished_jobs_a_tenant_has(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finished jobs stay: listing them reads the page asked for from the store, not them all.
    (A page with queued jobs also reads the jobs not finished, every tenant's, for why each
    waits: as many as the queues' `max_active_jobs` allow, however long the history.)"""
    spec = JobSpec(tenant=TENANT_A, gpu={"memory_gib": 1}, command=["x"])  # type: ignore[arg-type]
    made = []
    for _ in range(45):
        api.clock.advance(timedelta(seconds=1))
        made.append(api.ctx.jobs.submit(spec, now=api.clock.utc_now(), actor="t").id)
        api.ctx.jobs.request_cancel(made[-1], TENANT_A, now=api.clock.utc_now(), actor="t")
    read: list[str] = []
    real = jobs_store._job

    def counted(row: JobRow) -> jobs_store.Job:
        read.append(row.id)
        return real(row)

    monkeypatch.setattr(jobs_store, "_job", counted)
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 10} | ({"cursor": cursor} if cursor else {})
        page = api.get(f"/tenants/{TENANT_A}/jobs", "a-viewer", params=params).json()
        seen += [job["id"] for job in page["items"]]
        assert len(read) <= 11  # the page and one more, to know there is a next one
        read.clear()
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == made[::-1]  # each once, newest first


def test_a_cap_of_zero_closes_a_tenant_to_jobs(api: Api) -> None:
    api.apply(QUEUES_SPEC_YAML.replace("max_active_jobs: 1", "max_active_jobs: 0"))
    reply = api.post(f"/tenants/{TENANT_B}/jobs", "b-admin", json=share())
    assert reply.status_code == 429
    assert error_of(reply)["max_active_jobs"] == 0


def test_submits_that_race_never_pass_the_cap(api: Api) -> None:
    """Eight submits at once against a cap of 3: the count and the insert are one locked step."""
    spec = JobSpec(tenant=TENANT_A, gpu={"memory_gib": 1}, command=["x"])  # type: ignore[arg-type]
    outcomes: list[str] = []
    start = threading.Barrier(8)

    def one() -> None:
        start.wait()
        try:
            api.ctx.jobs.submit(spec, now=api.clock.utc_now(), actor="racer", caps=JobCaps(3, 100))
            outcomes.append("stored")
        except TooManyJobsError:
            outcomes.append("refused")

    threads = [threading.Thread(target=one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["refused"] * 5 + ["stored"] * 3
    assert api.ctx.jobs.active_count(TENANT_A) == 3


BAD_JOBS: dict[str, tuple[dict[str, Any], str]] = {
    "too many env entries": (share(env={f"V{n}": "x" for n in range(129)}), "env"),
    "an env name with =": (share(env={"A=B": "x"}), "env"),
    "an empty env name": (share(env={"": "x"}), "env"),
    "an env name too long": (share(env={"V" * 129: "x"}), "env"),
    "an env value too long": (share(env={"BIG": "x" * (32 * 1024 + 1)}), "env"),
    "env too large in all": (share(env={f"V{n}": "x" * 30_000 for n in range(3)}), "env"),
    "a NUL in an env value": (share(env={"A": f"{SECRET}\x00"}), "env"),
    "CUDA_VISIBLE_DEVICES": (share(env={"CUDA_VISIBLE_DEVICES": "0,1"}), "env"),
    "NVIDIA_VISIBLE_DEVICES": (share(env={"NVIDIA_VISIBLE_DEVICES": "all"}), "env"),
    "lower-case nvidia_": (share(env={"nvidia_visible_devices": "all"}), "env"),
    "the MPS memory limit": (share(env={"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=80G"}), "env"),
    "the MPS pipe": (share(env={"CUDA_MPS_PIPE_DIRECTORY": "/run/other-mps"}), "env"),
    "GPUPLEX_TENANT": (share(env={"GPUPLEX_TENANT": TENANT_B}), "env"),
    "too many arguments": (share(command=["x"] * 1025), "command"),
    "an argument too long": (share(command=["x", "y" * (32 * 1024 + 1)]), "command"),
    "a command too long in all": (share(command=["y" * 30_000] * 5), "command"),
    "a NUL in an argument": (share(command=["x", "a\x00b"]), "command"),
    "an image with a space": (share(image="a b", command=None), "image"),
    "an image too long": (share(image="a" * 513, command=None), "image"),
    "a name with a slash": (share(name="../x"), "name"),
    "a name too long": (share(name="a" * 64), "name"),
}


@pytest.mark.parametrize("case", list(BAD_JOBS))
def test_a_job_file_out_of_bounds_is_422_naming_the_field(one_api: Api, case: str) -> None:
    body, field = BAD_JOBS[case]
    reply = one_api.post(f"/tenants/{TENANT_A}/jobs", "a-admin", json=body)
    assert reply.status_code == 422, reply.text
    error = error_of(reply)
    assert error["field"] == field, error
    assert error["code"] in ("job_invalid", "invalid_request")
    assert len(reply.content) < 2000  # the refusal does not echo what was too large
    assert SECRET not in reply.text
    assert one_api.ctx.jobs.list() == []


def test_the_bounds_let_a_generous_job_through(one_api: Api) -> None:
    env = {f"VAR_{n}": "x" * 400 for n in range(128)}
    command = ["python", *(f"--arg-{n}" for n in range(1000))]
    assert submit(one_api, share(env=env, command=command, name="a" * 63))


def test_a_body_over_8_mib_on_the_jobs_route_is_413_and_stores_nothing(one_api: Api) -> None:
    body = orjson.dumps(share(env={"A": "x" * (9 * 1024 * 1024)}))
    reply = one_api.post(
        f"/tenants/{TENANT_A}/jobs",
        "a-admin",
        content=body,
        headers={"content-type": "application/json"},
    )
    assert reply.status_code == 413
    assert error_of(reply)["code"] == "request_too_large"
    assert one_api.ctx.jobs.list() == []


def test_a_body_just_under_the_limit_with_a_flood_of_env_is_refused_at_once(one_api: Api) -> None:
    body = orjson.dumps(share(env={f"V{n}": "" for n in range(600_000)}))
    assert 7 * 1024 * 1024 < len(body) < 8 * 1024 * 1024
    started = time.monotonic()
    reply = one_api.post(
        f"/tenants/{TENANT_A}/jobs",
        "a-admin",
        content=body,
        headers={"content-type": "application/json"},
    )
    assert reply.status_code == 422
    assert error_of(reply)["field"] == "env"
    assert len(reply.content) < 2000
    assert time.monotonic() - started < 20  # two loaded cores; about 2 s when idle


def test_a_job_body_that_trickles_is_cut_at_the_body_timeout(one_api: Api) -> None:
    """The app's own body guard, with a 0.3 s timeout instead of its 30 s: a submit whose body
    never all comes is 408 and stores nothing."""
    app = create_app(one_api.ctx)
    (guard,) = [m for m in app.user_middleware if m.cls is cast(object, BodyGuard)]
    guard.kwargs["body_timeout_s"] = 0.3
    token = one_api.tokens["a-admin"]

    async def scenario() -> list[Message]:
        chunks: list[Message] = [{"type": "http.request", "body": b'{"gpu": ', "more_body": True}]
        sent: list[Message] = []

        async def receive() -> Message:
            if chunks:
                return chunks.pop()
            await asyncio.sleep(3600)  # the rest never comes
            raise AssertionError("unreachable")

        async def send(message: Message) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": f"/api/v1/tenants/{TENANT_A}/jobs",
            "raw_path": f"/api/v1/tenants/{TENANT_A}/jobs".encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", b"1000"),
                (b"authorization", f"Bearer {token}".encode()),
            ],
            "client": ("127.0.0.1", 5000),
            "server": ("127.0.0.1", 8090),
        }
        await asyncio.wait_for(app(scope, receive, send), 10)
        return sent

    sent = asyncio.run(scenario())
    assert sent[0]["status"] == 408
    assert json.loads(sent[1]["body"])["error"]["code"] == "request_timeout"
    assert one_api.ctx.jobs.list() == []


# 3. secrets --------------------------------------------------------------------------------------


def test_env_values_reach_no_audit_entry_and_no_log_line(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    job_id = submit(api, share(env={"API_TOKEN": SECRET}, name="train"))
    api.get(f"/tenants/{TENANT_A}/jobs", "a-viewer")
    api.get(f"/tenants/{TENANT_A}/jobs/{job_id}", "a-viewer")
    api.get(f"/tenants/{TENANT_A}/jobs/{job_id}/logs", "a-viewer")
    api.post(f"/tenants/{TENANT_A}/jobs/{job_id}/cancel", "a-admin")
    second = submit(api, share(env={"API_TOKEN": SECRET}))
    api.ctx.jobs.transition(second, JobState.STARTING, "admitted", now=api.clock.utc_now())
    api.ctx.jobs.transition(second, JobState.RUNNING, "running", now=api.clock.utc_now())
    api.ctx.jobs.transition(second, JobState.SUCCEEDED, "exited 0", now=api.clock.utc_now())
    # refused submits too: a bad field beside the secret, and a secret in a bad place
    api.post(f"/tenants/{TENANT_A}/jobs", "a-admin", json=share(env={"A": SECRET}, priority=5000))
    api.post(f"/tenants/{TENANT_A}/jobs", "a-admin", json=share(env={"A": SECRET + "\x00"}))
    entries = AuditLog(api.ctx.engine).entries()
    actions = {entry.action for entry in entries}
    assert {"job.submit", "job.cancel", "job.starting", "job.succeeded"} <= actions
    for entry in entries:
        assert SECRET not in repr(entry), entry.action
    assert caplog.records  # the log was captured (the test can fail)
    for record in caplog.records:
        assert SECRET not in record.getMessage()
        assert SECRET not in str(record.args)
        assert SECRET not in (record.exc_text or "")


def test_a_viewer_sees_env_names_but_not_values(api: Api) -> None:
    job_id = submit(api, share(env={"API_TOKEN": SECRET, "SEED": "7"}))
    for path in (f"/tenants/{TENANT_A}/jobs", f"/tenants/{TENANT_A}/jobs/{job_id}"):
        seen = api.get(path, "a-viewer")
        assert seen.status_code == 200
        assert SECRET not in seen.text
        body = seen.json()
        job = body["items"][0] if "items" in body else body
        assert job["job"]["env"] == {"API_TOKEN": "<hidden>", "SEED": "<hidden>"}
    for caller in ("a-admin", "admin"):  # who may submit the tenant's jobs sees what was sent
        shown = api.get(f"/tenants/{TENANT_A}/jobs/{job_id}", caller).json()
        assert shown["job"]["env"] == {"API_TOKEN": SECRET, "SEED": "7"}


def test_a_preempted_job_is_not_told_whose_job_took_its_place(api: Api) -> None:
    theirs = submit(api, share(), caller="b-admin", tenant=TENANT_B)
    mine = submit(api, share())
    api.ctx.jobs.transition(mine, JobState.STARTING, "admitted", now=api.clock.utc_now())
    api.ctx.jobs.transition(mine, JobState.RUNNING, "running", now=api.clock.utc_now())
    why = f"reclaimed for {theirs}: {TENANT_B} is inside its guarantee"
    api.ctx.jobs.transition(mine, JobState.PREEMPTING, why, now=api.clock.utc_now())
    for path in (f"/tenants/{TENANT_A}/jobs/{mine}", f"/tenants/{TENANT_A}/jobs"):
        seen = api.get(path, "a-viewer").text
        assert theirs not in seen
        assert TENANT_B not in seen
        assert "reclaimed for another tenant's job: another tenant is inside" in seen
    assert theirs in api.get(f"/tenants/{TENANT_A}/jobs/{mine}", "admin").text
    # the ids are found in reasons by their shape: every id the store makes has it
    assert all(re.fullmatch(JOB_ID_PATTERN, new_job_id()) for _ in range(100))


# 4. logs -----------------------------------------------------------------------------------------


def job_logs_of(api: Api, job_id: str, tenant: str = TENANT_A) -> tuple[Path, Path]:
    return log_paths(api.host.logs, tenant, f"job-{job_id}-0")


@pytest.mark.parametrize("kind", ["symlink", "hard link", "fifo", "folder link"])
def test_logs_never_follow_a_link_or_read_a_file_that_is_not_the_jobs(
    one_api: Api, tmp_path: Path, kind: str
) -> None:
    job_id = submit(one_api, share())
    stdout, stderr = job_logs_of(one_api, job_id)
    outside = tmp_path / "outside" / stdout.name
    outside.parent.mkdir()
    outside.write_text(f"{SECRET}\n")
    if kind == "symlink":
        stdout.symlink_to(outside)
    elif kind == "hard link":
        os.link(outside, stdout)
    elif kind == "fifo":
        os.mkfifo(stdout)
    else:
        stdout.parent.rename(stdout.parent.with_name("moved"))
        stdout.parent.symlink_to(outside.parent, target_is_directory=True)
    stderr_kept = kind != "folder link"
    if stderr_kept:
        stderr.write_text("ok\n")
    started = time.monotonic()
    one_api.report_from_host(job_id)  # the host reads its files; the API reads the store
    assert time.monotonic() - started < 5  # a FIFO does not hold the host's report
    reply = one_api.get(f"/tenants/{TENANT_A}/jobs/{job_id}/logs", "a-viewer")
    assert reply.status_code == 200
    assert SECRET not in reply.text
    body = reply.json()
    assert body["lines"] == ([{"stream": "stderr", "text": "ok"}] if stderr_kept else [])
    assert "not read" in body["note"]


def test_logs_are_bounded_in_lines_bytes_and_line_length(one_api: Api) -> None:
    job_id = submit(one_api, share())
    stdout, stderr = job_logs_of(one_api, job_id)
    with stdout.open("w") as handle:
        for n in range(200_000):  # about 4 MiB
            handle.write(f"step {n:06d} {'.' * 8}\n")
    stderr.write_text("a" * 300_000 + "\n" + "end\n")  # one line far over the line limit
    one_api.report_from_host(job_id)
    path = f"/tenants/{TENANT_A}/jobs/{job_id}/logs"
    reply = one_api.get(path, "a-viewer", params={"tail": 10_000})
    assert reply.status_code == 200
    lines = reply.json()["lines"]
    out = [line["text"] for line in lines if line["stream"] == "stdout"]
    err = [line["text"] for line in lines if line["stream"] == "stderr"]
    assert len(out) == 10_000
    assert out[-1] == "step 199999 ........"
    assert err == ["a" * MAX_LINE_CHARS + CUT, "end"]
    assert len(reply.content) < 2 * MAX_LOG_BYTES
    assert "only its last" in reply.json()["note"]
    for tail in (0, -1, 10_001, "all"):
        refused = one_api.get(path, "a-viewer", params={"tail": tail})
        assert refused.status_code == 422, tail
        assert error_of(refused)["field"] == "tail"


def test_a_viewer_reads_logs_of_their_own_tenant_only(one_api: Api) -> None:
    mine = submit(one_api, share())
    theirs = submit(one_api, share(), caller="b-admin", tenant=TENANT_B)
    job_logs_of(one_api, theirs, TENANT_B)[0].write_text(f"{SECRET}\n")
    job_logs_of(one_api, mine)[0].write_text("mine\n")
    one_api.report_from_host(mine, theirs)
    assert one_api.get(f"/tenants/{TENANT_A}/jobs/{mine}/logs", "a-viewer").json()["lines"] == [
        {"stream": "stdout", "text": "mine"}
    ]
    for tenant in (TENANT_A, TENANT_B):
        reply = one_api.get(f"/tenants/{tenant}/jobs/{theirs}/logs", "a-viewer")
        assert reply.status_code == 404
        assert SECRET not in reply.text
    assert SECRET in one_api.get(f"/tenants/{TENANT_B}/jobs/{theirs}/logs", "b-viewer").text


# 5. priority -------------------------------------------------------------------------------------


def test_a_top_priority_job_never_preempts_another_tenants_work_inside_its_guarantee(
    one_api: Api,
) -> None:
    """bravoco runs a lowest-priority job inside its 80 GiB guarantee; alphaco's top-priority
    job that would need that capacity waits for it (the queues' words say so) and takes nothing."""
    theirs = submit(one_api, share(60, priority=-1000), caller="b-admin", tenant=TENANT_B)
    one_api.ctx.jobs.transition(theirs, JobState.STARTING, "admitted", now=one_api.clock.utc_now())
    one_api.ctx.jobs.transition(theirs, JobState.RUNNING, "running", now=one_api.clock.utc_now())
    # 159.3 GiB of GPU memory: 40 held by the two replicas, 60 by bravoco's job; 59.3 free
    mine = submit(one_api, share(70, priority=1000))
    reason = one_api.get(f"/tenants/{TENANT_A}/jobs/{mine}", "admin").json()["waiting_reason"]
    assert "preempting" not in reason, reason
    assert theirs not in reason
    assert "short of" in reason or "next to start" in reason, reason


def test_priority_orders_a_tenants_own_jobs_and_never_jumps_another_tenants() -> None:
    """The pure admission rules: room for one 10 GiB job, two tenants of equal weight and no
    guarantees. bravoco's older job at -1000 starts before alphaco's newer one at 1000; among
    alphaco's own, its 1000 goes before its older -1000."""
    leaves = tuple(QueueNode(name, "tenant") for name in (TENANT_A, TENANT_B))
    capacity = {GPU_MEMORY_GIB: 10.0}
    root = QueueNode("cluster", "cluster", guarantee=capacity, children=leaves)
    tree = QueueTree.of(root, capacity)
    ask = {GPU_MEMORY_GIB: 10.0}
    queued = [
        QueuedJob("jb", TENANT_B, ask, priority=-1000, submitted_s=1.0),
        QueuedJob("ja-low", TENANT_A, ask, priority=-1000, submitted_s=0.5),
        QueuedJob("ja-top", TENANT_A, ask, priority=1000, submitted_s=2.0),
    ]
    decision = admit(tree, [], queued, now_s=3.0)
    assert decision.admitted == ("jb",)
    assert decision.held_back == {TENANT_A: "ja-top"}  # alphaco's top job is its first
    # once bravoco's job runs, alphaco's top-priority job takes nothing from it
    running = [Holding("jb", TENANT_B, ask, priority=-1000, started_s=3.0)]
    later = admit(tree, running, queued[1:], now_s=1000.0)
    assert later.admitted == ()
    assert later.evictions == ()
