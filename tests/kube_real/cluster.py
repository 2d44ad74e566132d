"""A real Kubernetes control plane on 127.0.0.1 for one test session: etcd, kube-apiserver (TLS,
client certificates, RBAC, the admission plugins a production cluster runs), kube-controller-manager
and kube-scheduler, no kubelets. Every port is a free one picked at start, so two sessions on one
machine do not meet; everything is stopped by pid at the end, the API server before etcd (an API
server whose etcd is gone may hang on SIGTERM)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from gpuplex.kube.api import Reply, Transport
from tests.kube_real.binaries import Binaries
from tests.kube_real.pki import Pair, Pki, make_pki
from tests.ports import free_port as free_port  # imported from here by the kube_real tests

ADMISSION_PLUGINS = (
    "NamespaceLifecycle,LimitRanger,ServiceAccount,Priority,DefaultTolerationSeconds,"
    "ResourceQuota,ValidatingAdmissionPolicy,PodSecurity"
)
#: Without kubelets the node-lifecycle controller would taint every node as unreachable.
CONTROLLERS = "*,-node-lifecycle-controller,-cloud-node-lifecycle-controller"
START_TIMEOUT_S = 120.0


class ControlPlaneError(RuntimeError):
    """A program of the control plane did not start; the message ends with its log's tail."""


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class _Program:
    name: str
    process: subprocess.Popen[bytes]
    log: Path


def kubeconfig_for(
    path: Path, server: str, ca: Path, user: Pair | None = None, token: str = ""
) -> Path:
    """A kubeconfig with one context, `gpuplex-test`, authenticating with a client certificate or
    a bearer token."""
    credentials: dict[str, str] = (
        {"client-certificate": str(user.cert), "client-key": str(user.key)}
        if user is not None
        else {"token": token}
    )
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "test", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": "user", "user": credentials}],
        "contexts": [{"name": "gpuplex-test", "context": {"cluster": "test", "user": "user"}}],
        "current-context": "gpuplex-test",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


@dataclass
class ControlPlane:
    """Start with `with ControlPlane(binaries, directory) as cluster:`; `cluster.kubeconfig` is the
    admin's (system:masters)."""

    binaries: Binaries
    directory: Path
    pki: Pki = field(init=False)
    server: str = field(init=False, default="")
    kubeconfig: Path = field(init=False)
    _programs: list[_Program] = field(init=False, default_factory=list)

    def __enter__(self) -> ControlPlane:
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

    # -- start --

    def _start(self) -> None:
        self.pki = make_pki(self.directory / "pki")
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        self._spawn(
            "etcd",
            [
                str(self.binaries.etcd),
                "--data-dir",
                str(self.directory / "etcd"),
                "--name",
                "gpuplex-test",
                "--listen-client-urls",
                etcd_url,
                "--advertise-client-urls",
                etcd_url,
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-cluster",
                f"gpuplex-test=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",
            ],
        )
        self._wait("etcd", lambda: http_ok(f"{etcd_url}/health"))
        pki = self.pki
        self.server = f"https://127.0.0.1:{api_port}"
        self._spawn(
            "kube-apiserver",
            [
                str(self.binaries.apiserver),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                "--endpoint-reconciler-type=none",
                f"--tls-cert-file={pki.apiserver.cert}",
                f"--tls-private-key-file={pki.apiserver.key}",
                f"--client-ca-file={pki.ca.cert}",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range=10.96.0.0/16",
                "--authorization-mode=RBAC",
                f"--enable-admission-plugins={ADMISSION_PLUGINS}",
                "--allow-privileged=false",
                "--profiling=false",
            ],
        )
        self.kubeconfig = kubeconfig_for(
            self.directory / "admin.kubeconfig", self.server, pki.ca.cert, pki.admin
        )
        self._wait("kube-apiserver", lambda: self.api_ok("/readyz"))
        for name, user, port, extra in (
            (
                "kube-controller-manager",
                pki.controller_manager,
                free_port(),
                [
                    f"--service-account-private-key-file={pki.sa_key}",
                    f"--root-ca-file={pki.ca.cert}",
                    f"--cluster-signing-cert-file={pki.ca.cert}",
                    f"--cluster-signing-key-file={pki.ca.key}",
                    "--use-service-account-credentials=true",
                    f"--controllers={CONTROLLERS}",
                ],
            ),
            ("kube-scheduler", pki.scheduler, free_port(), []),
        ):
            config = kubeconfig_for(
                self.directory / f"{name}.kubeconfig", self.server, pki.ca.cert, user
            )
            binary = (
                self.binaries.controller_manager
                if name == "kube-controller-manager"
                else self.binaries.scheduler
            )
            self._spawn(
                name,
                [
                    str(binary),
                    f"--kubeconfig={config}",
                    f"--authentication-kubeconfig={config}",
                    f"--authorization-kubeconfig={config}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={port}",
                    "--leader-elect=false",
                    *extra,
                ],
            )
        # the controllers run once the default namespace's service account exists
        self._wait(
            "kube-controller-manager",
            lambda: self.api_ok("/api/v1/namespaces/default/serviceaccounts/default"),
        )

    def start_program(
        self, name: str, argv: list[str], ready: Callable[[], bool], env: dict[str, str]
    ) -> Path:
        """Start one more program beside the control plane (a controller such as Kueue) and wait
        until `ready()`; it stops with the rest (before the API server) unless `stop_program`
        stops it first. Returns its log."""
        self._spawn(name, argv, env)
        self._wait(name, ready)
        return self.directory / f"{name}.log"

    def stop_program(self, name: str) -> None:
        for program in [p for p in self._programs if p.name == name]:
            _stop(program.process)
            self._programs.remove(program)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = self.directory / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(  # noqa: S603 - our own binaries, arguments written here
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: stopped as a whole
                cwd=self.directory,
                env=env,
            )
        self._programs.append(_Program(name, process, log))

    def _wait(self, name: str, ready: Callable[[], bool]) -> None:
        program = next(p for p in self._programs if p.name == name)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (ready() and program.process.poll() is None):  # ours, not a stranger
            if program.process.poll() is not None:
                raise ControlPlaneError(
                    f"{name} exited with {program.process.returncode} while starting:\n"
                    + log_tail(program.log)
                )
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{name} did not become ready in {START_TIMEOUT_S:.0f} s:\n"
                    + log_tail(program.log)
                )
            time.sleep(0.2)

    # -- talking to it --

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca.cert))
        context.load_cert_chain(str(self.pki.admin.cert), str(self.pki.admin.key))
        return context

    def api_ok(self, path: str) -> bool:
        """Whether a GET of `path` answers 2xx, as the admin."""
        try:
            with urllib.request.urlopen(  # noqa: S310 - https to our own server
                self.server + path, context=self.ssl_context(), timeout=5
            ) as reply:
                return 200 <= int(reply.status) < 300
        except (urllib.error.URLError, OSError):
            return False

    # -- stop --

    def stop(self) -> None:
        """Stop every program by pid, newest first (etcd last), SIGKILL after 15 s."""
        for program in reversed(self._programs):
            _stop(program.process)
        self._programs.clear()


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:  # noqa: S310 - our own etcd, Kueue
            return 200 <= int(reply.status) < 300
    except (urllib.error.URLError, OSError):
        return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(15)


def send_json(admin: Transport, method: str, path: str, body: Any = None, **query: str) -> Reply:
    """One request as the tests write them: a body as JSON (or `content_type=`), query
    parameters as keywords (`dryRun="All"`, `labelSelector=...`)."""
    content_type = query.pop("content_type", "application/json")
    return admin.send(
        method,
        path,
        query=list(query.items()),
        body=None if body is None else json.dumps(body),
        content_type=content_type if body is not None else None,
    )


def wait_until(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    """`check()`'s first truthy answer, asked every half second; an AssertionError naming `what`
    after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what} after {timeout:.0f} s")
        time.sleep(0.5)
    return result
