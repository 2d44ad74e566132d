"""The Kubernetes abuse tests use the integration tests' fake API server and client fixtures."""

from tests.integration.kube.conftest import api, kubeconfig, no_threads_left, transport

__all__ = ["api", "kubeconfig", "no_threads_left", "transport"]
