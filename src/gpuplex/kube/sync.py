"""Apply a rendered set to a cluster, or say what applying it would change.

Apply is server-side apply with field manager `gpuplex` (forced: gpuplex owns the fields it
renders), namespaces and cluster-scoped objects first. Pruning lists each kind gpuplex renders by
its labels (`app.kubernetes.io/managed-by=gpuplex,gpuplex.dev/set=<set>`) and deletes what is no
longer rendered; Nodes are only ever labelled, never created or pruned. A diff reads each object
and asks the server for a dry run of the apply, so it shows the change as the server would make it.

Requests go through a `Transport` (the official client in `gpuplex.kube.apply`, or a test's fake);
the meaning of each answer, and every error message, is here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuplex.errors import KubeApiError, KubeForbidden, KubeRenderError
from gpuplex.kube.diff import Action, ObjectChange, compare, keep_others_taints, prune_candidates
from gpuplex.kube.naming import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    MIN_KUBERNETES,
    SET_LABEL,
    Manifest,
)
from gpuplex.kube.resources import (
    ObjectKey,
    ResourceKind,
    apply_order,
    key_id,
    object_key,
    prunable_kinds,
)

FIELD_MANAGER = "gpuplex"
APPLY_PATCH = "application/apply-patch+yaml"
OnChange = Callable[[ObjectChange], None]


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


class NamespaceMissing(KubeApiError):
    """An object was refused because its namespace does not exist."""

    def __init__(self, message: str, namespace: str) -> None:
        super().__init__(message)
        self.namespace = namespace


class KubeApi:
    """Get, apply, list and delete objects, with the API's refusals as gpuplex errors."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    def get(self, kind: ResourceKind, manifest: Manifest) -> Manifest | None:
        name, namespace = _name(manifest)
        reply = self.transport.send("GET", kind.object_path(name, namespace))
        if reply.status == 404 and not _resource_missing(reply):
            return None
        self._check("get", kind, name, namespace, reply)
        return reply.body

    def apply(self, kind: ResourceKind, manifest: Manifest, *, dry_run: bool) -> Reply:
        name, namespace = _name(manifest)
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        if dry_run:
            query.append(("dryRun", "All"))
        reply = self.transport.send(
            "PATCH",
            kind.object_path(name, namespace),
            query=query,
            body=json.dumps(manifest, separators=(",", ":")),
            content_type=APPLY_PATCH,
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
        name, namespace = _name(item)
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
    message = str(reply.body.get("message") or reply.text.strip()[:300] or "no message")
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
    if reply.status == 403:
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
    text += f" {reason}: {message}" if reason else f": {message}"
    if reply.status == 422 and "immutable" in message:
        text += "; the field cannot change in place: delete the object and apply again"
    elif reply.status >= 500:
        text += "; the API server failed: try again, and check its health if it keeps failing"
    missing = _missing_namespace(reply)
    if missing is not None:
        text += (
            f"; create namespace {missing} first (gpuplex creates only its tenants' and its own "
            "namespaces; the GPU operator's comes with the operator)"
        )
        return NamespaceMissing(text, missing)
    return KubeApiError(text)


def _install_hint(kind: ResourceKind) -> str:
    if kind.group == "monitoring.coreos.com":
        return " (install the Prometheus operator's custom resource definitions)"
    return f"; gpuplex needs Kubernetes {MIN_KUBERNETES} or newer"


def _resource_missing(reply: Reply) -> bool:
    """404 for the whole resource (no such API), not for one object: the API's Status then names
    no object in `details`."""
    details = reply.body.get("details") or {}
    return reply.body.get("kind") == "Status" and not details.get("name")


def _missing_namespace(reply: Reply) -> str | None:
    details = reply.body.get("details") or {}
    if reply.status == 404 and details.get("kind") == "namespaces":
        return str(details.get("name"))
    return None


def _name(manifest: Manifest) -> tuple[str, str | None]:
    meta = manifest.get("metadata", {})
    return str(meta.get("name", "")), meta.get("namespace")


Desired = list[tuple[ObjectKey, ResourceKind, Manifest]]


class _Record:
    """The changes so far, each also passed to `on_change` (the CLI's progress) as it happens."""

    def __init__(self, on_change: OnChange | None) -> None:
        self.changes: list[ObjectChange] = []
        self._on_change = on_change

    def __call__(self, change: ObjectChange) -> None:
        self.changes.append(change)
        if self._on_change is not None:
            self._on_change(change)


def check_set(manifests: list[Manifest], set_name: str) -> Desired:
    """The set in apply order, each object with its key and kind; refused when an object lacks
    this set's labels (the other set's prune would delete it, or no prune would) or is rendered
    twice."""
    out: Desired = []
    seen: set[ObjectKey] = set()
    for kind, manifest in apply_order(manifests):
        key = object_key(kind, manifest)
        labels = manifest.get("metadata", {}).get("labels") or {}
        if labels.get(MANAGED_BY_LABEL) != MANAGED_BY or labels.get(SET_LABEL) != set_name:
            raise KubeRenderError(
                f"{key_id(key)} is not labelled {MANAGED_BY_LABEL}={MANAGED_BY}, "
                f"{SET_LABEL}={set_name}: it would not be pruned with its set"
            )
        if key in seen:
            raise KubeRenderError(f"{key_id(key)} is rendered twice")
        seen.add(key)
        out.append((key, kind, manifest))
    return out


def apply_set(
    transport: Transport,
    manifests: list[Manifest],
    set_name: str,
    *,
    dry_run: bool = False,
    prune: bool = True,
    on_change: OnChange | None = None,
) -> list[ObjectChange]:
    """Server-side apply every object in order, then prune; stops at the first refusal."""
    api = KubeApi(transport)
    desired = check_set(manifests, set_name)
    new_namespaces: set[str] = set()
    record = _Record(on_change)

    for key, kind, manifest in desired:
        if kind.kind == "Node":
            live_node = api.get(kind, manifest)
            if live_node is None:
                record(ObjectChange(key_id(key), Action.SKIP, note=NODE_MISSING))
                continue
            manifest = keep_others_taints(manifest, live_node)
        try:
            reply = api.apply(kind, manifest, dry_run=dry_run)
        except NotServed as error:
            if not kind.custom:  # a built-in kind this Kubernetes lacks: too old for gpuplex
                raise
            record(ObjectChange(key_id(key), Action.SKIP, note=error.message))
            continue
        except NamespaceMissing as error:
            # a dry run creates no namespace, so objects in the set's new ones are refused
            if not (dry_run and error.namespace in new_namespaces):
                raise
            record(ObjectChange(key_id(key), Action.CREATE, note=NEW_NAMESPACE))
            continue
        created = reply.status == 201
        if created and kind.kind == "Namespace":
            new_namespaces.add(key[3])
        record(ObjectChange(key_id(key), Action.CREATE if created else Action.APPLY))
    if prune:
        for kind, item in _prune_candidates(api, desired, set_name):
            api.delete(kind, item, dry_run=dry_run)
            record(ObjectChange(key_id(object_key(kind, item)), Action.PRUNE))
    return record.changes


NODE_MISSING = (
    "not in the cluster; gpuplex labels nodes but never creates one: apply again once it has joined"
)
NEW_NAMESPACE = "in a namespace this apply creates, so the server's dry run could not check it"


def diff_set(
    transport: Transport,
    manifests: list[Manifest],
    set_name: str,
    *,
    on_change: OnChange | None = None,
) -> list[ObjectChange]:
    """What `apply_set` with pruning would do, object by object; changes nothing."""
    api = KubeApi(transport)
    desired = check_set(manifests, set_name)
    record = _Record(on_change)

    for key, kind, manifest in desired:
        try:
            live = api.get(kind, manifest)
            if kind.kind == "Node":
                if live is None:
                    record(ObjectChange(key_id(key), Action.SKIP, note=NODE_MISSING))
                    continue
                manifest = keep_others_taints(manifest, live)
            would_be = api.apply(kind, manifest, dry_run=True).body if live else None
        except NotServed as error:
            if not kind.custom:
                raise
            record(ObjectChange(key_id(key), Action.SKIP, note=error.message))
            continue
        record(compare(key_id(key), live, would_be))
    for kind, item in _prune_candidates(api, desired, set_name):
        record(ObjectChange(key_id(object_key(kind, item)), Action.PRUNE))
    return record.changes


def _prune_candidates(
    api: KubeApi, desired: Desired, set_name: str
) -> list[tuple[ResourceKind, Manifest]]:
    listed: list[tuple[ResourceKind, Manifest]] = []
    for kind in prunable_kinds():
        try:
            listed.extend((kind, item) for item in api.list(kind, set_name))
        except NotServed:
            continue  # a kind this cluster does not serve: nothing of it to prune
    return prune_candidates({key for key, _, _ in desired}, listed, set_name)
