"""The real Kubernetes control plane, started once per test session for the tests marked
`kube_real` (all of tests/kube_real). Where the binaries or etcd are missing the tests skip and say
why, unless GPUPLEX_REQUIRE_KUBE_REAL=1 (CI), where they fail instead."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube_real import binaries
from tests.kube_real.cluster import ControlPlane


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.kube_real)


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    found = binaries.find()
    if isinstance(found, str):
        if os.environ.get("GPUPLEX_REQUIRE_KUBE_REAL") == "1":
            pytest.fail(f"{found}, and GPUPLEX_REQUIRE_KUBE_REAL=1 makes it mandatory")
        pytest.skip(found)
    with ControlPlane(found, tmp_path_factory.mktemp("kube-control-plane")) as cluster:
        yield cluster
