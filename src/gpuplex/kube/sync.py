"""Apply a rendered set to a cluster, or say what applying it would change.

Apply is server-side apply with field manager `gpuplex` (forced: gpuplex owns the fields it
renders), namespaces and cluster-scoped objects first. Each object is read first, so the server's
answer tells a change (a new resourceVersion) from none. GPU resources, node selectors and
tolerations that other field managers added to gpuplex's workloads are removed after the apply
(`foreign`): force alone never removes fields gpuplex does not send. Pruning lists each kind the
set renders by its labels (`app.kubernetes.io/managed-by=gpuplex,gpuplex.dev/set=<set>`) and
deletes what is no longer rendered; Nodes are only ever labelled, never created or pruned. A diff
reads each object and asks the server for a dry run of the apply, so it shows the change as the
server would make it.

A kind whose API group the cluster does not serve (ServiceMonitor without the Prometheus
operator) is skipped with what to install: the server then answers a plain-text 404, not a Status.
`requests()` lists every request this module can make, for the reconciler's RBAC role.

Requests go through a `Transport` (the official client in `gpuplex.kube.apply`, or a test's fake);
the meaning of each answer, and every error message, is here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuplex.errors import KubeApiError, KubeForbidden, KubeRenderError, KubeRetryLater
from gpuplex.kube.diff import (
    Action,
    ObjectChange,
    changed_fields,
    comparable,
    compare,
    keep_others_taints,
    prune_candidates,
)
from gpuplex.kube.foreign import ForeignField, foreign_fields, removal
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
    kinds_of_set,
    object_key,
    prunable_kinds,
)

FIELD_MANAGER = "gpuplex"
APPLY_PATCH = "application/apply-patch+yaml"
JSON_PATCH = "application/json-patch+json"
#: The longest API message gpuplex repeats; a refused Job template change dumps thousands of
#: characters of Go syntax.
MESSAGE_LIMIT = 300
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
#: server-side apply, its dry run and the removal of other managers' GPU fields, and create too
#: where an apply creates the object (the API server checks both); list (GET of a collection,
#: for prune) and delete (prune). `access_needed` derives the reconciler's role from this.
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
        name, namespace = _name(manifest)
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
        name, namespace = _name(target)
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


def _install_hint(kind: ResourceKind) -> str:
    if kind.group == "monitoring.coreos.com":
        return " (install the Prometheus operator's custom resource definitions)"
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
        if set_name not in kind.sets:
            raise KubeRenderError(
                f"{key_id(key)}: the {set_name} set does not render {kind.kind} objects, so its "
                f"prune would never find one (kinds of the set: "
                f"{', '.join(k.kind for k in kinds_of_set(set_name))})"
            )
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
    """Server-side apply every object in order, remove what other managers added to gpuplex's
    workloads, then prune; stops at the first refusal."""
    api = KubeApi(transport)
    desired = check_set(manifests, set_name)
    new_namespaces: set[str] = set()
    record = _Record(on_change)

    for key, kind, manifest in desired:
        try:
            live = api.get(kind, manifest)
            if kind.kind == "Node":
                if live is None:
                    record(ObjectChange(key_id(key), Action.SKIP, note=NODE_MISSING))
                    continue
                manifest = keep_others_taints(manifest, live)
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
        after = reply.body
        foreign = foreign_fields(after, FIELD_MANAGER)
        if foreign:
            after = api.remove_fields(kind, after, foreign, dry_run=dry_run).body
        if live is None:
            if kind.kind == "Namespace":
                new_namespaces.add(key[3])
            record(ObjectChange(key_id(key), Action.CREATE))
            continue
        record(_applied(key_id(key), live, after, foreign, dry_run=dry_run))
    if prune:
        for kind, item in _prune_candidates(api, desired, set_name):
            api.delete(kind, item, dry_run=dry_run)
            record(ObjectChange(key_id(object_key(kind, item)), Action.PRUNE))
    return record.changes


def _applied(
    object_id: str, live: Manifest, after: Manifest, foreign: list[ForeignField], *, dry_run: bool
) -> ObjectChange:
    """What one apply did to a live object, from the server's answer: an apply that changes
    nothing keeps the resourceVersion. A new one alone is not proof: a controller may have
    written the object's status between the read and the apply, so the contents decide then
    (and always in a dry run, which never takes a new resourceVersion)."""
    if not dry_run and _version(after) == _version(live):
        return ObjectChange(object_id, Action.UNCHANGED)
    fields = tuple(changed_fields(comparable(live), comparable(after)))
    if not fields:
        return ObjectChange(object_id, Action.UNCHANGED)
    return ObjectChange(object_id, Action.CHANGE, fields, note=_foreign_note(foreign))


def _version(obj: Manifest) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion", ""))


def _foreign_note(foreign: list[ForeignField]) -> str:
    if not foreign:
        return ""
    managers = sorted({manager for field in foreign for manager in field.managers})
    return f"removes GPU fields set by {', '.join(managers)}"


NODE_MISSING = (
    "not in the cluster; gpuplex labels nodes but never creates one: apply again once it has joined"
)
NEW_NAMESPACE = "in a namespace this apply creates, so the server's dry run could not check it"
RECREATE = (
    "needs delete and re-create: {fields} cannot change in place; delete the object, then apply"
)


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
        except Immutable as error:
            assert live is not None  # only a change of a live object is refused
            record(_recreate(key_id(key), live, manifest, error.fields))
            continue
        record(_with_foreign(compare(key_id(key), live, would_be), would_be))
    for kind, item in _prune_candidates(api, desired, set_name):
        record(ObjectChange(key_id(object_key(kind, item)), Action.PRUNE))
    return record.changes


def _with_foreign(change: ObjectChange, would_be: Manifest | None) -> ObjectChange:
    """The change with the GPU fields other managers set, which the apply removes after it."""
    foreign = foreign_fields(would_be, FIELD_MANAGER) if would_be else []
    if not foreign:
        return change
    fields = change.fields + tuple(
        f"{field.path} (set by {', '.join(field.managers)})" for field in foreign
    )
    return ObjectChange(change.object_id, Action.CHANGE, fields, note=_foreign_note(foreign))


def _recreate(
    object_id: str, live: Manifest, manifest: Manifest, immutable: tuple[str, ...]
) -> ObjectChange:
    """A change the server refuses in place: the rendered values that differ from the live ones
    under each immutable field (server defaults the rendering leaves out are not differences)."""
    fields: list[str] = []
    for path in immutable:
        wanted, current = _at(manifest, path), _at(live, path)
        fields += [
            f"{path}.{field}" if field != "(object)" else path
            for field in changed_fields(_only(current, wanted), wanted)
        ]
    note = RECREATE.format(fields=", ".join(immutable))
    return ObjectChange(object_id, Action.RECREATE, tuple(fields or immutable), note=note)


def _at(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _only(live: Any, wanted: Any) -> Any:
    """`live` cut down to the keys `wanted` has, recursively (lists element by element)."""
    if isinstance(live, dict) and isinstance(wanted, dict):
        return {key: _only(live[key], wanted[key]) for key in wanted if key in live}
    if isinstance(live, list) and isinstance(wanted, list) and len(live) == len(wanted):
        return [_only(old, new) for old, new in zip(live, wanted, strict=True)]
    return live


def _prune_candidates(
    api: KubeApi, desired: Desired, set_name: str
) -> list[tuple[ResourceKind, Manifest]]:
    listed: list[tuple[ResourceKind, Manifest]] = []
    for kind in prunable_kinds(set_name):
        try:
            listed.extend((kind, item) for item in api.list(kind, set_name))
        except NotServed:
            continue  # a kind this cluster does not serve: nothing of it to prune
    return prune_candidates({key for key, _, _ in desired}, listed, set_name)
