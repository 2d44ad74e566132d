"""Per-replica log files. A replica writes straight into its files (opened for append), so its output
never depends on gpuplex being alive; gpuplex rotates them by copy-and-truncate, which is safe with
O_APPEND writers."""

from __future__ import annotations

import shutil
from pathlib import Path


def log_paths(logs_dir: Path, tenant: str, unit: str) -> tuple[Path, Path]:
    """A unit's stdout and stderr files, its tenant's folder made if it is missing."""
    (logs_dir / tenant).mkdir(parents=True, exist_ok=True)
    return log_files(logs_dir, tenant, unit)


def log_files(logs_dir: Path, tenant: str, unit: str) -> tuple[Path, Path]:
    """Where a unit's stdout and stderr go: `<logs>/<tenant>/<unit>.stdout.log` and
    `.stderr.log` (a replica's unit is `<workload>-<replica>`; a job's `job-<id>-0`)."""
    folder = logs_dir / tenant
    return folder / f"{unit}.stdout.log", folder / f"{unit}.stderr.log"


def rotate_if_large(path: Path, max_bytes: int, keep: int) -> bool:
    """`x.log` over max_bytes becomes `x.log.1` (older ones shift up to `keep`); `x.log` is emptied."""
    try:
        if path.stat().st_size <= max_bytes:
            return False
    except FileNotFoundError:
        return False
    for n in range(keep, 1, -1):
        older = path.with_name(f"{path.name}.{n - 1}")
        if older.exists():
            older.replace(path.with_name(f"{path.name}.{n}"))
    shutil.copyfile(path, path.with_name(f"{path.name}.1"))
    with path.open("r+b") as handle:
        handle.truncate(0)
    return True
