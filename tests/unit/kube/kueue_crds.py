"""Kueue's CRDs from `../shared/data/kueue-crds` (not shipped with gpuplex): their documents, and
rendered objects checked against the openAPIV3Schema of the version they name.

The schemas are Kubernetes structural schemas; to check them with `jsonschema` the helper turns
`x-kubernetes-int-or-string` into "integer or string", lets `x-kubernetes-preserve-unknown-fields`
objects hold anything, and makes every other object with listed properties refuse unknown ones
(the API server would silently drop them, which hides a misspelt field). CEL rules
(`x-kubernetes-validations`) are left to the real API server (tests/kube_real).
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

KUEUE_CRDS = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "kueue-crds"
GROUP = "kueue.x-k8s.io"


def require_crds() -> Path:
    if not KUEUE_CRDS.is_dir():
        pytest.skip(f"Kueue's CRDs are not at {KUEUE_CRDS} (shared test data, not shipped)")
    return KUEUE_CRDS


@cache
def crd_documents() -> tuple[dict[str, Any], ...]:
    """Every CustomResourceDefinition in the shared directory, file name order."""
    return tuple(
        yaml.safe_load(path.read_text()) for path in sorted(require_crds().glob(f"{GROUP}_*.yaml"))
    )


@cache
def _schemas() -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    for crd in crd_documents():
        kind = crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = structural_to_json_schema(version["schema"]["openAPIV3Schema"])
            out[f"{GROUP}/{version['name']}", kind] = schema
    return out


def structural_to_json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of a structural schema that `jsonschema` reads as the API server does (see the
    module docstring)."""
    out = copy.deepcopy(schema)
    _convert(out)
    return out


def _convert(node: dict[str, Any]) -> None:
    if node.pop("x-kubernetes-int-or-string", False):
        node.pop("type", None)
        node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    preserve = node.pop("x-kubernetes-preserve-unknown-fields", False)
    for key in [k for k in node if k.startswith("x-kubernetes-")]:
        del node[key]
    if "properties" in node:
        for child in node["properties"].values():
            _convert(child)
        if not preserve and "additionalProperties" not in node:
            node["additionalProperties"] = False
    if isinstance(node.get("additionalProperties"), dict):
        _convert(node["additionalProperties"])
    if isinstance(node.get("items"), dict):
        _convert(node["items"])


def kueue_errors(manifest: dict[str, Any]) -> list[str]:
    """How `manifest` breaks its CRD's schema; [] when it is valid."""
    key = (manifest.get("apiVersion", ""), manifest.get("kind", ""))
    schema = _schemas().get(key)
    if schema is None:
        return [f"no Kueue CRD serves {key[0]} {key[1]}"]
    validator = jsonschema.Draft7Validator(schema)
    name = manifest.get("metadata", {}).get("name")
    return [
        f"{key[1]}/{name}: {'.'.join(str(p) for p in error.absolute_path)}: {error.message}"
        for error in validator.iter_errors(manifest)
    ]


def served_storage_version(kind: str) -> str:
    """The version the CRD stores `kind` in (the one gpuplex renders)."""
    for crd in crd_documents():
        if crd["spec"]["names"]["kind"] == kind:
            versions = crd["spec"]["versions"]
            return str(next(v["name"] for v in versions if v["storage"] and v["served"]))
    raise AssertionError(f"no Kueue CRD for {kind}")
