"""Field ownership as the real API server keeps it (server-side apply, `managedFields`), for the
fake API server.

An object is seen as a set of leaf fields, each with a path in the API's own notation
(`f:spec`, `f:containers`, `k:{"name":"server"}`, ...). Lists of objects that all carry a `name`
are associative (keyed by name), as `containers`, `env` and `volumes` are on the real server;
every other list is atomic (one field, owned whole), as `tolerations` and `args` are.

- An apply by manager M makes M the owner of exactly the fields it sent; with `force` it takes
  them from other managers. A field M owned before and no longer sends is removed from the object,
  unless another manager still owns it. Fields other managers own and M never sends stay, with
  their owners: that is how a `kubectl patch` survives gpuplex's forced apply.
- An update (a merge or JSON patch) by M makes M the owner of the fields it changed; fields it
  removed disappear from every manager's set.
"""

from __future__ import annotations

import copy
import json
from typing import Any

Path = tuple[str, ...]

#: Object parts no manager owns: identity, bookkeeping and status.
_UNOWNED_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "deletionTimestamp",
    "finalizers",
)


def _keyed(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(item, dict) and isinstance(item.get("name"), str) for item in value)
    )


def _key(item: dict[str, Any]) -> str:
    return "k:" + json.dumps({"name": item["name"]}, separators=(",", ":"))


def leaves(obj: Any, prefix: Path = ()) -> dict[Path, Any]:
    """Every leaf field of `obj` with its value, in document order."""
    out: dict[Path, Any] = {}
    if isinstance(obj, dict) and obj:
        for key, value in obj.items():
            out.update(leaves(value, (*prefix, f"f:{key}")))
    elif _keyed(obj):
        for item in obj:
            out[(*prefix, _key(item), "f:name")] = item["name"]
            rest = {key: value for key, value in item.items() if key != "name"}
            out.update(leaves(rest, (*prefix, _key(item))) if rest else {})
    elif prefix:
        out[prefix] = copy.deepcopy(obj)
    return out


def build(fields: dict[Path, Any]) -> dict[str, Any]:
    """The object the leaves make (the inverse of `leaves`)."""
    root: dict[str, Any] = {}
    for path, value in fields.items():
        node: Any = root
        for index, part in enumerate(path):
            last = index == len(path) - 1
            if part.startswith("k:"):
                name = json.loads(part[2:])["name"]
                item = next((i for i in node if i.get("name") == name), None)
                if item is None:
                    item = {"name": name}
                    node.append(item)
                node = item
                continue
            key = part[2:]
            if last:
                if not (isinstance(node.get(key), dict) and value == {}):
                    node[key] = copy.deepcopy(value)
                continue
            following = path[index + 1]
            node = node.setdefault(key, [] if following.startswith("k:") else {})
    return root


def owned_part(obj: dict[str, Any]) -> dict[str, Any]:
    """What managers can own of an object: all but apiVersion, kind, status and bookkeeping."""
    out = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "status", "metadata")}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _UNOWNED_METADATA}
    if meta:
        out["metadata"] = meta
    return out


def to_fields_v1(paths: set[Path]) -> dict[str, Any]:
    """A manager's set as `managedFields[].fieldsV1` (a tree of `f:`/`k:` keys; `.` marks an
    owned map that also has owned members, as the API writes it)."""
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for part in path:
            node = node.setdefault(part, {})
    return tree


def from_fields_v1(tree: dict[str, Any], prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    for part, child in tree.items():
        if part == ".":
            continue
        path = (*prefix, part)
        if child:
            out |= from_fields_v1(child, path)
        else:
            out.add(path)
    return out


class Ownership:
    """The managers of one object and the fields each owns, kept beside the stored object."""

    def __init__(self, entries: list[tuple[str, str, set[Path]]] | None = None) -> None:
        #: (manager, operation) -> owned leaf paths, in the order managers first wrote.
        self.sets: dict[tuple[str, str], set[Path]] = {}
        for manager, operation, paths in entries or []:
            self.sets[(manager, operation)] = set(paths)

    @classmethod
    def of(cls, obj: dict[str, Any] | None) -> Ownership:
        entries = []
        for entry in (obj or {}).get("metadata", {}).get("managedFields") or []:
            paths = from_fields_v1(entry.get("fieldsV1") or {})
            entries.append((entry["manager"], entry["operation"], paths))
        return cls(entries)

    def apply(
        self, manager: str, before: dict[str, Any] | None, body: dict[str, Any]
    ) -> dict[str, Any]:
        """The object after `manager` applies `body` (forced), and the sets updated."""
        old = leaves(owned_part(before or {}))
        sent = leaves(owned_part(body))
        mine = self.sets.get((manager, "Apply"), set())
        for key in list(self.sets):
            if key != (manager, "Apply"):
                self.sets[key] -= set(sent)
        others = set().union(
            *(paths for key, paths in self.sets.items() if key != (manager, "Apply"))
        )
        dropped = {path for path in mine - set(sent) if path not in others}
        result = {path: value for path, value in old.items() if path not in dropped}
        result.update(sent)
        self.sets[(manager, "Apply")] = set(sent)
        self._tidy(result)
        return build(result)

    def update(self, manager: str, before: dict[str, Any], after: dict[str, Any]) -> None:
        """`manager` changed `before` into `after` by a patch: it owns what it changed."""
        old = leaves(owned_part(before))
        new = leaves(owned_part(after))
        changed = {path for path, value in new.items() if old.get(path, _MISSING) != value}
        for key in list(self.sets):
            if key != (manager, "Update"):
                self.sets[key] -= changed
        self.sets.setdefault((manager, "Update"), set()).update(changed)
        self._tidy(new)

    def _tidy(self, present: dict[Path, Any]) -> None:
        """Fields that are gone leave every set; managers left with nothing leave the list."""
        for key in list(self.sets):
            self.sets[key] &= set(present)
            if not self.sets[key]:
                del self.sets[key]

    def managed_fields(self, api_version: str, time: str) -> list[dict[str, Any]]:
        return [
            {
                "manager": manager,
                "operation": operation,
                "apiVersion": api_version,
                "time": time,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(paths),
            }
            for (manager, operation), paths in self.sets.items()
        ]


_MISSING = object()
