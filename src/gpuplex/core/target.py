"""Where a plan runs. On its own, without the planner, so that the `gpuplex` commands that take a
`--target` option can describe it without loading the plan models."""

from __future__ import annotations

from enum import StrEnum


class Target(StrEnum):
    """Where a plan runs: the host runtime, or Kubernetes through `gpuplex kube render`."""

    HOST = "host"
    KUBERNETES = "kubernetes"
