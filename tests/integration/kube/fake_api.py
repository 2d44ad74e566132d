"""A stand-in Kubernetes API server on loopback, for the official client to talk to over real HTTP.

It answers as the real API server does, in the shapes that matter to gpuplex:

- errors are `Status` objects (`kind: Status, apiVersion: v1, status: Failure, message, reason,
  details, code`); a missing object's Status names it in `details`; an API group/version the
  server does not serve at all (ServiceMonitor without the Prometheus operator's definitions) is
  a plain-text `404 page not found`, not a Status; a resource a served group lacks is a Status
  with empty `details`;
- with `rules=` (a ClusterRole's rules) every request is checked by RBAC first, and refused 403
  when no rule allows it, even for groups the server does not serve;
- creating in a namespace that is being deleted is refused 403 with the cause
  `NamespaceTerminating` (deleting a namespace leaves it Terminating until `finish_deletions()`,
  as the namespace controller takes its time);
- changing a Job's `spec.template` is refused 422 with `details.causes[].field: spec.template`
  and a message that dumps the whole template;
- server-side apply keeps per-manager field ownership (`fake_fields`): fields other managers set
  (`patch_as`, as a `kubectl patch` does) survive gpuplex's forced apply, and show in
  `managedFields`; an apply that changes nothing leaves `resourceVersion` alone;
- lists are `<Kind>List` objects with `metadata.resourceVersion`, and their items carry no
  `apiVersion`/`kind` for built-in kinds (custom resources' items do);
- JSON patches (`application/json-patch+json`: test, remove, replace, add) are applied as the
  manager named by `fieldManager`, a failed `test` answered 422;
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

from tests.integration.kube.fake_fields import Ownership

APPLY_PATCH = "application/apply-patch+yaml"
JSON_PATCH = "application/json-patch+json"
#: What the real API server answers for a group/version it does not serve (text/plain).
PAGE_NOT_FOUND = "404 page not found\n"
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

#: Metadata the server keeps itself, whoever applies.
_BOOKKEEPING = ("uid", "creationTimestamp", "resourceVersion", "generation", "deletionTimestamp")

#: RBAC verbs by HTTP method, for one object (a GET of a collection is `list`).
_VERBS = {"GET": "get", "PATCH": "patch", "DELETE": "delete", "PUT": "update", "POST": "create"}


def rbac_allows(rules: list[dict[str, Any]], verb: str, group: str, resource: str) -> bool:
    """Whether a ClusterRole's rules allow `verb` on `resource` in `group` (`*` matches all)."""
    for rule in rules:
        if (
            (group in rule.get("apiGroups", []) or "*" in rule.get("apiGroups", []))
            and (resource in rule.get("resources", []) or "*" in rule.get("resources", []))
            and (verb in rule.get("verbs", []) or "*" in rule.get("verbs", []))
            and not rule.get("resourceNames")
        ):
            return True
    return False


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
        self,
        *,
        token: str = TOKEN,
        crds: bool = True,
        tls: tuple[Path, Path] | None = None,
        rules: list[dict[str, Any]] | None = None,
    ) -> None:
        """`tls`: (certificate, key) files to serve HTTPS with, as every real API server does;
        `rules`: the caller's RBAC rules (None: the caller may do anything)."""
        self.token = token
        self.rules = rules
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
        ownership = Ownership()
        ownership.update("kubectl-create", {}, obj)
        live = self._stored(key, copy.deepcopy(obj), ownership, before=None, commit=True)
        self.objects[key] = live
        return live

    def patch_as(
        self, manager: str, api_version: str, kind: str, name: str, namespace: str, patch: Any
    ) -> dict[str, Any]:
        """Merge-patch a live object as another client would (`kubectl patch` is manager
        `kubectl-patch`): the manager then owns the fields it changed."""
        gv, plural = self._plural_of(api_version, kind)
        key = (gv, plural, namespace, name)
        before = self.objects[key]
        after = merged(before, patch)
        ownership = Ownership.of(before)
        ownership.update(manager, before, after)
        self.objects[key] = self._stored(key, after, ownership, before=before, commit=True)
        return self.objects[key]

    def finish_deletions(self) -> None:
        """What the namespace controller does in its own time: namespaces being deleted go, with
        everything in them."""
        gone = {
            key[3]
            for key, obj in self.objects.items()
            if key[1] == "namespaces" and obj["metadata"].get("deletionTimestamp")
        }
        for key in list(self.objects):
            if (key[3] in gone and key[1] == "namespaces") or key[2] in gone:
                del self.objects[key]

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
            if self.rules is not None:
                refused = self._rbac(request)
                if refused is not None:
                    return 403, refused
            return self._route(request)

    def _absent(self, path: str) -> bool:
        """Whether the object at `path` does not exist (False for a path no object has)."""
        parts = [unquote(part) for part in path.strip("/").split("/")]
        gv, rest = (
            ("v1", parts[2:]) if parts[:1] == ["api"] else (f"{parts[1]}/{parts[2]}", parts[3:])
        )
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        return len(rest) == 2 and (gv, rest[0], namespace, rest[1]) not in self.objects

    def _rbac(self, request: Recorded) -> Any:
        """The real API server authorizes from the path alone, before it looks for the resource:
        a group it does not serve is refused 403 too."""
        parts = [unquote(part) for part in request.path.strip("/").split("/")]
        group, rest = ("", parts[2:]) if parts[:1] == ["api"] else (parts[1], parts[3:])
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        resource = rest[0] if rest else ""
        verb = "list" if request.method == "GET" and len(rest) == 1 else _VERBS[request.method]
        allowed = rbac_allows(self.rules or [], verb, group, resource)
        creating = (
            request.method == "PATCH"
            and request.content_type == APPLY_PATCH
            and self._absent(request.path)
        )
        if allowed and creating:  # an apply that creates needs create too, checked after patch
            verb = "create"
            allowed = rbac_allows(self.rules or [], verb, group, resource)
        if allowed:
            return None
        scope = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
        subject = "system:serviceaccount:gpuplex-system:gpuplex-server"
        shown = f"{resource}.{group}" if group else resource
        named = f' "{rest[1]}"' if len(rest) > 1 else ""
        details: dict[str, Any] = {"kind": resource}
        if group:
            details["group"] = group
        if len(rest) > 1:
            details["name"] = rest[1]
        return status(
            403,
            "Forbidden",
            f'{shown}{named} is forbidden: User "{subject}" cannot {verb} resource "{resource}" '
            f'in API group "{group}"{scope}',
            details,
        )

    def _route(self, request: Recorded) -> tuple[int, Any]:
        if isinstance(request.body, str):  # JSON sent twice over: a quoted string
            return 400, status(
                400,
                "BadRequest",
                "the object provided is unrecognized: couldn't get version/kind; json parse "
                "error: json: cannot unmarshal string into Go value",
            )
        if request.content_type == JSON_PATCH and not isinstance(request.body, list):
            return 400, status(400, "BadRequest", "json: cannot unmarshal object into []Operation")
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
        if not any(served == gv for served, _ in self.resources):
            return 404, PAGE_NOT_FOUND  # the group/version is not served: no Status at all
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
        if request.content_type == JSON_PATCH:
            return self._json_patch(key, request)
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
        existing = self.objects.get(key)
        if namespace:
            refused = self._namespace_refusal(namespace, creating=existing is None, kind=key[1])
            if refused is not None:
                return refused
        commit = (request.query.get("dryRun") or [""])[0] != "All"
        ownership = Ownership.of(existing)
        obj = ownership.apply(manager, existing, body)
        obj = {"apiVersion": gv, "kind": kind, **obj}
        kept = (existing or {}).get("metadata", {})
        obj["metadata"] = {
            **{k: v for k, v in kept.items() if k in _BOOKKEEPING},
            **obj.get("metadata", {}),
            "name": name,
            **({"namespace": namespace} if namespace else {}),
        }
        if existing is not None:
            if "status" in existing:
                obj["status"] = copy.deepcopy(existing["status"])
            refused = _immutable(key, existing, obj)
            if refused is not None:
                return 422, refused
        stored = self._stored(key, obj, ownership, before=existing, commit=commit)
        if commit:
            self.objects[key] = stored
        return (201 if existing is None else 200), stored

    def _namespace_refusal(
        self, namespace: str, *, creating: bool, kind: str
    ) -> tuple[int, Any] | None:
        live = self.objects.get(("v1", "namespaces", "", namespace))
        if live is None:
            return 404, status(
                404,
                "NotFound",
                f'namespaces "{namespace}" not found',
                {"name": namespace, "kind": "namespaces"},
            )
        if creating and live["metadata"].get("deletionTimestamp"):
            message = (
                f"unable to create new content in namespace {namespace} because it is being "
                "terminated"
            )
            return 403, status(
                403,
                "Forbidden",
                f"{kind} is forbidden: {message}",
                {
                    "kind": kind,
                    "causes": [
                        {
                            "reason": "NamespaceTerminating",
                            "message": message,
                            "field": "metadata.namespace",
                        }
                    ],
                },
            )
        return None

    def _json_patch(self, key: Key, request: Recorded) -> tuple[int, Any]:
        """RFC 6902 as the API server applies it: every operation or none."""
        existing = self.objects.get(key)
        if existing is None:
            return 404, not_found(key[0], key[1], key[3])
        manager = (request.query.get("fieldManager") or ["kubectl-patch"])[0]
        obj = copy.deepcopy(existing)
        for operation in request.body or []:
            failed = _json_patch_operation(obj, operation)
            if failed is not None:
                return 422, status(422, "Invalid", failed)
        ownership = Ownership.of(existing)
        ownership.update(manager, existing, obj)
        commit = (request.query.get("dryRun") or [""])[0] != "All"
        stored = self._stored(key, obj, ownership, before=existing, commit=commit)
        if commit:
            self.objects[key] = stored
        return 200, stored

    def _stored(
        self,
        key: Key,
        obj: dict[str, Any],
        ownership: Ownership,
        *,
        before: dict[str, Any] | None,
        commit: bool,
    ) -> dict[str, Any]:
        """`obj` with what the server keeps about it: uid and creation time once, a new
        resourceVersion on every change (a dry run takes none), generation when the spec
        changes, and every manager's managedFields entry."""
        gv, plural = key[0], key[1]
        meta = obj["metadata"]
        _server_defaults(plural, obj)
        meta["managedFields"] = ownership.managed_fields(gv, CREATED_AT)
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
        if plural == "namespaces":
            obj.setdefault("status", {"phase": "Active"})
        return obj

    def _delete(self, key: Key, request: Recorded) -> tuple[int, Any]:
        gv, plural, _, name = key
        found = self.objects.get(key)
        if found is None:
            return 404, not_found(gv, plural, name)
        commit = (request.query.get("dryRun") or [""])[0] != "All"
        if plural == "namespaces":
            # the namespace controller empties it first: until then it is Terminating
            gone = copy.deepcopy(found)
            gone["metadata"]["deletionTimestamp"] = CREATED_AT
            gone["status"] = {"phase": "Terminating"}
            if commit:
                self.objects[key] = gone
            return 200, gone
        if commit:
            del self.objects[key]
        return 200, {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {"name": name, "kind": plural, "uid": found["metadata"].get("uid")},
        }


def _content(obj: dict[str, Any]) -> dict[str, Any]:
    """All of an object that a write can change, managed fields included (a change of owner alone
    is a change: it takes a new resourceVersion)."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("resourceVersion", "generation")}
    return {**obj, "metadata": meta}


def _immutable(key: Key, before: dict[str, Any], after: dict[str, Any]) -> Any:
    """The real API server refuses a change of a Job's pod template, and its message dumps the
    whole template in Go syntax (thousands of characters)."""
    if key[1] != "jobs":
        return None
    old = (before.get("spec") or {}).get("template")
    new = (after.get("spec") or {}).get("template")
    if old == new:
        return None
    dump = "core.PodTemplateSpec{" + repr(new) * 20 + "}"
    cause = f"Invalid value: {dump}: field is immutable"
    return status(
        422,
        "Invalid",
        f'Job.batch "{key[3]}" is invalid: spec.template: {cause}',
        {
            "name": key[3],
            "group": "batch",
            "kind": "Job",
            "causes": [{"reason": "FieldValueInvalid", "message": cause, "field": "spec.template"}],
        },
    )


def _json_pointer(path: str) -> list[str]:
    return [part.replace("~1", "/").replace("~0", "~") for part in path.split("/")[1:]]


def _json_patch_operation(obj: Any, operation: dict[str, Any]) -> str | None:
    """Apply one operation in place; the API's message when it fails."""
    parts = _json_pointer(operation["path"])
    parent: Any = obj
    for part in parts[:-1]:
        try:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        except (KeyError, IndexError, ValueError):
            return f"the server rejected our request due to an error in our request: {part}"
    last = parts[-1]
    op = operation["op"]
    index: Any = int(last) if isinstance(parent, list) and last.isdigit() else last
    present = (0 <= index < len(parent)) if isinstance(parent, list) else last in parent
    if op == "test":
        if not present or parent[index] != operation.get("value"):
            return f"the server rejected our request due to an error in our request: testing value {operation['path']} failed"
        return None
    if op in ("remove", "replace") and not present:
        return f"the server rejected our request due to an error in our request: {op} operation does not apply: doc is missing path: {operation['path']}"
    if op == "remove":
        del parent[index]
    elif op in ("replace", "add"):
        parent[index] = copy.deepcopy(operation["value"])
    return None


def _server_defaults(plural: str, obj: dict[str, Any]) -> None:
    """Fields the real API server fills in on its own."""
    if plural == "namespaces":
        labels = obj["metadata"].setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
    if plural == "deployments":
        obj.setdefault("spec", {}).setdefault("revisionHistoryLimit", 10)
        obj["spec"].setdefault("progressDeadlineSeconds", 600)


def _parsed(raw: bytes, content_type: str) -> Any:
    if not raw:
        return None
    if "json" in content_type:
        return json.loads(raw)
    return yaml.safe_load(raw)


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
                body=_parsed(raw, self.headers.get("Content-Type") or ""),
            )
            code, body = api.handle(request)
            plain = isinstance(body, str)
            data = body.encode() if plain else json.dumps(body).encode()
            self.send_response(code)
            self.send_header(
                "Content-Type", "text/plain; charset=utf-8" if plain else "application/json"
            )
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PATCH = do_DELETE = do_POST = do_PUT = _serve

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: tests read `api.requests`."""

    return Handler
