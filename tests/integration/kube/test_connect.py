"""Where the credentials come from and how the connection fails: HTTPS against a certificate the
kubeconfig does not trust is KubeUnreachable naming TLS, the same server with its CA in the
kubeconfig works, and inside a pod the service account's token and CA are used."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gpuplex.errors import KubeUnreachable
from gpuplex.kube.apply import connect
from gpuplex.kube.diff import ObjectAction
from gpuplex.kube.naming import PLAN_SET
from gpuplex.kube.sync import apply_set
from tests.integration.kube import objects
from tests.integration.kube.conftest import write_kubeconfig
from tests.integration.kube.fake_api import TOKEN, FakeKubeApi


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, as a cluster's API server has."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed: cannot make a certificate for the TLS tests")
    cert, key = tmp_path / "apiserver.crt", tmp_path / "apiserver.key"
    args = [
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=kube-apiserver",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
    ]
    subprocess.run(  # noqa: S603 - openssl from PATH, arguments written here
        [openssl, *args, "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True
    )
    return cert, key


def test_an_untrusted_certificate_is_unreachable_naming_tls(
    tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    with FakeKubeApi(tls=certificate) as api:
        config = write_kubeconfig(tmp_path / "kc", api.url)
        with connect(config) as client, pytest.raises(KubeUnreachable) as caught:
            apply_set(client, [objects.namespace()], PLAN_SET)
    text = caught.value.message
    assert text.startswith(f"TLS with the Kubernetes API at {api.url} failed")
    assert "CERTIFICATE_VERIFY_FAILED" in text
    assert "certificate-authority" in text
    assert caught.value.exit_code == 3


def test_the_clusters_ca_in_the_kubeconfig_is_trusted(
    tmp_path: Path, certificate: tuple[Path, Path]
) -> None:
    with FakeKubeApi(tls=certificate) as api:
        config = write_kubeconfig(tmp_path / "kc", api.url, ca=certificate[0])
        with connect(config) as client:
            changes = apply_set(client, [objects.namespace()], PLAN_SET, prune=False)
    assert [change.action for change in changes] == [ObjectAction.CREATE]
    assert api.requests[0].authorization == f"Bearer {TOKEN}"


def test_inside_a_pod_the_service_account_is_used(
    tmp_path: Path, certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from kubernetes.config import incluster_config, kube_config

    token = tmp_path / "token"
    token.write_text("pod-token")
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "none"))
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(certificate[0]))
    with FakeKubeApi(tls=certificate, token="pod-token") as api:  # noqa: S106
        port = api.url.rpartition(":")[2]
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
        with connect() as client:
            assert client.source == "the pod's service account"
            assert client.address == api.url
            changes = apply_set(client, [objects.namespace()], PLAN_SET, prune=False)
    assert [change.action for change in changes] == [ObjectAction.CREATE]
    assert api.requests[0].authorization == "bearer pod-token"  # as the client writes it
