"""Apply a rendered set to a cluster, or say what applying it would change.

Apply is server-side apply with field manager `gpuplex` (forced: gpuplex owns the fields it
renders), namespaces and cluster-scoped objects first. Each object is read first, so the server's
answer tells a change (a new resourceVersion) from none. Fields that other field managers added to
gpuplex's objects (GPU placement in workloads, keys of a quota's `spec.hard` or a ConfigMap's
`data`: `foreign`) are removed after the apply: force alone never removes fields gpuplex does not
send. Pruning lists each kind the set renders by its labels
(`app.kubernetes.io/managed-by=gpuplex,gpuplex.dev/set=<set>`) and deletes what is no longer
rendered; Nodes are only ever labelled, never created or pruned.

All or nothing, as far as the API allows: apply first runs the whole of itself as a server-side
dry run (`dryRun=All`: every apply, every removal of other managers' fields, every prune) and stops
at the first refusal with nothing changed; only then does the same pass run for real. A dry run
cannot check objects in a namespace the same apply creates (the namespace does not exist yet), nor
what changes in the cluster between the two passes. A diff is that dry-run pass with each refusal
recorded (`refused`, `re-create`) instead of stopping at it.

A custom kind whose API group the cluster does not serve (ServiceMonitor without the Prometheus
operator) is skipped with what to install. Requests and the meaning of each answer are in
`gpuplex.kube.api`; this module decides what to request, in which order, and what it did.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuplex.errors import KubeApiError, KubeRenderError, KubeUnreachable
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
    compare,
    keep_others_taints,
    prune_candidates,
    recreate,
    refused,
)
from gpuplex.kube.foreign import foreign_fields
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
    on_check: OnChange | None = None,
) -> list[ObjectChange]:
    """Check the whole apply with the server's dry run, then (unless `dry_run`) apply every
    object in order, remove what other managers added to gpuplex's objects, and prune. A refusal
    in the check stops it before anything is changed; one in the real pass (what the check could
    not see) stops it there. `on_check` sees the check's changes, `on_change` the real ones (a
    dry run's: its only pass)."""
    api = KubeApi(transport)
    desired = check_set(manifests, set_name)
    checked = _Pass(api, desired, set_name, dry_run=True, stop=True).run(
        prune=prune, on_change=on_change if dry_run else on_check
    )
    if dry_run:
        return checked
    return _Pass(api, desired, set_name, dry_run=False, stop=True).run(
        prune=prune, on_change=on_change
    )


def diff_set(
    transport: Transport,
    manifests: list[Manifest],
    set_name: str,
    *,
    on_change: OnChange | None = None,
) -> list[ObjectChange]:
    """What `apply_set` with pruning would do, object by object: its dry-run pass, with what the
    server refuses recorded (`refused`, `re-create`) where apply would stop. Changes nothing."""
    api = KubeApi(transport)
    desired = check_set(manifests, set_name)
    return _Pass(api, desired, set_name, dry_run=True, stop=False).run(
        prune=True, on_change=on_change
    )


NODE_MISSING = (
    "not in the cluster; gpuplex labels nodes but never creates one: apply again once it has joined"
)
NEW_NAMESPACE = "in a namespace this apply creates, so the server's dry run could not check it"


class _Pass:
    """One pass over the set in apply order: the server's dry run or the real apply. `stop`: a
    refusal raises its error (apply); otherwise it is recorded and the pass goes on (diff)."""

    def __init__(
        self, api: KubeApi, desired: Desired, set_name: str, *, dry_run: bool, stop: bool
    ) -> None:
        self.api = api
        self.desired = desired
        self.set_name = set_name
        self.dry_run = dry_run
        self.stop = stop
        #: Namespaces this pass creates: a dry run cannot check what goes in them.
        self.new_namespaces: set[str] = set()

    def run(self, *, prune: bool, on_change: OnChange | None) -> list[ObjectChange]:
        record = _Record(on_change)
        for key, kind, manifest in self.desired:
            record(self._apply(key, kind, manifest))
        if prune:
            for kind, item in _prune_candidates(self.api, self.desired, self.set_name):
                record(self._prune(kind, item))
        return record.changes

    def _apply(self, key: ObjectKey, kind: ResourceKind, manifest: Manifest) -> ObjectChange:
        object_id = key_id(key)
        try:
            live = self.api.get(kind, manifest)
        except NotServed as error:
            return self._not_served(object_id, kind, error)
        to_apply = _node_taints_kept(manifest, live) if kind.kind == "Node" else manifest
        if to_apply is None:
            return ObjectChange(object_id, ObjectAction.SKIP, note=NODE_MISSING)
        try:
            result = self.api.apply(kind, to_apply, dry_run=self.dry_run).body
            foreign = foreign_fields(result, FIELD_MANAGER)
            if foreign:
                self.api.remove_fields(kind, result, foreign, dry_run=self.dry_run)
        except NotServed as error:
            return self._not_served(object_id, kind, error)
        except NamespaceMissing as error:
            # a dry run creates no namespace, so objects in the set's new ones are refused
            if self.dry_run and error.namespace in self.new_namespaces:
                return ObjectChange(object_id, ObjectAction.CREATE, note=NEW_NAMESPACE)
            return self._refused(object_id, error)
        except Immutable as error:
            if self.stop or live is None:
                return self._refused(object_id, error)
            return recreate(object_id, live, manifest, error.fields, error.code)
        except KubeUnreachable:
            raise
        except KubeApiError as error:
            return self._refused(object_id, error)
        if live is None and kind.kind == "Namespace":
            self.new_namespaces.add(key[3])
        return compare(object_id, live, result, foreign, stored=not self.dry_run)

    def _prune(self, kind: ResourceKind, item: Manifest) -> ObjectChange:
        object_id = key_id(object_key(kind, item))
        try:
            self.api.delete(kind, item, dry_run=self.dry_run)
        except KubeUnreachable:
            raise
        except KubeApiError as error:
            return self._refused(object_id, error)
        return ObjectChange(object_id, ObjectAction.PRUNE)

    def _refused(self, object_id: str, error: KubeApiError) -> ObjectChange:
        if self.stop:
            raise error
        return refused(object_id, error.message, error.code)

    @staticmethod
    def _not_served(object_id: str, kind: ResourceKind, error: NotServed) -> ObjectChange:
        if not kind.custom:  # a built-in kind this Kubernetes lacks: too old for gpuplex
            raise error
        return ObjectChange(object_id, ObjectAction.SKIP, note=error.message)


def _node_taints_kept(node: Manifest, live: Manifest | None) -> Manifest | None:
    """The Node to apply, with the taints others set kept; None for a node not in the cluster
    (gpuplex never creates one)."""
    return None if live is None else keep_others_taints(node, live)


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
