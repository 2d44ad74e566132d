"""Apply a rendered set to a cluster, or say what applying it would change.

Apply is server-side apply with field manager `gpuplex` (forced: gpuplex owns the fields it
renders), namespaces and cluster-scoped objects first. Each object is read first, so the server's
answer tells a change (a new resourceVersion) from none. Fields that other field managers added
to gpuplex's objects (GPU placement in workloads, keys of a quota's `spec.hard` or a ConfigMap's
`data`: `foreign`) are removed after the apply: force alone never removes fields gpuplex does not
send. Pruning lists each kind the
set renders by its labels (`app.kubernetes.io/managed-by=gpuplex,gpuplex.dev/set=<set>`) and
deletes what is no longer rendered; Nodes are only ever labelled, never created or pruned. A diff
reads each object and asks the server for a dry run of the apply, so it shows the change as the
server would make it.

A custom kind whose API group the cluster does not serve (ServiceMonitor without the Prometheus
operator) is skipped with what to install. Requests and the meaning of each answer are in
`gpuplex.kube.api`; this module decides what to request, in which order, and what it did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuplex.errors import KubeRenderError
from gpuplex.kube.api import (
    FIELD_MANAGER,
    Immutable,
    KubeApi,
    NamespaceMissing,
    NotServed,
    Transport,
)
from gpuplex.kube.diff import (
    ObjectAction,
    ObjectChange,
    changed_fields,
    comparable,
    compare,
    keep_others_taints,
    prune_candidates,
)
from gpuplex.kube.foreign import ForeignField, foreign_fields, foreign_note
from gpuplex.kube.naming import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
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

OnChange = Callable[[ObjectChange], None]
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
            to_apply = _node_taints_kept(manifest, live) if kind.kind == "Node" else manifest
            if to_apply is None:
                record(ObjectChange(key_id(key), ObjectAction.SKIP, note=NODE_MISSING))
                continue
            reply = api.apply(kind, to_apply, dry_run=dry_run)
        except NotServed as error:
            if not kind.custom:  # a built-in kind this Kubernetes lacks: too old for gpuplex
                raise
            record(ObjectChange(key_id(key), ObjectAction.SKIP, note=error.message))
            continue
        except NamespaceMissing as error:
            # a dry run creates no namespace, so objects in the set's new ones are refused
            if not (dry_run and error.namespace in new_namespaces):
                raise
            record(ObjectChange(key_id(key), ObjectAction.CREATE, note=NEW_NAMESPACE))
            continue
        after = reply.body
        foreign = foreign_fields(after, FIELD_MANAGER)
        if foreign:
            after = api.remove_fields(kind, after, foreign, dry_run=dry_run).body
        if live is None:
            if kind.kind == "Namespace":
                new_namespaces.add(key[3])
            record(ObjectChange(key_id(key), ObjectAction.CREATE))
            continue
        record(_applied(key_id(key), live, after, foreign, dry_run=dry_run))
    if prune:
        for kind, item in _prune_candidates(api, desired, set_name):
            api.delete(kind, item, dry_run=dry_run)
            record(ObjectChange(key_id(object_key(kind, item)), ObjectAction.PRUNE))
    return record.changes


def _applied(
    object_id: str, live: Manifest, after: Manifest, foreign: list[ForeignField], *, dry_run: bool
) -> ObjectChange:
    """What one apply did to a live object, from the server's answer: an apply that changes
    nothing keeps the resourceVersion. A new one alone is not proof: a controller may have
    written the object's status between the read and the apply, so the contents decide then
    (and always in a dry run, which never takes a new resourceVersion)."""
    if not dry_run and _version(after) == _version(live):
        return ObjectChange(object_id, ObjectAction.UNCHANGED)
    fields = tuple(changed_fields(comparable(live), comparable(after)))
    if not fields:
        return ObjectChange(object_id, ObjectAction.UNCHANGED)
    return ObjectChange(object_id, ObjectAction.CHANGE, fields, note=foreign_note(foreign))


def _version(obj: Manifest) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion", ""))


def _node_taints_kept(node: Manifest, live: Manifest | None) -> Manifest | None:
    """The Node to apply, with the taints others set kept; None for a node not in the cluster
    (gpuplex never creates one)."""
    return None if live is None else keep_others_taints(node, live)


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
            to_apply = _node_taints_kept(manifest, live) if kind.kind == "Node" else manifest
            if to_apply is None:
                record(ObjectChange(key_id(key), ObjectAction.SKIP, note=NODE_MISSING))
                continue
            would_be = api.apply(kind, to_apply, dry_run=True).body if live else None
        except NotServed as error:
            if not kind.custom:
                raise
            record(ObjectChange(key_id(key), ObjectAction.SKIP, note=error.message))
            continue
        except Immutable as error:
            assert live is not None  # only a change of a live object is refused
            record(_recreate(key_id(key), live, manifest, error.fields))
            continue
        record(_with_foreign(compare(key_id(key), live, would_be), would_be))
    for kind, item in _prune_candidates(api, desired, set_name):
        record(ObjectChange(key_id(object_key(kind, item)), ObjectAction.PRUNE))
    return record.changes


def _with_foreign(change: ObjectChange, would_be: Manifest | None) -> ObjectChange:
    """The change with the GPU fields other managers set, which the apply removes after it."""
    foreign = foreign_fields(would_be, FIELD_MANAGER) if would_be else []
    if not foreign:
        return change
    fields = change.fields + tuple(
        f"{field.path} (set by {', '.join(field.managers)})" for field in foreign
    )
    return ObjectChange(change.object_id, ObjectAction.CHANGE, fields, note=foreign_note(foreign))


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
    return ObjectChange(object_id, ObjectAction.RECREATE, tuple(fields or immutable), note=note)


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
