"""Rules for `queues:` that pydantic cannot express: every leaf is a tenant of the spec and appears
once, names are unique across the tree, MIG profiles exist, a guarantee fits its own limit, and the
guarantees below a queue fit inside its own. A tenant's long-running replicas count against its
queue, so they must fit its limit. `check_queue_tree` is the part about the tree alone (the what-if
of `gpuplex queues` checks its tree with it)."""

from __future__ import annotations

from collections.abc import Iterator

from gpuplex.core.catalog import GPU_MODELS
from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.core.spec.parse import did_you_mean
from gpuplex.core.spec.queues import QueueSpec, QueuesSpec, TenantQueueSpec
from gpuplex.core.spec.quota_kinds import MIG_PREFIX, amount_words
from gpuplex.core.spec.tenants import QuotaSpec
from gpuplex.errors import FieldPath, SpecProblem

#: the kinds of a quota, by the name of their field
_KINDS = ("gpus", "gpu_memory_gib", "compute_percent")


def check_queues(spec: GpuplexSpec) -> Iterator[SpecProblem]:
    queues = spec.queues
    if not queues.enabled:
        return
    yield from check_queue_tree(queues)
    tenants = {t.name: t for t in spec.tenants}
    seen_tenants: dict[str, FieldPath] = {}
    for path, leaf in tenant_queues(queues):
        if leaf.name not in tenants:
            hint = did_you_mean(leaf.name, list(tenants))
            yield SpecProblem(
                (*path, "name"), f"unknown tenant {leaf.name!r}{hint}: a leaf is a tenant"
            )
        elif leaf.name in seen_tenants:
            yield SpecProblem((*path, "name"), f"tenant {leaf.name!r} is in more than one team")
        else:
            seen_tenants[leaf.name] = path
            yield from _replicas_fit(spec, leaf.name, leaf.limit, path)


def check_queue_tree(queues: QueuesSpec, at: FieldPath = ("queues",)) -> Iterator[SpecProblem]:
    """The rules of the tree alone (`at`: where `queues` is in the file): unique names, known MIG
    profiles, guarantees within their own limits and inside their parents'."""
    names: dict[str, FieldPath] = {}
    for o, org in enumerate(queues.organisations):
        org_path: FieldPath = (*at, "organisations", o)
        yield from _unique(names, org.name, org_path)
        yield from _check_queue(org, org_path)
        yield from _children_fit(org, list(org.teams), (*org_path, "teams"))
        for m, team in enumerate(org.teams):
            team_path: FieldPath = (*org_path, "teams", m)
            yield from _unique(names, team.name, team_path)
            yield from _check_queue(team, team_path)
            yield from _children_fit(team, list(team.tenants), (*team_path, "tenants"))
            for n, leaf in enumerate(team.tenants):
                path: FieldPath = (*team_path, "tenants", n)
                yield from _unique(names, leaf.name, path)
                yield from _check_queue(leaf, path)


def tenant_queues(
    queues: QueuesSpec, at: FieldPath = ("queues",)
) -> Iterator[tuple[FieldPath, TenantQueueSpec]]:
    """Every tenant's queue with its field path, in file order."""
    for o, org in enumerate(queues.organisations):
        for m, team in enumerate(org.teams):
            for n, leaf in enumerate(team.tenants):
                yield (*at, "organisations", o, "teams", m, "tenants", n), leaf


def _unique(names: dict[str, FieldPath], name: str, path: FieldPath) -> Iterator[SpecProblem]:
    """Organisations, teams and tenants share one namespace (they are all queue names)."""
    if name in names:
        yield SpecProblem(
            (*path, "name"),
            f"queue name {name!r} is used twice (also at {_dotted(names[name])}): organisations, "
            "teams and tenants share one namespace",
        )
    else:
        names[name] = path


def _dotted(path: FieldPath) -> str:
    return ".".join(str(part) for part in path)


def _check_queue(queue: QueueSpec, path: FieldPath) -> Iterator[SpecProblem]:
    yield from _profiles(queue.guarantee, (*path, "guarantee"))
    if queue.limit is None:
        return
    yield from _profiles(queue.limit, (*path, "limit"))
    for kind, guaranteed, limit in _pairs(queue.guarantee, queue.limit):
        if guaranteed > limit:
            yield SpecProblem(
                (*path, "limit", *kind),
                f"the limit ({limit:g}) is below the guarantee ({guaranteed:g})",
            )


def _children_fit(
    parent: QueueSpec, children: list[QueueSpec], path: FieldPath
) -> Iterator[SpecProblem]:
    """The children's guarantees add up to at most the parent's, kind by kind (a kind the
    parent does not guarantee is not bounded here)."""
    for kind in _all_kinds(parent.guarantee):
        total = sum(_amount(child.guarantee, kind) for child in children)
        own = _amount(parent.guarantee, kind)
        if total > own:
            yield SpecProblem(
                path,
                f"the guarantees below {parent.name!r} add up to {_words(total, kind)}, "
                f"more than its own guarantee of {own:g}",
            )


def _replicas_fit(
    spec: GpuplexSpec, tenant: str, limit: QuotaSpec | None, path: FieldPath
) -> Iterator[SpecProblem]:
    if limit is None:
        return
    workloads = next(t.workloads for t in spec.tenants if t.name == tenant)
    whole = sum(w.gpu.count * w.replicas for w in workloads if w.gpu and w.gpu.count)
    if limit.gpus is not None and whole > limit.gpus:
        yield SpecProblem(
            (*path, "limit", "gpus"),
            f"{tenant}'s long-running replicas already hold {whole} whole GPUs, over this limit "
            f"of {limit.gpus}: they count against the same queue",
        )


def _profiles(quota: QuotaSpec, path: FieldPath) -> Iterator[SpecProblem]:
    known = sorted({p.name for m in GPU_MODELS if m.mig for p in m.mig.profiles})
    for profile in quota.mig:
        if profile not in known:
            yield SpecProblem(
                (*path, "mig", profile),
                f"unknown MIG profile {profile!r}{did_you_mean(profile, known)}",
            )


def _all_kinds(quota: QuotaSpec) -> list[tuple[str, ...]]:
    kinds: list[tuple[str, ...]] = [(k,) for k in _KINDS if getattr(quota, k) is not None]
    return kinds + [("mig", profile) for profile in quota.mig]


def _words(amount: float, kind: tuple[str, ...]) -> str:
    """`4 GPUs`, `2 MIG 1g.10gb slices`: an amount of a quota's kind in words."""
    return amount_words(amount, MIG_PREFIX + kind[1] if kind[0] == "mig" else kind[0])


def _amount(quota: QuotaSpec, kind: tuple[str, ...]) -> float:
    if kind[0] == "mig":
        return float(quota.mig.get(kind[1], 0))
    value = getattr(quota, kind[0])
    return 0.0 if value is None else float(value)


def _pairs(
    guarantee: QuotaSpec, limit: QuotaSpec
) -> Iterator[tuple[tuple[str, ...], float, float]]:
    """(kind, guaranteed, limit) for each kind the limit sets."""
    for kind in _all_kinds(limit):
        yield kind, _amount(guarantee, kind), _amount(limit, kind)
