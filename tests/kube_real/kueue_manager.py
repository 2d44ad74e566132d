"""The real Kueue manager (sigs.k8s.io/kueue, built by tests/kube_real/binaries.py) running against
the test control plane: its CustomResourceDefinitions applied from the shared copy of Kueue's CRD
schemas (`../shared/data/kueue-crds`, read where they are, never copied into the project), a Kueue
`Configuration` written for the session, and the manager started as one more program of the
control plane, authenticated as its own service account `kueue-system/kueue-controller-manager`, as
a real installation runs it (bound to cluster-admin: Kueue's own ClusterRole is not installed), so
an admission policy that trusts only Kueue's controller sees the name it sees on a real cluster.

Webhooks are served, as in a real installation: internal certificate management is off (it wants a
Service and a Secret in kueue-system), so the fixture issues Kueue a serving certificate for
127.0.0.1 from the session's CA and registers Kueue's own Mutating- and
ValidatingWebhookConfigurations (copied from the Kueue release at build time) pointing at
`https://127.0.0.1:<port>` with that CA, keeping the webhooks of the objects Kueue manages here
(batch Jobs and Kueue's own kinds). So a Job that names a LocalQueue is suspended by Kueue's
mutating webhook at creation, as on a real cluster, and the validating one refuses moving a
running Job to another queue. The webhook configurations are deleted before the manager stops: a Job webhook
that no longer answers would refuse every Job (failurePolicy Fail).

Feature gates: MultiKueue off (its CRDs are not in the shared copy, and a controller watching a
kind the API does not serve never starts), VisibilityOnDemand off (an aggregated API server of its
own); the rest are Kueue's defaults. The only integration enabled is batch/job.

The shared CRDs are a newer Kueue's (v1beta2 stored, v1beta1 served, no conversion webhook): Kueue
v0.17 reads and writes v1beta2, so every client of this cluster uses that version.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from gpuplex.kube.apply import ClientTransport, connect
from gpuplex.kube.naming import Manifest
from tests.kube_real.binaries import Kueue
from tests.kube_real.cluster import (
    ControlPlane,
    ControlPlaneError,
    free_port,
    http_ok,
    kubeconfig_for,
    log_tail,
)
from tests.kube_real.pki import serving_pair

KUEUE_CRDS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "kueue-crds"
NAMESPACE = "kueue-system"
#: Kueue's controller's service account, as its release installs it (`kubernetes.kueue`'s default).
SERVICE_ACCOUNT = "kueue-controller-manager"
#: The API groups whose webhooks are registered: the batch/job integration and Kueue's own kinds.
WEBHOOK_GROUPS = frozenset({"batch", "kueue.x-k8s.io"})
FEATURE_GATES = {"MultiKueue": False, "VisibilityOnDemand": False}
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
WEBHOOK_PATHS = {
    "MutatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/"
    "mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "/apis/admissionregistration.k8s.io/v1/"
    "validatingwebhookconfigurations",
}
READY_TIMEOUT_S = 120.0
#: Kueue without internal certificate management reads its metrics certificate from the fixed
#: path /etc/kueue/metrics/certs (where a real installation mounts a Secret), even with metrics
#: off. The manager runs in a mount namespace of its own whose /etc is an overlay of the
#: machine's, where that path links to the session's certificate: the machine's /etc is untouched.
ETC_KUEUE = (
    "unshare",
    "--mount",
    "--propagation",
    "private",
    "--",
    "sh",
    "-c",
    'mount -t overlay overlay -o "lowerdir=/etc,upperdir=$GPUPLEX_ETC_OVERLAY/upper,'
    'workdir=$GPUPLEX_ETC_OVERLAY/work" /etc && mkdir -p /etc/kueue/metrics && '
    'ln -s "$GPUPLEX_METRICS_CERTS" /etc/kueue/metrics/certs && exec "$@"',
    "kueue",
)


def cannot_isolate() -> str:
    """Why the manager cannot get its own mount namespace here ("" when it can)."""
    if shutil.which("unshare") is None:
        return "the Kueue manager runs under unshare (util-linux), which is not installed"
    if os.geteuid() != 0:
        return "the Kueue manager runs in a mount namespace of its own, which needs root"
    return ""


def crd_files() -> list[Path] | str:
    """The shared CRD files, or why there are none."""
    files = sorted(KUEUE_CRDS.glob("*.yaml"))
    if not files:
        return f"Kueue's CRD schemas are not in {KUEUE_CRDS} (the shared data is absent)"
    return files


def configuration(probe_port: int, webhook_port: int, cert_dir: Path) -> dict[str, Any]:
    """Kueue's `Configuration` for a manager on 127.0.0.1 that serves its webhooks with the
    certificate in `cert_dir`, elects no leader and serves no metrics."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": ["batch/job"]},
        "featureGates": FEATURE_GATES,
    }


def webhook_configurations(source: Path, base_url: str, ca_pem: bytes) -> list[Manifest]:
    """Kueue's webhook configurations with each webhook calling `base_url` + its path, trusting
    `ca_pem`, kept to WEBHOOK_GROUPS; the objects are named as Kueue's release names them."""
    bundle = base64.b64encode(ca_pem).decode()
    configurations = []
    for document in yaml.safe_load_all(source.read_text()):
        if not document:
            continue
        kept = []
        for hook in document["webhooks"]:
            groups = {group for rule in hook["rules"] for group in rule["apiGroups"]}
            if not groups <= WEBHOOK_GROUPS:
                continue
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": base_url + path, "caBundle": bundle}
            kept.append(hook)
        document["metadata"] = {"name": "kueue-" + document["metadata"]["name"]}
        document["webhooks"] = kept
        configurations.append(document)
    return configurations


def _ok(reply_status: int, text: str, what: str) -> None:
    if reply_status not in (200, 201):
        raise ControlPlaneError(f"{what}: HTTP {reply_status}: {text[:500]}")


@dataclass
class KueueManager:
    """Start with `with KueueManager(binary, cluster, crds, directory) as kueue:`; `kueue.admin`
    talks to the API server as the cluster's admin."""

    binary: Kueue
    cluster: ControlPlane
    crds: list[Path]
    directory: Path
    admin: ClientTransport = field(init=False)
    log: Path = field(init=False, default=Path())
    _webhooks: list[Manifest] = field(init=False, default_factory=list)

    def __enter__(self) -> KueueManager:
        self.admin = connect(self.cluster.kubeconfig)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def send(self, method: str, path: str, body: Any = None) -> Any:
        return self.admin.send(
            method,
            path,
            body=None if body is None else json.dumps(body),
            content_type=None if body is None else "application/json",
        )

    def _start(self) -> None:
        self._apply_crds()
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        created = self.send("POST", "/api/v1/namespaces", namespace)
        if created.status != 409:
            _ok(created.status, created.text, f"creating namespace {NAMESPACE}")
        cert_dir = self.directory / "webhook-certs"
        pair = serving_pair(
            self.cluster.pki, self.directory / "pki", "kueue-webhook", ("127.0.0.1",)
        )
        cert_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pair.cert, cert_dir / "tls.crt")
        shutil.copyfile(pair.key, cert_dir / "tls.key")
        kubeconfig = self._service_account_kubeconfig()
        probe_port, webhook_port = free_port(), free_port()
        config = self.directory / "kueue-config.yaml"
        config.write_text(yaml.safe_dump(configuration(probe_port, webhook_port, cert_dir)))
        etc = self.directory / "etc-overlay"
        (etc / "upper").mkdir(parents=True)
        (etc / "work").mkdir()
        self.log = self.cluster.start_program(
            "kueue",
            [*ETC_KUEUE, str(self.binary.manager), f"--config={config}"],
            lambda: http_ok(f"http://127.0.0.1:{probe_port}/readyz"),
            {
                **os.environ,
                "KUBECONFIG": str(kubeconfig),
                "GPUPLEX_ETC_OVERLAY": str(etc),
                "GPUPLEX_METRICS_CERTS": str(cert_dir),
            },
        )
        self._webhooks = webhook_configurations(
            self.binary.webhooks,
            f"https://127.0.0.1:{webhook_port}",
            self.cluster.pki.ca.cert.read_bytes(),
        )
        for hooks in self._webhooks:
            created = self.send("POST", WEBHOOK_PATHS[hooks["kind"]], hooks)
            _ok(created.status, created.text, f"registering {hooks['metadata']['name']}")
        self._wait("Kueue's Job webhook to suspend a queued Job", self._job_webhook_answers)

    def _service_account_kubeconfig(self) -> Path:
        """A kubeconfig with a token of Kueue's service account, bound to cluster-admin."""
        account = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE},
        }
        created = self.send("POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", account)
        if created.status != 409:
            _ok(created.status, created.text, f"creating service account {SERVICE_ACCOUNT}")
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "kueue-test-cluster-admin"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}
            ],
        }
        created = self.send(
            "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding
        )
        if created.status != 409:
            _ok(created.status, created.text, "binding Kueue's service account to cluster-admin")
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 24 * 3600},
        }
        token = self.send(
            "POST",
            f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SERVICE_ACCOUNT}/token",
            request,
        )
        _ok(token.status, token.text, "a token for Kueue's service account")
        return kubeconfig_for(
            self.directory / "kueue.kubeconfig",
            self.cluster.server,
            self.cluster.pki.ca.cert,
            token=token.body["status"]["token"],
        )

    def _apply_crds(self) -> None:
        names = []
        served: list[tuple[str, str]] = []  # (group/version, plural)
        for path in self.crds:
            crd = yaml.safe_load(path.read_text())
            created = self.send("POST", CRD_PATH, crd)
            if created.status != 409:  # 409: an earlier session's, same schemas
                _ok(created.status, created.text, f"creating the CRD of {path.name}")
            names.append(crd["metadata"]["name"])
            spec = crd["spec"]
            served += [
                (f"{spec['group']}/{v['name']}", spec["names"]["plural"])
                for v in spec["versions"]
                if v.get("served", True)
            ]
        for name in names:
            self._wait(f"CRD {name} to be established", lambda n=name: self._established(n))
        # Established is not yet served: Kueue's start-up fails ("no matches for kind Workload")
        # if discovery does not list the resources when it builds its indexes
        for group_version, plural in served:
            self._wait(
                f"{plural} served under /apis/{group_version}",
                lambda gv=group_version, p=plural: self._discovered(gv, p),
            )

    def _discovered(self, group_version: str, plural: str) -> bool:
        reply = self.send("GET", f"/apis/{group_version}")
        if reply.status != 200:
            return False
        return any(r.get("name") == plural for r in reply.body.get("resources") or [])

    def _established(self, name: str) -> bool:
        reply = self.send("GET", f"{CRD_PATH}/{name}")
        conditions = reply.body.get("status", {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    def _job_webhook_answers(self) -> bool:
        """A dry-run Job that names a LocalQueue comes back suspended: the API server calls
        Kueue's mutating webhook (it takes a moment to see a new webhook configuration)."""
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "generateName": "kueue-probe-",
                "labels": {"kueue.x-k8s.io/queue-name": "probe"},
            },
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}],
                    }
                }
            },
        }
        reply = self.send("POST", "/apis/batch/v1/namespaces/default/jobs?dryRun=All", job)
        return reply.status == 201 and reply.body["spec"].get("suspend") is True

    def _wait(self, what: str, ready: Any) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready():
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"gave up waiting for {what} after {READY_TIMEOUT_S:.0f} s; Kueue's log:\n"
                    + log_tail(self.cluster.directory / "kueue.log")
                )
            time.sleep(0.5)

    def stop(self) -> None:
        """Remove the webhook configurations, then stop the manager (by pid)."""
        for hooks in self._webhooks:
            self.send("DELETE", f"{WEBHOOK_PATHS[hooks['kind']]}/{hooks['metadata']['name']}")
        self._webhooks = []
        self.cluster.stop_program("kueue")
        self.admin.close()
