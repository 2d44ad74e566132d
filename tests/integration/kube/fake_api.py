"""A stand-in Kubernetes API server on loopback, for the official client to talk to over real HTTP.

It answers as the real API server does, in the shapes that matter to gpuplex:

- errors are `Status` objects (`kind: Status, apiVersion: v1, status: Failure, message, reason,
  details, code`); a missing object's Status names it in `details`, a resource the server does
  not serve at all (a custom resource without its definition) has empty `details`;
- lists are `<Kind>List` objects with `metadata.resourceVersion`, and their items carry no
  `apiVersion`/`kind` for built-in kinds (custom resources' items do);
- server-side apply (PATCH `application/apply-patch+yaml`) needs `fieldManager`, answers 201 when
  it creates and 200 otherwise, with the object echoed back with `uid`, `resourceVersion`,
  `generation`, `creationTimestamp` and `managedFields`; a few server defaults are filled in
  (a Namespace's `kubernetes.io/metadata.name` label and finalizer, a Deployment's
  `revisionHistoryLimit`) so a diff must tell them from real changes;
- `dryRun=All` answers as if written and stores nothing; a namespaced object in a namespace that
  does not exist is refused with 404 `namespaces "x" not found`.

Every request is recorded (method, path, query, content type, Authorization, parsed body) so tests
assert exactly what went over the wire. `fail()` makes one method+path answer a given Status.
"""

from __future__ import annotations

import copy
import json
import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

APPLY_PATCH = "application/apply-patch+yaml"
#: The bearer token the fake accepts; any other is answered 401.
TOKEN = "test-token"  # noqa: S105
CREATED_AT = "2025-03-01T12:00:00Z"

#: (group/version, plural) -> (kind, namespaced). Written out here, not taken from gpuplex's
#: table, so a wrong path in gpuplex is a 404 here.
BUILTIN: dict[tuple[str, str], tuple[str, bool]] = {
    ("v1", "namespaces"): ("Namespace", False),
    ("v1", "nodes"): ("Node", False),
    ("v1", "configmaps"): ("ConfigMap", True),
    ("v1", "serviceaccounts"): ("ServiceAccount", True),
    ("v1", "services"): ("Service", True),
    ("v1", "resourcequotas"): ("ResourceQuota", True),
    ("v1", "limitranges"): ("LimitRange", True),
    ("scheduling.k8s.io/v1", "priorityclasses"): ("PriorityClass", False),
    ("rbac.authorization.k8s.io/v1", "clusterroles"): ("ClusterRole", False),
    ("rbac.authorization.k8s.io/v1", "clusterrolebindings"): ("ClusterRoleBinding", False),
    ("rbac.authorization.k8s.io/v1", "roles"): ("Role", True),
    ("rbac.authorization.k8s.io/v1", "rolebindings"): ("RoleBinding", True),
    ("admissionregistration.k8s.io/v1", "validatingadmissionpolicies"): (
        "ValidatingAdmissionPolicy",
        False,
    ),
    ("admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings"): (
        "ValidatingAdmissionPolicyBinding",
        False,
    ),
    ("networking.k8s.io/v1", "networkpolicies"): ("NetworkPolicy", True),
    ("apps/v1", "deployments"): ("Deployment", True),
    ("batch/v1", "jobs"): ("Job", True),
    ("autoscaling/v2", "horizontalpodautoscalers"): ("HorizontalPodAutoscaler", True),
}
CUSTOM: dict[tuple[str, str], tuple[str, bool]] = {
    ("monitoring.coreos.com/v1", "servicemonitors"): ("ServiceMonitor", True),
    ("monitoring.coreos.com/v1", "podmonitors"): ("PodMonitor", True),
}

#: (group/version, plural, namespace or "", name)
Key = tuple[str, str, str, str]


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    content_type: str | None
    authorization: str | None
    body: Any


def status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> Any:
    """A failure `Status`, as the API server writes it."""
    out: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details if details is not None else {},
        "code": code,
    }
    return out


def not_found(gv: str, plural: str, name: str) -> Any:
    group = gv.rpartition("/")[0]
    details: dict[str, Any] = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    resource = f"{plural}.{group}" if group else plural
    return status(404, "NotFound", f'{resource} "{name}" not found', details)


NOT_SERVED = status(404, "NotFound", "the server could not find the requested resource")


def fields_v1(value: Any) -> Any:
    """`managedFields[].fieldsV1`: the set of fields the manager owns, as the API writes it
    (maps as `f:<key>`; list members reduced to the list itself)."""
    if isinstance(value, dict):
        return {f"f:{key}": fields_v1(child) for key, child in value.items()}
    return {}


def merged(base: Any, patch: Any) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            out[key] = merged(base.get(key), value)
        return out
    return copy.deepcopy(patch)


class FakeKubeApi:
    """Start with `with FakeKubeApi() as api:`; `api.url` is the server address for a
    kubeconfig. Tests read `api.requests` and `api.objects`, seed objects with `put`."""

    def __init__(
        self, *, token: str = TOKEN, crds: bool = True, tls: tuple[Path, Path] | None = None
    ) -> None:
        """`tls`: (certificate, key) files to serve HTTPS with, as every real API server does."""
        self.token = token
        self.resources = {**BUILTIN, **(CUSTOM if crds else {})}
        self.objects: dict[Key, dict[str, Any]] = {}
        self.requests: list[Recorded] = []
        self.failures: dict[tuple[str, str], Any] = {}
        self._version = 1000
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = False  # server_close joins every request thread
        self._scheme = "http"
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            self._scheme = "https"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), name="fake-kube-api"
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{self._scheme}://{host!s}:{port}"

    def __enter__(self) -> FakeKubeApi:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Seed a live object as if another client created it earlier."""
        gv, plural = self._plural_of(obj["apiVersion"], obj["kind"])
        meta = obj["metadata"]
        key = (gv, plural, meta.get("namespace", ""), meta["name"])
        live = self._stored(
            key,
            copy.deepcopy(obj),
            manager="kubectl-create",
            operation="Update",
            before=None,
            commit=True,
        )
        self.objects[key] = live
        return live

    def get(self, api_version: str, kind: str, name: str, namespace: str = "") -> Any:
        gv, plural = self._plural_of(api_version, kind)
        return self.objects.get((gv, plural, namespace, name))

    def fail(self, method: str, path: str, answer: Any) -> None:
        self.failures[(method, path)] = answer

    def writes(self) -> list[Recorded]:
        return [r for r in self.requests if r.method in ("PATCH", "DELETE", "POST", "PUT")]

    def _plural_of(self, api_version: str, kind: str) -> tuple[str, str]:
        for (gv, plural), (known, _) in self.resources.items():
            if gv == api_version and known == kind:
                return gv, plural
        raise KeyError(f"{api_version} {kind}")

    # -- request handling (runs on the server's threads) --

    def handle(self, request: Recorded) -> tuple[int, Any]:
        with self._lock:
            self.requests.append(request)
            scheme, _, token = (request.authorization or "").partition(" ")
            if scheme.lower() != "bearer" or token != self.token:  # the scheme is case-blind
                return 401, status(401, "Unauthorized", "Unauthorized")
            injected = self.failures.get((request.method, request.path))
            if injected is not None:
                return int(injected["code"]), injected
            return self._route(request)

    def _route(self, request: Recorded) -> tuple[int, Any]:
        parts = [unquote(part) for part in request.path.strip("/").split("/")]
        if parts[:2] == ["api", "v1"]:
            gv, rest = "v1", parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            gv, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        else:
            return 404, NOT_SERVED
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or (gv, rest[0]) not in self.resources:
            return 404, NOT_SERVED
        plural = rest[0]
        kind, namespaced = self.resources[(gv, plural)]
        if namespace and not namespaced:
            return 404, NOT_SERVED
        if len(rest) == 1 and request.method == "GET":
            return self._list(gv, plural, kind, namespace, request)
        if len(rest) != 2 or (namespaced and not namespace):
            return 405, status(405, "MethodNotAllowed", "the server does not allow this method")
        key = (gv, plural, namespace, rest[1])
        if request.method == "GET":
            found = self.objects.get(key)
            return (200, found) if found else (404, not_found(gv, plural, rest[1]))
        if request.method == "PATCH":
            return self._apply(key, kind, request)
        if request.method == "DELETE":
            return self._delete(key, request)
        return 405, status(405, "MethodNotAllowed", "the server does not allow this method")

    def _list(
        self, gv: str, plural: str, kind: str, namespace: str, request: Recorded
    ) -> tuple[int, Any]:
        wanted = {}
        for term in (request.query.get("labelSelector") or [""])[0].split(","):
            if term:
                name, _, value = term.partition("=")
                wanted[name] = value
        items = []
        for (item_gv, item_plural, item_ns, _), obj in sorted(self.objects.items()):
            if (item_gv, item_plural) != (gv, plural) or (namespace and item_ns != namespace):
                continue
            labels = obj["metadata"].get("labels") or {}
            if all(labels.get(name) == value for name, value in wanted.items()):
                item = copy.deepcopy(obj)
                if (gv, plural) in BUILTIN:
                    del item["apiVersion"], item["kind"]
                items.append(item)
        body = {
            "kind": f"{kind}List",
            "apiVersion": gv,
            "metadata": {"resourceVersion": str(self._version)},
            "items": items,
        }
        return 200, body

    def _apply(self, key: Key, kind: str, request: Recorded) -> tuple[int, Any]:
        gv, _, namespace, name = key
        if request.content_type != APPLY_PATCH:
            return 415, status(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types "
                "include: application/json-patch+json, application/merge-patch+json, "
                "application/apply-patch+yaml, application/strategic-merge-patch+json",
            )
        manager = (request.query.get("fieldManager") or [""])[0]
        if not manager:
            return 422, status(
                422, "Invalid", "fieldManager: Required value: is required for apply patch"
            )
        body = request.body
        if not isinstance(body, dict) or body.get("kind") != kind or body.get("apiVersion") != gv:
            return 400, status(400, "BadRequest", f"the body is not a {gv} {kind}")
        meta = body.get("metadata") or {}
        if meta.get("name") != name or (meta.get("namespace") or "") != namespace:
            return 400, status(
                400,
                "BadRequest",
                f"the name of the object ({meta.get('name')} in namespace "
                f"{meta.get('namespace')}) does not match the name on the URL ({name})",
            )
        if namespace and ("v1", "namespaces", "", namespace) not in self.objects:
            return 404, status(
                404,
                "NotFound",
                f'namespaces "{namespace}" not found',
                {"name": namespace, "kind": "namespaces"},
            )
        existing = self.objects.get(key)
        commit = (request.query.get("dryRun") or [""])[0] != "All"
        obj = merged(existing or {}, body)
        stored = self._stored(
            key, obj, manager=manager, operation="Apply", before=existing, commit=commit
        )
        if commit:
            self.objects[key] = stored
        return (201 if existing is None else 200), stored

    def _stored(
        self,
        key: Key,
        obj: dict[str, Any],
        *,
        manager: str,
        operation: str,
        before: dict[str, Any] | None,
        commit: bool,
    ) -> dict[str, Any]:
        """`obj` with what the server keeps about it: uid and creation time once, a new
        resourceVersion on every change (a dry run takes none), generation when the spec
        changes, and the manager's managedFields entry."""
        gv, plural = key[0], key[1]
        meta = obj["metadata"]
        _server_defaults(plural, obj)
        version = self._version + 1
        if before is None:
            meta["uid"] = f"00000000-0000-4000-8000-{version:012d}"
            meta["creationTimestamp"] = CREATED_AT
            meta["generation"] = 1
            meta["resourceVersion"] = str(version)
        elif _content(before) != _content(obj):
            meta["resourceVersion"] = str(version)
            if before.get("spec") != obj.get("spec"):
                meta["generation"] = int(before["metadata"].get("generation", 1)) + 1
        else:
            version = self._version
        if commit:
            self._version = version
        owned = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "status")}
        owned["metadata"] = {k: v for k, v in meta.items() if k in ("labels", "annotations")}
        meta["managedFields"] = [
            {
                "manager": manager,
                "operation": operation,
                "apiVersion": gv,
                "time": CREATED_AT,
                "fieldsType": "FieldsV1",
                "fieldsV1": fields_v1(owned),
            }
        ]
        if plural == "namespaces":
            obj.setdefault("status", {"phase": "Active"})
        return obj

    def _delete(self, key: Key, request: Recorded) -> tuple[int, Any]:
        gv, plural, _, name = key
        found = self.objects.get(key)
        if found is None:
            return 404, not_found(gv, plural, name)
        if (request.query.get("dryRun") or [""])[0] != "All":
            del self.objects[key]
        if plural == "namespaces":
            gone = copy.deepcopy(found)
            gone["metadata"]["deletionTimestamp"] = CREATED_AT
            gone["status"] = {"phase": "Terminating"}
            return 200, gone
        return 200, {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": name, "kind": plural, "uid": found["metadata"].get("uid")},
        }


def _content(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {
        k: v
        for k, v in obj["metadata"].items()
        if k not in ("resourceVersion", "generation", "managedFields")
    }
    return {**obj, "metadata": meta}


def _server_defaults(plural: str, obj: dict[str, Any]) -> None:
    """Fields the real API server fills in on its own."""
    if plural == "namespaces":
        labels = obj["metadata"].setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
    if plural == "deployments":
        obj.setdefault("spec", {}).setdefault("revisionHistoryLimit", 10)
        obj["spec"].setdefault("progressDeadlineSeconds", 600)


def _handler(api: FakeKubeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 5  # an idle keep-alive connection ends, so the server can stop
        disable_nagle_algorithm = True  # headers and body go in two writes

        def _serve(self) -> None:
            url = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            request = Recorded(
                method=self.command,
                path=url.path,
                query=parse_qs(url.query),
                content_type=self.headers.get("Content-Type"),
                authorization=self.headers.get("Authorization"),
                body=yaml.safe_load(raw) if raw else None,
            )
            code, body = api.handle(request)
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = do_DELETE = do_POST = do_PUT = _serve

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: tests read `api.requests`."""

    return Handler
