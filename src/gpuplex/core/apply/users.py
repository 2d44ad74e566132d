"""Which Unix user a replica runs as when gpuplex runs as root. Pure: names only.

- `unix_user: root` in the spec is the explicit, warned-about opt-in to run a tenant as root.
- Another `unix_user` is the operator's own user for that tenant (it must exist).
- Without one, each tenant gets a system user of its own, `gpx-<instance>-<tenant>`, created on
  first apply: a tenant cannot signal, trace or read the files of another tenant's processes.
  MPS clients are the exception: NVIDIA's MPS serves one Unix user at a time per control daemon
  (clients of another user wait until every client of the first has exited), so the clients of
  one GPU's daemon share `gpx-<instance>-mps<gpu>`; that is the documented price of MPS, whose
  tenants NVIDIA describes as cooperative."""

from __future__ import annotations

import hashlib

from gpuplex.core.apply.model import WorkloadDesired
from gpuplex.core.plan.model import Mode
from gpuplex.core.spec import GpuplexSpec

#: `unix_user: root` runs a tenant as root: an explicit opt-in, never a default.
ROOT_OPT_IN = "root"
#: Linux user names are at most 32 characters (useradd's limit).
MAX_NAME_CHARS = 32
#: How much of the instance digest goes into a user name.
INSTANCE_CHARS = 6


def runs_as_root(wanted: WorkloadDesired) -> bool:
    return wanted.unix_user == ROOT_OPT_IN


def replica_user(wanted: WorkloadDesired, instance: str) -> str:
    """The user the replica runs as under a root gpuplex (see the module's text)."""
    if wanted.unix_user is not None:
        return wanted.unix_user
    prefix = f"gpx-{instance[:INSTANCE_CHARS]}-"
    if wanted.binding.mode is Mode.MPS:
        return _fit(f"{prefix}mps{wanted.binding.gpu_indices[0]}")
    return _fit(prefix + wanted.tenant)


def is_default_user(name: str, instance: str) -> bool:
    """Whether `name` is one gpuplex makes (and may create) for this instance."""
    return name.startswith(f"gpx-{instance[:INSTANCE_CHARS]}-")


def _fit(name: str) -> str:
    """`name`, or a shortened one that stays unique (a digest of the whole) when too long."""
    if len(name) <= MAX_NAME_CHARS:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:6]
    return f"{name[: MAX_NAME_CHARS - 7]}-{digest}"


def root_warnings(spec: GpuplexSpec) -> list[str]:
    """One warning per tenant that opts in to running as root: said by validate, plan and apply."""
    return [
        f"tenant {tenant.name} runs as root (unix_user: root): its processes can read and change "
        "everything on the host, other tenants and gpuplex included, and leave their cgroup; "
        "remove unix_user to run it as its own unprivileged user"
        for tenant in spec.tenants
        if tenant.unix_user == ROOT_OPT_IN
    ]
