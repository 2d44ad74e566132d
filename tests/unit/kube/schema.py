"""Rendered objects against the official Kubernetes OpenAPI schemas (kubernetes-validate, strict:
unknown fields are errors), at the oldest and the newest Kubernetes version gpuplex targets."""

from __future__ import annotations

import functools
from typing import Any

import kubernetes_validate

from gpuplex.kube.naming import MIN_KUBERNETES

# kubernetes-validate reads and parses each schema file again on every call, the 1 MB of
# `_definitions.json` included: about a tenth of the unit tests' CPU. The files never change
# while the suite runs, so each is parsed once (the validator only reads what it is given).
kubernetes_validate.utils.schema_contents = functools.cache(
    kubernetes_validate.utils.schema_contents
)

#: Oldest (ValidatingAdmissionPolicy v1) and newest version with schemas in kubernetes-validate.
KUBERNETES_VERSIONS = (MIN_KUBERNETES, kubernetes_validate.latest_version())

#: Custom resources: no official schema; checked by their own tests.
CUSTOM_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    *(
        ("kueue.x-k8s.io/v1beta2", kind)
        for kind in (
            "ResourceFlavor",
            "WorkloadPriorityClass",
            "Cohort",
            "ClusterQueue",
            "LocalQueue",
        )
    ),
}


def schema_errors(manifest: dict[str, Any]) -> list[str]:
    """Every way `manifest` breaks the official schema, at each version; [] when it is valid."""
    if (manifest.get("apiVersion"), manifest.get("kind")) in CUSTOM_KINDS:
        return []
    errors = []
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(manifest, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            where = ".".join(str(part) for part in error.path)
            errors.append(f"k8s {version}: {manifest.get('kind')}: {where}: {error.message}")
        except kubernetes_validate.SchemaNotFoundError as error:
            errors.append(f"k8s {version}: no schema: {error}")
    return errors


def assert_valid(manifests: list[dict[str, Any]]) -> None:
    problems = [problem for manifest in manifests for problem in schema_errors(manifest)]
    assert not problems, "\n".join(problems)
