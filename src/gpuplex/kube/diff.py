"""What applying a rendered set would do to a cluster: per object, create, change (which fields),
leave unchanged, prune, skip, or what the API server refuses. Pure: the live objects and the
server's dry-run results come in as arguments.

A change is judged on what the API server says the object would become (a server-side apply with
`dryRun=All`) against what it is now, so server defaults, quantities written another way ("1000m"
and "1") and fields gpuplex stopped setting are all seen as the server sees them; fields other
managers set that the apply then removes (`gpuplex.kube.foreign`) are added to it. Bookkeeping that
changes on every write (resourceVersion, managedFields, generation) and `status` are left out.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpuplex.error_codes import ErrorCode
from gpuplex.kube.foreign import ForeignField, foreign_note
from gpuplex.kube.naming import MANAGED_BY, MANAGED_BY_LABEL, POOL_TAINT_KEY, SET_LABEL, Manifest
from gpuplex.kube.resources import ObjectKey, ResourceKind, object_key

#: Metadata the API server rewrites on every write, or sets once: never a difference.
VOLATILE_METADATA = (
    "managedFields",
    "resourceVersion",
    "generation",
    "uid",
    "creationTimestamp",
    "selfLink",
)


class ObjectAction(StrEnum):
    """What applying a rendered set does to one Kubernetes object."""

    CREATE = "create"
    CHANGE = "change"
    UNCHANGED = "unchanged"
    #: In the cluster with gpuplex's labels for this set, and no longer rendered.
    PRUNE = "prune"
    #: A change the API server refuses in place (a Job's pod template): delete, then apply.
    RECREATE = "re-create"
    #: Not applied: a Node that is not in the cluster (gpuplex never creates nodes), or a custom
    #: resource whose API group the cluster does not serve.
    SKIP = "skip"
    #: The API server refuses the apply (or the prune) in its dry run: a namespace still being
    #: deleted or missing, a quota, an admission policy, RBAC. Apply would stop there.
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class ObjectChange:
    object_id: str
    action: ObjectAction
    #: Fields that differ, as paths (`spec.replicas`, `metadata.labels["gpuplex.dev/set"]`).
    fields: tuple[str, ...] = ()
    #: Why an object is skipped or refused, what a dry run could not check, or what else the
    #: apply removes.
    note: str = ""
    #: For a change apply would stop at (refused, re-create): the error it would stop with, which
    #: says the exit code.
    code: ErrorCode | None = None


def comparable(obj: Manifest) -> Manifest:
    """The object without status and the metadata that changes on every write."""
    out = {key: value for key, value in obj.items() if key != "status"}
    meta = out.get("metadata")
    if isinstance(meta, dict):
        out["metadata"] = {k: v for k, v in meta.items() if k not in VOLATILE_METADATA}
    return out


def changed_fields(before: Any, after: Any, path: str = "") -> list[str]:
    """Paths where `after` differs from `before`, depth first, in key order. Lists of different
    lengths are reported as the list itself: element paths would all shift by one."""
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[str] = []
        for key in sorted(set(before) | set(after)):
            child = _child(path, key)
            if key not in before or key not in after:
                out.append(child)
            else:
                out.extend(changed_fields(before[key], after[key], child))
        return out
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        out = []
        for index, (old, new) in enumerate(zip(before, after, strict=True)):
            out.extend(changed_fields(old, new, f"{path}[{index}]"))
        return out
    return [] if before == after else [path or "(object)"]


_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _child(path: str, key: str) -> str:
    if _PLAIN_KEY.match(key):
        return f"{path}.{key}" if path else key
    return f'{path}["{key}"]'


def compare(
    object_id: str,
    live: Manifest | None,
    would_be: Manifest,
    foreign: list[ForeignField] | None = None,
    *,
    stored: bool = False,
) -> ObjectChange:
    """The change applying one object makes: CREATE when it is not live, else CHANGE with the
    fields that differ between the live object and the server's result of the apply, then the
    `foreign` fields the apply removes after it; UNCHANGED when there are none. `stored`: the
    result is the real apply's, and an apply that changed nothing kept the resourceVersion. A
    new one alone is not proof: a controller may have written the object's status between the
    read and the apply, so the contents decide then (and always for a dry run, which never takes
    a new resourceVersion)."""
    if live is None:
        return ObjectChange(object_id, ObjectAction.CREATE)
    foreign = foreign or []
    if stored and not foreign and _version(would_be) == _version(live):
        return ObjectChange(object_id, ObjectAction.UNCHANGED)
    fields = changed_fields(comparable(live), comparable(would_be))
    fields += [f"{field.path} (set by {', '.join(field.managers)})" for field in foreign]
    if not fields:
        return ObjectChange(object_id, ObjectAction.UNCHANGED)
    return ObjectChange(object_id, ObjectAction.CHANGE, tuple(fields), note=foreign_note(foreign))


def _version(obj: Manifest) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion", ""))


RECREATE_NOTE = (
    "needs delete and re-create: {fields} cannot change in place; delete the object, then apply"
)


def recreate(
    object_id: str,
    live: Manifest,
    manifest: Manifest,
    immutable: tuple[str, ...],
    code: ErrorCode,
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
    note = RECREATE_NOTE.format(fields=", ".join(immutable))
    return ObjectChange(
        object_id, ObjectAction.RECREATE, tuple(fields or immutable), note=note, code=code
    )


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


def refused(object_id: str, message: str, code: ErrorCode) -> ObjectChange:
    """What the API server refused for one object, with its one-line reason."""
    return ObjectChange(object_id, ObjectAction.REFUSED, note=message, code=code)


def first_stop(changes: Iterable[ObjectChange]) -> ObjectChange | None:
    """The first change apply would stop at (refused or re-create, in apply order), if any."""
    return next((change for change in changes if change.code is not None), None)


def owned_by_set(item: Manifest, set_name: str) -> bool:
    """Whether a listed object carries gpuplex's labels for `set_name` (the list call already
    filters by them; checked again so a server that ignores the selector prunes nothing else)."""
    labels = item.get("metadata", {}).get("labels") or {}
    return bool(labels.get(MANAGED_BY_LABEL) == MANAGED_BY and labels.get(SET_LABEL) == set_name)


def prune_candidates(
    desired: set[ObjectKey],
    listed: Iterable[tuple[ResourceKind, Manifest]],
    set_name: str,
) -> list[tuple[ResourceKind, Manifest]]:
    """Listed objects of this set that are no longer rendered, in the order listed. Never Nodes,
    never another set's objects, never one already being deleted."""
    out = []
    for kind, item in listed:
        if not kind.prunable or not owned_by_set(item, set_name):
            continue
        if item.get("metadata", {}).get("deletionTimestamp"):
            continue
        if object_key(kind, item) not in desired:
            out.append((kind, item))
    return out


#: How a summary names each action: before (a diff, a dry run) and after an apply.
_SUMMARY_WORDS = (
    (ObjectAction.CREATE, "to create", "created"),
    (ObjectAction.CHANGE, "to change", "changed"),
    (ObjectAction.RECREATE, "to re-create", "to re-create"),
    (ObjectAction.REFUSED, "refused", "refused"),
    (ObjectAction.PRUNE, "to prune", "pruned"),
    (ObjectAction.SKIP, "skipped", "skipped"),
    (ObjectAction.UNCHANGED, "unchanged", "unchanged"),
)


def summary(changes: Iterable[ObjectChange], *, done: bool = False) -> str:
    """`2 to create, 1 to change, 14 unchanged` (or `2 created, ...` once `done`); `nothing to
    apply` for an empty set."""
    counts = Counter(change.action for change in changes)
    parts = [
        f"{counts[action]} {after if done else before}"
        for action, before, after in _SUMMARY_WORDS
        if counts[action]
    ]
    return ", ".join(parts) or "nothing to apply"


def keep_others_taints(node: Manifest, live: Manifest) -> Manifest:
    """The rendered Node with the live node's taints that gpuplex does not own added back.

    A Node's `spec.taints` is an atomic list: a forced server-side apply replaces all of it, so
    applying only gpuplex's pool taint would wipe the taints others set (cordons, the GPU operator's,
    the cloud provider's). Gpuplex owns exactly the `gpuplex.dev/pool` taint; every other one stays.
    """
    ours = list(node.get("spec", {}).get("taints", []))
    others = [
        taint
        for taint in live.get("spec", {}).get("taints", []) or []
        if taint.get("key") != POOL_TAINT_KEY
    ]
    if not ours and not others:
        return node
    merged = dict(node)
    merged["spec"] = {**node.get("spec", {}), "taints": [*others, *ours]}
    return merged
