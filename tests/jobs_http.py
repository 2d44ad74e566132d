"""Jobs over the control plane's REST API, as a client sends them: for the tests that drive a
running stack (`gpuplex up`, or a server and a host runtime), each with its own way to reach it."""

from __future__ import annotations

from typing import Any, Protocol

import httpx


class Api(Protocol):
    def __call__(self, method: str, path: str, **kwargs: Any) -> httpx.Response: ...


def submit_job(api: Api, tenant: str, body: dict[str, Any]) -> str:
    """Submit a job of `tenant`; its id (201 expected)."""
    reply = api("POST", f"/tenants/{tenant}/jobs", json=body)
    assert reply.status_code == 201, reply.text
    job_id: str = reply.json()["id"]
    return job_id


def show_job(api: Api, tenant: str, job_id: str) -> dict[str, Any]:
    """The job as `GET /tenants/{tenant}/jobs/{id}` answers it (200 expected)."""
    reply = api("GET", f"/tenants/{tenant}/jobs/{job_id}")
    assert reply.status_code == 200, reply.text
    shown: dict[str, Any] = reply.json()
    return shown
