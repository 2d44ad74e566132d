"""Fields another client added to an object gpuplex manages, read from `managedFields`.

Server-side apply keeps every field some other field manager owns, even when gpuplex applies with
`force`: force only takes over the fields gpuplex itself sends. So a `kubectl patch` that adds
`nvidia.com/mig-7g.80gb` to a gpuplex Deployment survives every later apply, the admission policy
then refuses the Deployment's pods, and a diff of gpuplex's own fields sees nothing. The same holds
for a key added to a map gpuplex renders whole: a `count/secrets` limit in a tenant's quota
`spec.hard`, a key in a ConfigMap's `data`. Gpuplex owns how its workloads use GPUs and what its
quotas and configs say, so it looks for what a manager other than gpuplex owns and gpuplex does not:

- in the pod template of each workload: GPU resources (`nvidia.com/...` limits and requests) on any
  container or init container, node selector entries, and the tolerations list (an atomic list:
  whoever wrote it last owns all of it);
- every key of the maps in `OWNED_MAPS`: a ResourceQuota's `spec.hard`, a ConfigMap's `data` and
  `binaryData`.

`diff` reports them; `apply` removes them with one JSON patch, which first tests that each
container is still where it was read.

Pure: the object comes in, paths and patch operations go out.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuplex.kube.naming import Manifest

#: Where each kind keeps its pod spec, as managedFields paths (`f:` per field).
_POD_SPEC = {
    "Deployment": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "Pod": ("spec",),
}
#: Maps gpuplex renders whole, per kind: every key in them is gpuplex's to set.
OWNED_MAPS: dict[str, tuple[tuple[str, ...], ...]] = {
    "ResourceQuota": (("spec", "hard"),),
    "ConfigMap": (("data",), ("binaryData",)),
}
GPU_RESOURCE_PREFIX = "nvidia.com/"
_CONTAINER_LISTS = ("containers", "initContainers")

#: One field as found in managedFields: ("containers", name, "limits", key), ("nodeSelector", key),
#: ("tolerations",) under a pod spec, or ("key", key) in an owned map.
_Field = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ForeignField:
    #: As `diff` prints it: `spec.template.spec.containers[server].resources.limits["nvidia.com/gpu"]`.
    path: str
    #: The field managers that set it.
    managers: tuple[str, ...]
    #: The JSON patch operations that remove it (a `test` of the container's name first).
    remove: tuple[dict[str, Any], ...]


def foreign_fields(obj: Manifest, own_manager: str) -> list[ForeignField]:
    """The fields of `obj` that managers other than `own_manager` set and `own_manager` does not:
    for a workload, GPU resources by container, then node selector keys, then the tolerations;
    for a quota or ConfigMap, the keys of its owned maps in key order."""
    entries = [
        entry
        for entry in obj.get("metadata", {}).get("managedFields") or []
        if not entry.get("subresource")  # status and scale writes are not what gpuplex renders
    ]
    out: list[ForeignField] = []
    pod_spec_path = _POD_SPEC.get(str(obj.get("kind")))
    if pod_spec_path is not None:
        out += _foreign_under(obj, entries, own_manager, pod_spec_path, _placement_fields)
    for map_path in OWNED_MAPS.get(str(obj.get("kind")), ()):
        out += _foreign_under(obj, entries, own_manager, map_path, _map_keys)
    return out


def _foreign_under(
    obj: Manifest,
    entries: list[dict[str, Any]],
    own_manager: str,
    path: tuple[str, ...],
    fields_of: Callable[[dict[str, Any]], list[_Field]],
) -> list[ForeignField]:
    """The foreign fields under `path` of `obj`, as `fields_of` reads them from one manager's
    fieldsV1 subtree there."""
    value = _value_at(obj, path)
    if not isinstance(value, dict):
        return []
    ours: set[_Field] = set()
    theirs: dict[_Field, list[str]] = {}
    for entry in entries:
        found = set(fields_of(_subtree(entry.get("fieldsV1") or {}, path)))
        if entry.get("manager") == own_manager:
            ours |= found
        else:
            for field in found:
                theirs.setdefault(field, []).append(str(entry.get("manager")))
    prefix = "/" + "/".join(_escape(part) for part in path)
    out = []
    for field, managers in sorted(theirs.items()):
        if field in ours:
            continue
        located = _locate(value, field, prefix)
        if located is not None:
            text, operations = located
            out.append(ForeignField(".".join(path) + text, tuple(managers), operations))
    return out


def _value_at(obj: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _subtree(tree: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    for part in path:
        tree = tree.get(f"f:{part}") or {}
    return tree


def _map_keys(owned: dict[str, Any]) -> list[_Field]:
    """Owned keys of a map's fieldsV1 (`f:<key>`; `.` is the map itself), as ("key", key)."""
    return [("key", key[2:]) for key in owned if key.startswith("f:")]


def _placement_fields(pod_spec: dict[str, Any]) -> list[_Field]:
    """Owned placement fields of a pod spec's fieldsV1, as ("containers", name, "limits", key),
    ("nodeSelector", key) or ("tolerations",)."""
    out: list[_Field] = []
    for list_name in _CONTAINER_LISTS:
        for member, fields in (pod_spec.get(f"f:{list_name}") or {}).items():
            if not member.startswith("k:"):
                continue
            name = str(json.loads(member[2:]).get("name"))
            resources = fields.get("f:resources") or {}
            for amounts in ("limits", "requests"):
                for key in resources.get(f"f:{amounts}") or {}:
                    if key.startswith(f"f:{GPU_RESOURCE_PREFIX}"):
                        out.append((list_name, name, amounts, key[2:]))
    for key in pod_spec.get("f:nodeSelector") or {}:
        if key.startswith("f:"):
            out.append(("nodeSelector", key[2:]))
    if "f:tolerations" in pod_spec:
        out.append(("tolerations",))
    return out


def _locate(
    value: dict[str, Any], field: _Field, prefix: str
) -> tuple[str, tuple[dict[str, Any], ...]] | None:
    """The field's printed path (after the path of `value`) and the patch that removes it, or
    None where the object no longer has it."""
    if field[0] == "key":
        key = field[1]
        if key not in value:
            return None
        return f'["{key}"]', ({"op": "remove", "path": f"{prefix}/{_escape(key)}"},)
    if field[0] == "tolerations":
        if not value.get("tolerations"):
            return None
        return ".tolerations", ({"op": "remove", "path": f"{prefix}/tolerations"},)
    if field[0] == "nodeSelector":
        key = field[1]
        if key not in (value.get("nodeSelector") or {}):
            return None
        return f'.nodeSelector["{key}"]', (
            {"op": "remove", "path": f"{prefix}/nodeSelector/{_escape(key)}"},
        )
    list_name, name, amounts, key = field
    for index, container in enumerate(value.get(list_name) or []):
        if container.get("name") != name:
            continue
        if key not in (container.get("resources", {}).get(amounts) or {}):
            return None
        at = f"{prefix}/{list_name}/{index}"
        return f'.{list_name}[{name}].resources.{amounts}["{key}"]', (
            {"op": "test", "path": f"{at}/name", "value": name},
            {"op": "remove", "path": f"{at}/resources/{amounts}/{_escape(key)}"},
        )
    return None


def _escape(key: str) -> str:
    """A JSON pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def removal(fields: list[ForeignField]) -> list[dict[str, Any]]:
    """One JSON patch removing all of `fields`: the tests first, then the removals (a removal
    shifts nothing the tests name: GPU keys, selector keys, map keys and the tolerations list are
    no list members)."""
    operations = [op for field in fields for op in field.remove]
    tests = [op for op in operations if op["op"] == "test"]
    unique_tests = [op for index, op in enumerate(tests) if op not in tests[:index]]
    return unique_tests + [op for op in operations if op["op"] != "test"]


def foreign_note(fields: list[ForeignField]) -> str:
    """What the apply removes after it, for the change's note: `removes fields set by kubectl-patch`."""
    if not fields:
        return ""
    managers = sorted({manager for field in fields for manager in field.managers})
    return f"removes fields set by {', '.join(managers)}"
