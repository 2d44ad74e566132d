"""GPU fields another client added to an object gpuplex manages, read from `managedFields`.

Server-side apply keeps every field some other field manager owns, even when gpuplex applies with
`force`: force only takes over the fields gpuplex itself sends. So a `kubectl patch` that adds
`nvidia.com/mig-7g.80gb` to a gpuplex Deployment survives every later apply, the admission policy
then refuses the Deployment's pods, and a diff of gpuplex's own fields sees nothing. Gpuplex owns
how its workloads use GPUs, so in the pod template of each object it manages it looks for:

- GPU resources (`nvidia.com/...` limits and requests) on any container or init container,
- node selector entries,
- the tolerations list (an atomic list: whoever wrote it last owns all of it),

that a manager other than gpuplex owns and gpuplex does not. `diff` reports them; `apply` removes
them with a JSON patch that first tests that each container is still where it was read.

Pure: the object comes in, paths and patch operations go out.
"""

from __future__ import annotations

import json
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
GPU_RESOURCE_PREFIX = "nvidia.com/"
_CONTAINER_LISTS = ("containers", "initContainers")


@dataclass(frozen=True, slots=True)
class ForeignField:
    #: As `diff` prints it: `spec.template.spec.containers[server].resources.limits["nvidia.com/gpu"]`.
    path: str
    #: The field managers that set it.
    managers: tuple[str, ...]
    #: The JSON patch operations that remove it (a `test` of the container's name first).
    remove: tuple[dict[str, Any], ...]


def foreign_fields(obj: Manifest, own_manager: str) -> list[ForeignField]:
    """The GPU placement fields of `obj` that managers other than `own_manager` set and
    `own_manager` does not: GPU resources by container, then node selector keys, then the
    tolerations."""
    pod_spec_path = _POD_SPEC.get(str(obj.get("kind")))
    if pod_spec_path is None:
        return []
    pod_spec: Any = obj
    for part in pod_spec_path:
        pod_spec = pod_spec.get(part) if isinstance(pod_spec, dict) else None
    if not isinstance(pod_spec, dict):
        return []
    ours: set[tuple[str, ...]] = set()
    theirs: dict[tuple[str, ...], list[str]] = {}
    for entry in obj.get("metadata", {}).get("managedFields") or []:
        if entry.get("subresource"):  # status and scale writes are not the pod template
            continue
        tree = _subtree(entry.get("fieldsV1") or {}, pod_spec_path)
        found = set(_placement_fields(tree))
        if entry.get("manager") == own_manager:
            ours |= found
        else:
            for field in found:
                theirs.setdefault(field, []).append(str(entry.get("manager")))
    prefix = "/" + "/".join(pod_spec_path)
    out = []
    for field, managers in sorted(theirs.items()):
        if field in ours:
            continue
        located = _locate(pod_spec, field, prefix)
        if located is not None:
            text, operations = located
            out.append(ForeignField(".".join(pod_spec_path) + text, tuple(managers), operations))
    return out


def _subtree(tree: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    for part in path:
        tree = tree.get(f"f:{part}") or {}
    return tree


def _placement_fields(pod_spec: dict[str, Any]) -> list[tuple[str, ...]]:
    """Owned placement fields of a pod spec's fieldsV1, as ("containers", name, "limits", key),
    ("nodeSelector", key) or ("tolerations",)."""
    out: list[tuple[str, ...]] = []
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
    pod_spec: dict[str, Any], field: tuple[str, ...], prefix: str
) -> tuple[str, tuple[dict[str, Any], ...]] | None:
    """The field's printed path and the patch that removes it, or None where the object no
    longer has it."""
    if field[0] == "tolerations":
        if not pod_spec.get("tolerations"):
            return None
        return ".tolerations", ({"op": "remove", "path": f"{prefix}/tolerations"},)
    if field[0] == "nodeSelector":
        key = field[1]
        if key not in (pod_spec.get("nodeSelector") or {}):
            return None
        return f'.nodeSelector["{key}"]', (
            {"op": "remove", "path": f"{prefix}/nodeSelector/{_escape(key)}"},
        )
    list_name, name, amounts, key = field
    for index, container in enumerate(pod_spec.get(list_name) or []):
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
    shifts nothing the tests name: GPU keys, selector keys and the tolerations list are no list
    members)."""
    operations = [op for field in fields for op in field.remove]
    tests = [op for op in operations if op["op"] == "test"]
    unique_tests = [op for index, op in enumerate(tests) if op not in tests[:index]]
    return unique_tests + [op for op in operations if op["op"] != "test"]
