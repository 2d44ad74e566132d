"""Requests to the Kubernetes API for one object or one kind, and what each answer means.

`KubeApi` gets, server-side applies, JSON-patches, lists and deletes through a `Transport` (the
official client in `gpuplex.kube.apply`, or a test's fake), and turns every refusal into a gpuplex
error with one line that names the verb, the object and the API's reason:

- a 404 for a whole resource: a custom resource's group/version the server does not serve (it
  answers plain text, `404 page not found`) or a built-in kind a too-old server lacks: NotServed;
- 401, and a 403 from authorization (RBAC: `User "x" cannot patch resource ...`): KubeForbidden;
  a 403 caused by `NamespaceTerminating`: KubeRetryLater (exit 5); any other 403 is admission
  refusing the object (`exceeded quota`, a webhook): a plain KubeApiError with the API's reason;
- a 422 on an immutable field (a Job's `spec.template`): Immutable, naming the field, without the
  thousands of characters of object dump the server sends with it;
- a 404 for a namespace that does not exist: NamespaceMissing.

`VERB_OF_METHOD` and `access_needed` say which RBAC verbs these requests need: the reconciler's
ClusterRole is derived from them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuplex.errors import KubeApiError, KubeForbidden, KubeRetryLater
from gpuplex.kube.foreign import ForeignField, removal
from gpuplex.kube.naming import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    MIN_KUBERNETES,
    SET_LABEL,
    Manifest,
)
from gpuplex.kube.resources import ResourceKind, kinds_of_set

FIELD_MANAGER = "gpuplex"
APPLY_PATCH = "application/apply-patch+yaml"
JSON_PATCH = "application/json-patch+json"
#: The longest API message gpuplex repeats; a refused Job template change dumps thousands of
#: characters of Go syntax.
MESSAGE_LIMIT = 300


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    #: The JSON body ({} when there is none, or it is not JSON).
    body: dict[str, Any] = field(default_factory=dict)
    text: str = ""


class Transport(Protocol):
    @property
    def address(self) -> str: ...

    source: str

    def send(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: str | None = None,
        content_type: str | None = None,
    ) -> Reply: ...


class NotServed(KubeApiError):
    """The API does not serve the kind at all: a custom resource whose definition is missing."""


class Immutable(KubeApiError):
    """The change needs a field the API server keeps immutable (a Job's `spec.template`)."""

    def __init__(self, message: str, fields: tuple[str, ...]) -> None:
        super().__init__(message)
        self.fields = fields


class NamespaceMissing(KubeApiError):
    """An object was refused because its namespace does not exist."""

    def __init__(self, message: str, namespace: str) -> None:
        super().__init__(message)
        self.namespace = namespace


#: The RBAC verbs each KubeApi method's request needs: get (GET of one object); patch for a
#: server-side apply, its dry run and the removal of other managers' fields, and create too
#: where an apply creates the object (the API server checks both); list (GET of a collection,
#: for prune) and delete (prune, and its dry run in apply's check and in diff).
#: `access_needed` derives the reconciler's role from this.
VERB_OF_METHOD = {  # _patch is not a request of its own: apply and remove_fields call it
    "get": ("get",),
    "apply": ("patch", "create"),
    "remove_fields": ("patch",),
    "list": ("list",),
    "delete": ("delete",),
}


def access_needed(set_name: str) -> dict[tuple[str, str], set[str]]:
    """(API group, resource) -> the RBAC verbs that applying, diffing and pruning the set use:
    every kind of the set is read and applied; the prunable ones are also listed and deleted."""
    needed: dict[tuple[str, str], set[str]] = {}
    for kind in kinds_of_set(set_name):
        methods = ["get", "apply", "remove_fields"]
        if kind.prunable:
            methods += ["list", "delete"]
        if kind.kind == "Node":  # only ever labelled: an apply never creates a node
            methods = ["get", "remove_fields"]
        needed[(kind.group, kind.plural)] = {v for m in methods for v in VERB_OF_METHOD[m]}
    return needed


class KubeApi:
    """Get, apply, list and delete objects, with the API's refusals as gpuplex errors. Every
    method is in VERB_OF_METHOD: a new request needs a line there, and so reaches the role."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    def get(self, kind: ResourceKind, manifest: Manifest) -> Manifest | None:
        name, namespace = object_name(manifest)
        reply = self.transport.send("GET", kind.object_path(name, namespace))
        if reply.status == 404 and not _resource_missing(reply):
            return None
        self._check("get", kind, name, namespace, reply)
        return reply.body

    def apply(self, kind: ResourceKind, manifest: Manifest, *, dry_run: bool) -> Reply:
        return self._patch(kind, manifest, manifest, APPLY_PATCH, force=True, dry_run=dry_run)

    def remove_fields(
        self, kind: ResourceKind, live: Manifest, fields: list[ForeignField], *, dry_run: bool
    ) -> Reply:
        """Remove fields other managers set, in one JSON patch that fails (422) if a container
        moved since `live` was read."""
        return self._patch(kind, live, removal(fields), JSON_PATCH, force=False, dry_run=dry_run)

    def _patch(
        self,
        kind: ResourceKind,
        target: Manifest,
        body: Any,
        content_type: str,
        *,
        force: bool,
        dry_run: bool,
    ) -> Reply:
        name, namespace = object_name(target)
        query = [("fieldManager", FIELD_MANAGER)]
        if force:
            query.append(("force", "true"))
        if dry_run:
            query.append(("dryRun", "All"))
        reply = self.transport.send(
            "PATCH",
            kind.object_path(name, namespace),
            query=query,
            body=json.dumps(body, separators=(",", ":")),
            content_type=content_type,
        )
        self._check("patch", kind, name, namespace, reply)
        return reply

    def list(self, kind: ResourceKind, set_name: str) -> list[Manifest]:
        """Every object of `kind` with this set's labels, in all namespaces."""
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY},{SET_LABEL}={set_name}"
        reply = self.transport.send(
            "GET", kind.collection_path(), query=[("labelSelector", selector)]
        )
        self._check("list", kind, "", None, reply)
        items = reply.body.get("items") or []
        return [item for item in items if isinstance(item, dict)]

    def delete(self, kind: ResourceKind, item: Manifest, *, dry_run: bool) -> None:
        name, namespace = object_name(item)
        query = [("propagationPolicy", "Background")]  # a Job's pods go with it
        if dry_run:
            query.append(("dryRun", "All"))
        reply = self.transport.send("DELETE", kind.object_path(name, namespace), query=query)
        if reply.status == 404 and not _resource_missing(reply):
            return  # already gone, e.g. with its namespace
        self._check("delete", kind, name, namespace, reply)

    def _check(
        self, verb: str, kind: ResourceKind, name: str, namespace: str | None, reply: Reply
    ) -> None:
        if 200 <= reply.status < 300:
            return
        raise failure(self.transport, verb, kind, name, namespace, reply)


def failure(
    transport: Transport,
    verb: str,
    kind: ResourceKind,
    name: str,
    namespace: str | None,
    reply: Reply,
) -> KubeApiError:
    """The gpuplex error for a refused request, naming what was asked and the API's reason."""
    causes = _causes(reply)
    message = _short(str(reply.body.get("message") or reply.text.strip() or "no message"))
    what = f"{kind.resource} {name!r}" if name else kind.resource
    if namespace:
        where = f" in namespace {namespace}"
    else:
        where = " in all namespaces" if kind.namespaced else ""
    if reply.status == 401:
        return KubeForbidden(
            f"the Kubernetes API at {transport.address} did not accept the credentials of "
            f"{transport.source} (401 Unauthorized): {message}; log in again or renew the token"
        )
    terminating = [c for c in causes if c.get("reason") == "NamespaceTerminating"]
    if reply.status == 403 and terminating and namespace:
        return KubeRetryLater(
            f"{verb} {what}{where}: namespace {namespace} is still being deleted, and Kubernetes "
            "refuses new objects in it until it is gone; run the command again once "
            f"`kubectl get namespace {namespace}` finds no such namespace"
        )
    if reply.status == 403 and _authorization_denial(reply):
        return KubeForbidden(
            f"forbidden to {verb} {what}{where} at {transport.address} ({transport.source}): "
            f"{message}; ask a cluster admin for a role that allows it"
        )
    if reply.status == 404 and _resource_missing(reply):
        return NotServed(
            f"{verb} {what}{where}: the Kubernetes API at {transport.address} does not serve "
            f"{kind.api_version} {kind.plural}" + _install_hint(kind)
        )
    reason = str(reply.body.get("reason") or "")
    text = f"{verb} {kind.kind}/{namespace + '/' if namespace else ''}{name}: HTTP {reply.status}"
    immutable = tuple(
        str(c.get("field")) for c in causes if "immutable" in str(c.get("message") or "")
    )
    if reply.status == 422 and immutable:
        return Immutable(
            f"{text} {reason}: {', '.join(immutable)} cannot change in place (the API server "
            f"keeps it immutable): delete {kind.kind} {name} and apply again",
            immutable,
        )
    if reply.status == 422 and causes:
        message = "; ".join(
            f"{c.get('field') or 'object'}: {_short(str(c.get('message') or c.get('reason')))}"
            for c in causes
        )
    text += f" {reason}: {message}" if reason else f": {message}"
    if reply.status >= 500:
        text += "; the API server failed: try again, and check its health if it keeps failing"
    missing = _missing_namespace(reply)
    if missing is not None:
        text += (
            f"; create namespace {missing} first (gpuplex creates only its tenants' and its own "
            "namespaces; the GPU operator's comes with the operator)"
        )
        return NamespaceMissing(text, missing)
    return KubeApiError(text)


#: How the API server words a refusal by authorization (RBAC or any other authorizer), as opposed
#: to one by admission (a quota, a webhook, an admission policy), which is no question of roles.
_AUTHORIZATION_DENIAL = re.compile(r'\bUser "[^"]*" cannot \S+ resource ')


def _authorization_denial(reply: Reply) -> bool:
    """Whether a 403 is authorization's (also one without the API server's Status, from a proxy in
    front of it) rather than admission's."""
    message = reply.body.get("message")
    return not message or bool(_AUTHORIZATION_DENIAL.search(str(message)))


def _install_hint(kind: ResourceKind) -> str:
    if kind.group == "monitoring.coreos.com":
        return " (install the Prometheus operator's custom resource definitions)"
    if kind.group == "kueue.x-k8s.io":
        return " (install Kueue: docs/kubernetes.md)"
    return f"; gpuplex needs Kubernetes {MIN_KUBERNETES} or newer"


def _resource_missing(reply: Reply) -> bool:
    """404 for the whole resource (no such API), not for one object. A group/version the server
    does not serve answers plain text (`404 page not found`), a resource a served group lacks a
    Status that names no object in `details`."""
    if reply.status != 404:
        return False
    if reply.body.get("kind") != "Status":
        return True
    details = reply.body.get("details") or {}
    return not details.get("name")


def _causes(reply: Reply) -> list[dict[str, Any]]:
    causes = (reply.body.get("details") or {}).get("causes") or []
    return [cause for cause in causes if isinstance(cause, dict)]


def _short(message: str) -> str:
    """The message on one line, cut to MESSAGE_LIMIT characters."""
    line = " ".join(message.split())
    return line if len(line) <= MESSAGE_LIMIT else line[: MESSAGE_LIMIT - 1] + "…"


def _missing_namespace(reply: Reply) -> str | None:
    details = reply.body.get("details") or {}
    if reply.status == 404 and details.get("kind") == "namespaces":
        return str(details.get("name"))
    return None


def object_name(manifest: Manifest) -> tuple[str, str | None]:
    meta = manifest.get("metadata", {})
    return str(meta.get("name", "")), meta.get("namespace")
