"""The gateway's usage spool fills up (a small tmpfs, as root) under a real `gpuplex gateway`: no
request may get a reply without its usage record. While the spool cannot take records every
inference request gets 503 `usage_unavailable` (plain and streamed: no 200 headers and a cut
body), `/healthz` says why, and once space returns the gateway serves again by itself, with every
200 it answered billed in the store.

Needs root (to mount the tmpfs) and a gateway runnable as nobody; skips saying why otherwise."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.e2e.gateway.stack import Gateway, Stack, one_tenant_spec, stack

pytestmark = pytest.mark.lane

__all__ = ["stack"]

TMPFS_SIZE = "4m"  # above the spool's 1 MiB reserve, so an empty one is ready
BODY = {"model": "acme-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


def mount_tmpfs(path: Path) -> str | None:
    """Mount a small tmpfs at `path`; None, or why it cannot be done here."""
    if os.geteuid() != 0:
        return "mounting a small tmpfs for the spool needs root"
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(  # noqa: S603
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0755", "tmpfs", str(path)],  # noqa: S607
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return f"mount -t tmpfs failed here: {done.stderr.strip() or done.returncode}"
    return None


@pytest.fixture
def spool_on_tmpfs(stack: Stack) -> Iterator[Path]:
    """The stack's spool directory, on a tmpfs of its own; unmounted after the gateway stopped."""
    spool = stack.tmp / "spool"
    why_not = mount_tmpfs(spool)
    if why_not is not None:
        pytest.skip(why_not)
    try:
        yield spool
    finally:
        stack.close()  # nothing may hold a file there any more
        if subprocess.run(["umount", str(spool)], check=False).returncode != 0:  # noqa: S603, S607
            subprocess.run(["umount", "-l", str(spool)], check=False)  # noqa: S603, S607


def fill(directory: Path) -> Path:
    """Write a file until the file system is full."""
    filler = directory / "filler"
    chunk = b"\0" * 65536
    with filler.open("wb", buffering=0) as out:
        with contextlib.suppress(OSError):
            while True:
                out.write(chunk)
        with contextlib.suppress(OSError):  # the last few blocks
            while True:
                out.write(b"\0" * 512)
    statvfs = os.statvfs(directory)
    assert statvfs.f_bavail * statvfs.f_frsize < 1024 * 1024
    return filler


def chat(gateway: Gateway, key: str, stream: bool) -> tuple[int, str, bytes]:
    """(status, x-request-id, whole body), the body read to its end however it ends."""
    with httpx.stream(
        "POST",
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json={**BODY, "stream": stream},
        timeout=10,
    ) as reply:
        body = b""
        with contextlib.suppress(httpx.HTTPError):  # a cut reply is what this test looks for
            body = reply.read()
        return reply.status_code, reply.headers.get("x-request-id", ""), body


def healthz(gateway: Gateway) -> tuple[int, dict[str, object]]:
    reply = httpx.get(f"{gateway.url}/healthz", timeout=10)
    return reply.status_code, orjson.loads(reply.content)


def test_a_full_spool_refuses_requests_until_space_returns_and_bills_every_reply(
    stack: Stack, spool_on_tmpfs: Path
) -> None:
    gateway = stack.gateway(one_tenant_spec(stack.sim(["llama-8b"])))
    key = stack.key("acme")
    served: list[str] = []
    for stream in (False, True):
        status, request_id, _ = chat(gateway, key, stream)
        assert status == 200
        served.append(request_id)

    filler = fill(spool_on_tmpfs)
    time.sleep(0.3)  # past the spool's 0.1 s readiness cache
    for stream in (False, True, False, True):
        status, _, body = chat(gateway, key, stream)
        assert status == 503, f"stream={stream}: {status} {body[:200]!r}"
        error = orjson.loads(body)["error"]
        assert error["code"] == "usage_unavailable"
        assert error["type"] == "server_error"
    status, health = healthz(gateway)
    assert status == 503
    assert health["status"] == "degraded"
    problems = health["problems"]
    assert isinstance(problems, list)
    assert any(str(spool_on_tmpfs) in p and "full" in p for p in problems), problems
    assert httpx.get(f"{gateway.url}/health", timeout=10).status_code == 200  # still alive
    assert "full" in gateway.log()  # the cause is in the log, not only a 503

    filler.unlink()
    deadline = time.monotonic() + 5
    while healthz(gateway)[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    ready = {"total": 1, "ready": 1, "starting": 0, "down": 0}
    assert healthz(gateway) == (200, {"status": "ok", "backends": ready})
    for stream in (False, True):
        status, request_id, _ = chat(gateway, key, stream)
        assert status == 200
        served.append(request_id)

    deadline = time.monotonic() + 15  # segments seal after 2 s, then the mover takes them
    while time.monotonic() < deadline and not set(served) <= stack.usage().request_ids():
        time.sleep(0.2)
    assert set(served) <= stack.usage().request_ids(), "a reply without its usage record"


def test_filling_really_fills_the_tmpfs(spool_on_tmpfs: Path) -> None:
    """The premise of the test above: writes there fail with ENOSPC once it is filled."""
    filler = fill(spool_on_tmpfs)
    with pytest.raises(OSError, match="No space left") as raised:
        (spool_on_tmpfs / "one-more").write_bytes(b"x" * 65536)
    assert raised.value.errno == errno.ENOSPC
    filler.unlink()
