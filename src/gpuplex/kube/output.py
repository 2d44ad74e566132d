"""Rendered objects as files: one YAML stream, or a directory with one file per object."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpuplex.kube.naming import Manifest


def object_id(manifest: Manifest) -> str:
    """`Kind/namespace/name` (cluster-scoped: `Kind/name`): how an object is named in messages."""
    meta = manifest.get("metadata", {})
    namespace = meta.get("namespace")
    name = meta.get("name", "?")
    kind = manifest.get("kind", "?")
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


def to_yaml(manifests: list[Manifest]) -> str:
    """A `---`-separated stream in apply order, as `kubectl apply -f -` reads it."""
    return yaml.safe_dump_all(manifests, sort_keys=False, default_flow_style=False, width=100)


def file_name(position: int, manifest: Manifest) -> str:
    """`007-namespace-contoso.yaml`: files sort in apply order."""
    meta = manifest.get("metadata", {})
    parts = [manifest.get("kind", "object").lower(), meta.get("namespace"), meta.get("name")]
    stem = "-".join(str(part) for part in parts if part)
    return f"{position:03d}-{stem}.yaml"


def write_directory(manifests: list[Manifest], directory: Path) -> list[Path]:
    """One file per object; files gpuplex wrote before and no longer renders are removed."""
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("[0-9][0-9][0-9]-*.yaml"):
        stale.unlink()
    written = []
    for position, manifest in enumerate(manifests, start=1):
        path = directory / file_name(position, manifest)
        path.write_text(yaml.safe_dump(manifest, sort_keys=False, width=100))
        written.append(path)
    return written
