"""`GET /tenants/{t}/jobs` says why each queued job waits now, in the words `GET .../jobs/{id}`
uses, from one read-only round of the job runner per request (not one per job); a tenant's
viewer reads no other tenant's job id in them."""

from __future__ import annotations

import pytest

from gpuplex.server import job_views
from gpuplex.server.job_runner import next_step
from tests.integration.server.conftest import TENANT_A, TENANT_B, Api
from tests.integration.server.test_jobs_api import queues, share, submit

__all__ = ["queues"]


def test_a_page_of_jobs_says_why_each_queued_one_waits_from_one_round(
    queues: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = queues
    theirs = submit(api, share(10), "admin", TENANT_B)
    first = submit(api, share(10, priority=1))
    over = submit(api, share(35))  # past alphaco's 40 GiB with its replicas' 20 and the first
    behind = submit(api, share(1))
    done = submit(api, share(1))
    assert api.post(f"/tenants/{TENANT_A}/jobs/{done}/cancel", "a-admin").status_code == 200

    rounds = []

    def counted(*args: object) -> object:
        rounds.append(args)
        return next_step(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(job_views, "next_step", counted)
    reply = api.get(f"/tenants/{TENANT_A}/jobs", "a-viewer")
    assert reply.status_code == 200, reply.text
    assert len(rounds) == 1
    items = {j["id"]: j for j in reply.json()["items"]}
    assert items[done]["waiting_reason"] is None  # cancelled: it waits for nothing
    assert items[first]["waiting_reason"].startswith("admitted by the queues")
    assert items[over]["waiting_reason"] == (
        f"{TENANT_A} would pass its limit: 30 GiB of GPU memory held + 35 asked > 40"
    )
    assert (
        items[behind]["waiting_reason"] == f"behind {over}, the first of {TENANT_A}'s queued jobs"
    )
    for job_id in (first, over, behind):
        shown = api.get(f"/tenants/{TENANT_A}/jobs/{job_id}", "a-viewer").json()
        assert shown["waiting_reason"] == items[job_id]["waiting_reason"]
    assert theirs not in reply.text
