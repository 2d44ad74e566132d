"""A fake Kubernetes API server per test, a kubeconfig pointing at it (bearer token auth, as a
real cluster's service-account or OIDC token), and the official client connected through it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpuplex.kube.apply import ClientTransport, connect
from tests.integration.kube.fake_api import TOKEN, FakeKubeApi


def write_kubeconfig(
    path: Path, server: str, *, token: str = TOKEN, ca: Path | None = None
) -> Path:
    """A kubeconfig with context `fake` (current) on `server`, trusting `ca` for HTTPS."""
    cluster: dict[str, str] = {"server": server}
    if ca is not None:
        cluster["certificate-authority"] = str(ca)
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": cluster}],
        "users": [{"name": "tester", "user": {"token": token}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester"}}],
        "current-context": "fake",
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    with FakeKubeApi() as server:
        yield server


@pytest.fixture
def kubeconfig(tmp_path: Path, api: FakeKubeApi) -> Path:
    return write_kubeconfig(tmp_path / "kubeconfig", api.url)


@pytest.fixture
def transport(kubeconfig: Path) -> Iterator[ClientTransport]:
    with connect(kubeconfig) as client:
        yield client


@pytest.fixture(autouse=True)
def no_threads_left() -> Iterator[None]:
    """The fake server's threads, and any the client starts, are gone when a test ends."""
    before = set(threading.enumerate())
    yield
    left = [thread.name for thread in threading.enumerate() if thread not in before]
    assert not left, f"threads left running: {left}"
