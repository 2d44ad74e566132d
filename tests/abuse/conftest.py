"""The Kubernetes abuse tests use the integration tests' fake API server and client fixtures (their
thread check, `no_threads_left`, is imported by the Kubernetes test module alone: the gateway abuse
tests run servers whose request threads may still be finishing when a test ends)."""

from tests.integration.kube.conftest import api, kubeconfig, transport

__all__ = ["api", "kubeconfig", "transport"]
