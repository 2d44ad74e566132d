"""Jobs benchmark, end to end, the client: what a user does through the REST API, and the times
each job's state changed, read back from where they are recorded.

- `submit_all`: N jobs, `POST /api/v1/tenants/{t}/jobs` with a bearer token as `gpuplex job submit`
  sends it, from `clients` threads (each with its own keep-alive connection), as fast as they go;
- `wait_started`: until every job's process has started, read from the host runtime's event log
  (`<host state dir>/events.jsonl`, a `started` event for `tenant/job-<id>#0`): a local file, so
  waiting adds no load on the control plane;
- `wait_running`: until the control plane says `running` for every job (its job list, paged);
- `lone_job`: one job, submitted and waited for until it runs;
- `job_times`: each job's events (`GET .../jobs/{id}`): the exact time of each state change, as
  the control plane wrote it, rather than the time a poll noticed it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from gpuplex.clock import monotonic_s, now_s, sleep_s

#: A small MPS share: 48 of them fit on one GPU (the MPS client limit).
JOB_GPU = {"memory_gib": 1, "compute_percent": 2}
#: A process that costs the host nothing while it runs: what is measured is getting it started.
JOB_COMMAND = ["sleep", "3600"]
PAGE = 1000  # the API's largest page


class MeasureError(RuntimeError):
    """The flow did not finish (a job refused, failed or not started in time); says which."""


@dataclass(frozen=True)
class Submitted:
    index: int
    tenant: str
    sent_s: float  # wall clock, before the request
    replied_s: float  # wall clock, once the reply is read
    status: int
    job_id: str | None  # None when refused
    submitted_s: float | None  # the control plane's `submitted_at`
    error: str = ""


@dataclass(frozen=True)
class JobTimes:
    """Wall-clock seconds (since the epoch) of one job's steps; None when it never got there."""

    job_id: str
    tenant: str
    submitted_s: float  # the control plane's `submitted_at` (the `queued` event)
    starting_s: float | None  # admitted and placed by the job runner
    process_s: float | None  # its process started (the host runtime's event)
    running_s: float | None  # the control plane saw the host's report


def parse_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Api:
    """The control plane's REST API with a bearer token; one keep-alive connection per thread,
    all closed by `close` (or leaving a `with` block)."""

    def __init__(self, url: str, token: str) -> None:
        self.url = f"{url}/api/v1"
        self.headers = {"authorization": f"Bearer {token}"}
        self._local = threading.local()
        self._opened: list[httpx.Client] = []
        self._lock = threading.Lock()

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def client(self) -> httpx.Client:
        found: httpx.Client | None = getattr(self._local, "client", None)
        if found is None:
            found = httpx.Client(base_url=self.url, headers=self.headers, timeout=60)
            self._local.client = found
            with self._lock:
                self._opened.append(found)
        return found

    def close(self) -> None:
        with self._lock:
            while self._opened:
                self._opened.pop().close()

    def get(self, path: str, **params: Any) -> Any:
        reply = self.client().get(path, params=params)
        if reply.status_code != 200:
            raise MeasureError(f"GET {path}: {reply.status_code} {reply.text[:300]}")
        return reply.json()

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return self.client().post(path, json=body)


def job_body(index: int, command: Sequence[str] = JOB_COMMAND) -> dict[str, Any]:
    return {"name": f"bench-{index}", "gpu": JOB_GPU, "command": list(command)}


def submit_one(api: Api, index: int, tenant: str) -> Submitted:
    sent = now_s()
    try:
        reply = api.post(f"/tenants/{tenant}/jobs", job_body(index))
    except httpx.HTTPError as error:
        return Submitted(index, tenant, sent, now_s(), 0, None, None, str(error))
    replied = now_s()
    if reply.status_code != 201:
        return Submitted(
            index, tenant, sent, replied, reply.status_code, None, None, reply.text[:300]
        )
    body = reply.json()
    return Submitted(
        index, tenant, sent, replied, 201, body["id"], parse_time(body["submitted_at"])
    )


def submit_all(
    api: Api, tenants: Sequence[str], jobs: int, clients: int, done: Callable[[], None]
) -> list[Submitted]:
    """Job i goes to tenants[i % len(tenants)]; `clients` threads each send every clients-th job,
    one after another; `done` is called after each reply."""

    def sender(first: int) -> list[Submitted]:
        sent = []
        for index in range(first, jobs, clients):
            sent.append(submit_one(api, index, tenants[index % len(tenants)]))
            done()
        return sent

    with ThreadPoolExecutor(clients, thread_name_prefix="bench-submit") as pool:
        batches = list(pool.map(sender, range(clients)))
    return sorted((s for batch in batches for s in batch), key=lambda s: s.index)


class EventLog:
    """The host runtime's events.jsonl, read on from where the last read stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.started: dict[str, float] = {}  # target -> first `started` event's time
        self.other: list[dict[str, Any]] = []  # the rest, for a message

    def read(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as log:
            log.seek(self.offset)
            chunk = log.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a line being written waits for the next read
        self.offset += len(complete)
        for line in complete.decode(errors="replace").splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("kind") == "started":
                self.started.setdefault(event["target"], parse_time(event["at"]))
            else:
                self.other.append(event)


def job_target(tenant: str, job_id: str) -> str:
    return f"{tenant}/job-{job_id}#0"


def wait_started(
    log: EventLog, targets: Collection[str], timeout_s: float, seen: Callable[[int], None]
) -> dict[str, float]:
    """target -> when its process started, once every target's has; MeasureError after
    timeout_s, with the host's last events."""
    deadline = monotonic_s() + timeout_s
    wanted = set(targets)
    while True:
        log.read()
        found = wanted & log.started.keys()
        seen(len(found))
        if found == wanted:
            return {t: log.started[t] for t in wanted}
        if monotonic_s() > deadline:
            last = [
                f"{e.get('kind')} {e.get('target')}: {e.get('message')}" for e in log.other[-8:]
            ]
            raise MeasureError(
                f"{len(wanted) - len(found)} of {len(wanted)} processes not started within "
                f"{timeout_s:g} s; the host's last other events:\n" + "\n".join(last)
            )
        sleep_s(0.1)


def wait_running(
    api: Api, jobs: dict[str, str], timeout_s: float, seen: Callable[[int], None]
) -> None:
    """Until the job list says `running` for every job of `jobs` (id -> tenant)."""
    deadline = monotonic_s() + timeout_s
    tenants = sorted(set(jobs.values()))
    while True:
        running: set[str] = set()
        for tenant in tenants:
            cursor = None
            while True:
                params: dict[str, Any] = {"state": "running", "limit": PAGE}
                if cursor:
                    params["cursor"] = cursor
                page = api.get(f"/tenants/{tenant}/jobs", **params)
                running |= {item["id"] for item in page["items"]}
                cursor = page.get("next_cursor")
                if not cursor:
                    break
        found = running & jobs.keys()
        seen(len(found))
        if len(found) == len(jobs):
            return
        if monotonic_s() > deadline:
            missing = [j for j in jobs if j not in found][:5]
            states = [f"{j}: {api.get(f'/tenants/{jobs[j]}/jobs/{j}')['state']}" for j in missing]
            raise MeasureError(
                f"{len(jobs) - len(found)} of {len(jobs)} jobs not running within {timeout_s:g} "
                f"s; for example {', '.join(states)}"
            )
        sleep_s(0.25)


def lone_job(api: Api, log: EventLog, index: int, tenant: str, timeout_s: float) -> JobTimes:
    """One job submitted, waited for until it runs, and its times."""
    sent = submit_one(api, index, tenant)
    if sent.job_id is None:
        raise MeasureError(f"a job of {tenant} was refused: {sent.status} {sent.error}")
    processes = wait_started(log, [job_target(tenant, sent.job_id)], timeout_s, _ignore)
    wait_running(api, {sent.job_id: tenant}, timeout_s, _ignore)
    return job_times(api, {sent.job_id: tenant}, processes, lambda: None)[0]


def _ignore(count: int) -> None:
    pass


def job_times(
    api: Api, jobs: dict[str, str], processes: dict[str, float], done: Callable[[], None]
) -> list[JobTimes]:
    """Each job's times from its events (the first `starting` and `running`: a job preempted in
    between would have more, and none is here)."""
    times = []
    for job_id, tenant in jobs.items():
        shown = api.get(f"/tenants/{tenant}/jobs/{job_id}")
        at: dict[str, float] = {}
        for event in shown["events"]:
            at.setdefault(event["state"], parse_time(event["at"]))
        times.append(
            JobTimes(
                job_id,
                tenant,
                parse_time(shown["submitted_at"]),
                at.get("starting"),
                processes.get(job_target(tenant, job_id)),
                at.get("running"),
            )
        )
        done()
    return times
