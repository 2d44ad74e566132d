"""Typed settings, built once in `main` and passed down. The only module that reads the environment."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

#: What a tenant process inherits from gpuplex's own environment; nothing else (no secrets) passes.
INHERITED_VARIABLES = ("PATH", "LANG", "LC_ALL", "TZ")


def inherited_environment() -> dict[str, str]:
    return {name: os.environ[name] for name in INHERITED_VARIABLES if name in os.environ}


def environment_value(name: str) -> str | None:
    return os.environ.get(name)


def default_state_dir() -> Path:
    """/var/lib/gpuplex for root; else $XDG_STATE_HOME/gpuplex (~/.local/state/gpuplex)."""
    if os.geteuid() == 0:
        return Path("/var/lib/gpuplex")
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gpuplex"


@dataclass(frozen=True, slots=True)
class HostSettings:
    state_dir: Path
    node: str | None = None  # the fleet node this server is; None: the spec's only node
    driver: str = "auto"  # auto | nvml | sim
    interval_s: float = 1.0  # reconcile period

    def with_driver(self, driver: str) -> HostSettings:
        return replace(self, driver=driver)
