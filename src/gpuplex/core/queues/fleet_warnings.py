"""Warnings, not errors, about a spec's `queues:` against its fleet: guarantees that add up to more
than the fleet holds of a kind. The spec is valid (a fleet may grow, and a guarantee is a promise
the queues keep only while capacity is there), but when every queue claims its guarantee at once
some cannot get it back: reclaim frees borrowed work, never capacity the cluster does not have.
Pure; `gpuplex validate` and `gpuplex plan` print them with the file, line and field.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuplex.core.queues.drf import EPSILON
from gpuplex.core.queues.tree import amounts, fleet_capacity
from gpuplex.core.spec.document import GpuplexSpec
from gpuplex.core.spec.queues import QueueSpec
from gpuplex.core.spec.quota_kinds import MIG_PREFIX, amount_words
from gpuplex.errors import FieldPath, SpecProblem

_LEVELS = ("organisations", "teams", "tenants")


def guarantee_warnings(spec: GpuplexSpec) -> list[SpecProblem]:
    """One warning per kind whose guarantees, at some level of the tree (the organisations', the
    teams' or the tenants'), add up to more than the fleet holds; placed on the guarantee that
    takes the sum past it."""
    if not spec.queues.enabled:
        return []
    capacity = fleet_capacity(spec)
    levels = _levels(spec)
    warnings: list[SpecProblem] = []
    kinds = sorted({kind for queues in levels.values() for _, q in queues for kind in _of(q)})
    for kind in kinds:
        fleet = capacity.get(kind, 0.0)
        for level, queues in levels.items():
            total = sum(_of(queue).get(kind, 0.0) for _, queue in queues)
            if total <= fleet + EPSILON:
                continue
            path = _tipping(queues, kind, fleet)
            warnings.append(
                SpecProblem(
                    (*path, "guarantee", *_field(kind)),
                    f"the {level}' guarantees add up to {amount_words(total, kind)}, more than "
                    f"the fleet holds ({amount_words(fleet, kind)}): they cannot all be met at "
                    "once (reclaim frees borrowed work, not capacity the fleet lacks); lower "
                    "them, or add GPUs to the fleet",
                )
            )
            break  # the highest level past the fleet says it; the levels below add up the same
    return warnings


def _levels(spec: GpuplexSpec) -> dict[str, list[tuple[FieldPath, QueueSpec]]]:
    """Each level's queues with their paths, in the file's order."""
    out: dict[str, list[tuple[FieldPath, QueueSpec]]] = {level: [] for level in _LEVELS}
    for o, org in enumerate(spec.queues.organisations):
        org_path: FieldPath = ("queues", "organisations", o)
        out["organisations"].append((org_path, org))
        for m, team in enumerate(org.teams):
            team_path: FieldPath = (*org_path, "teams", m)
            out["teams"].append((team_path, team))
            for n, leaf in enumerate(team.tenants):
                out["tenants"].append(((*team_path, "tenants", n), leaf))
    return out


def _of(queue: QueueSpec) -> dict[str, float]:
    return amounts(queue.guarantee)


def _tipping(queues: Sequence[tuple[FieldPath, QueueSpec]], kind: str, fleet: float) -> FieldPath:
    """The path of the first queue with which the running sum passes `fleet`."""
    total = 0.0
    for path, queue in queues:
        total += _of(queue).get(kind, 0.0)
        if total > fleet + EPSILON:
            return path
    return queues[-1][0]


def _field(kind: str) -> FieldPath:
    """`gpus` -> (gpus,); `mig:3g.40gb` -> (mig, 3g.40gb), as the guarantee's fields."""
    if kind.startswith(MIG_PREFIX):
        return ("mig", kind.removeprefix(MIG_PREFIX))
    return (kind,)
