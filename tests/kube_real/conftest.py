"""The real Kubernetes control plane, started once per test session for the tests marked
`kube_real` (all of tests/kube_real). Where the binaries or etcd are missing the tests skip and say
why, unless GPUPLEX_REQUIRE_KUBE_REAL=1 (CI), where they fail instead. The real Kueue manager runs
beside it for the tests that ask for the `kueue` fixture. Both stop after the last test that asks for
them (tests/early_stop.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import early_stop
from tests.kube_real import binaries
from tests.kube_real.cluster import ControlPlane
from tests.kube_real.kueue_manager import KueueManager, cannot_isolate, crd_files


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.kube_real)


@pytest.fixture(scope="session")
def kube_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    found = binaries.find()
    if isinstance(found, str):
        if os.environ.get("GPUPLEX_REQUIRE_KUBE_REAL") == "1":
            pytest.fail(f"{found}, and GPUPLEX_REQUIRE_KUBE_REAL=1 makes it mandatory")
        pytest.skip(found)
    with ControlPlane(found, tmp_path_factory.mktemp("kube-control-plane")) as cluster:
        early_stop.started(request, cluster.stop)
        yield cluster


@pytest.fixture(scope="session")
def kueue(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KueueManager]:
    """The real Kueue manager against `kube_cluster`, with its CRDs and webhooks (see
    tests/kube_real/kueue_manager.py). Skips, saying why, where Kueue is not built or cannot run
    in a mount namespace of its own (both fail instead under GPUPLEX_REQUIRE_KUBE_REAL=1), or
    where the shared CRD schemas are absent."""
    found = binaries.find_kueue()
    missing = found if isinstance(found, str) else cannot_isolate()
    if missing:
        if os.environ.get("GPUPLEX_REQUIRE_KUBE_REAL") == "1":
            pytest.fail(f"{missing}, and GPUPLEX_REQUIRE_KUBE_REAL=1 makes it mandatory")
        pytest.skip(missing)
    assert not isinstance(found, str)
    crds = crd_files()
    if isinstance(crds, str):
        pytest.skip(crds)
    cluster: ControlPlane = request.getfixturevalue("kube_cluster")
    with KueueManager(found, cluster, crds, tmp_path_factory.mktemp("kueue")) as manager:
        early_stop.started(request, manager.stop)
        yield manager
