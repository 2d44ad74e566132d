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


class _ManifestDumper(yaml.SafeDumper):
    """Writes multi-line strings (the configs embedded in ConfigMaps) as `|` blocks a person can read."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value and not any(line != line.rstrip() for line in value.splitlines()):
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_ManifestDumper.add_representer(str, _text)


def _dump(manifests: list[Manifest]) -> str:
    return yaml.dump_all(
        manifests, Dumper=_ManifestDumper, sort_keys=False, default_flow_style=False, width=100
    )


def to_yaml(manifests: list[Manifest]) -> str:
    """A `---`-separated stream in apply order, as `kubectl apply -f -` reads it."""
    return _dump(manifests)


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
        path.write_text(_dump([manifest]))
        written.append(path)
    return written
