"""The what-if file of `gpuplex queues`: a queue tree, what runs and what waits, as typed values.

`parse_queue_file` validates data read from YAML (pydantic models, then cross-field rules) into a
`QueueScenario` of `Queue`, `RunningWorkload` and `PendingWorkload`, or returns every problem
with its field path (the caller adds file positions). `evaluate` answers the scenario: each
queue's guarantee, limit, weight, holdings and fair share, and `why_pending` for each pending
workload. Pure: no file I/O here.

Two choices the file makes for operators: the queues listed are the children of a root named
`cluster` whose guarantee is unset (so the top level's guarantees are bounded by the capacity),
and a limit bounds only the resources it names (the others are bounded by the capacity), where
the library's `Queue.limit` forbids a resource it does not name.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final

from pydantic import BaseModel, BeforeValidator, Field, StrictInt, ValidationError
from pydantic_core import ErrorDetails

from gpuplex.core.queues.drf import EPSILON, Resources, add
from gpuplex.core.queues.hierarchy import (
    Queue,
    RunningWorkload,
    check_tree,
    fair_shares,
    usage_by_tenant,
)
from gpuplex.core.queues.pending import PendingAnswer, PendingWorkload, why_pending
from gpuplex.core.spec.fields import DnsLabel, SpecModel
from gpuplex.core.spec.parse import did_you_mean
from gpuplex.errors import FieldPath, SpecProblem

#: the name of the queue tree's root, above the organisations the file lists
ROOT_NAME: Final = "cluster"


_FLOAT_TEXT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE]\d+$")


def _refuse_non_number(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("expected a number, got true/false")
    if isinstance(value, str) and _FLOAT_TEXT.match(value):
        raise ValueError(
            f"{value} is read as text, not a number: YAML needs a sign on the exponent "
            "(1.0e+3) or a plain number (1000)"
        )
    if not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {value!r}")
    return value


#: the largest amount and the weights accepted: far past any cluster, short of float overflow
MAX_AMOUNT: Final = 1e15
#: the smallest non-zero capacity of a resource (shares are fractions of it)
MIN_CAPACITY: Final = 1e-3
MIN_WEIGHT: Final = 1e-3
MAX_WEIGHT: Final = 1e6

#: an amount of a resource: a number, never true/false or text
Amount = Annotated[float, BeforeValidator(_refuse_non_number), Field(ge=0, le=MAX_AMOUNT)]
#: amounts keyed by resource name ("gpu", "cpu", "memory_mib", ...)
ResourcesSpec = dict[str, Amount]
Text = Annotated[str, Field(min_length=1)]


class QueueSpec(SpecModel):
    """One queue of the tree; a queue without children is a tenant."""

    name: DnsLabel
    guarantee: ResourcesSpec = Field(default_factory=dict)
    limit: ResourcesSpec | None = Field(
        default=None, description="Bounds the resources it names; the others: the capacity."
    )
    weight: Annotated[
        float, BeforeValidator(_refuse_non_number), Field(ge=MIN_WEIGHT, le=MAX_WEIGHT)
    ] = 1.0
    children: list[QueueSpec] = Field(default_factory=list)


class RunningWorkloadSpec(SpecModel):
    name: Text
    tenant: Text
    resources: ResourcesSpec
    priority: StrictInt = 0
    running_s: Amount = 0.0


class PendingWorkloadSpec(SpecModel):
    name: Text
    tenant: Text
    resources: ResourcesSpec
    priority: StrictInt = 0


class NodeFreeSpec(SpecModel):
    name: Text
    free: ResourcesSpec


class QueueFileSpec(SpecModel):
    capacity: Annotated[ResourcesSpec, Field(min_length=1)]
    min_runtime_s: Amount = 0.0
    queues: Annotated[list[QueueSpec], Field(min_length=1)]
    running: list[RunningWorkloadSpec] = Field(default_factory=list)
    pending: list[PendingWorkloadSpec] = Field(default_factory=list)
    nodes: list[NodeFreeSpec] = Field(
        default_factory=list, description="Free resources per node; empty: no one-node check."
    )


@dataclass(frozen=True, slots=True)
class QueueScenario:
    """A validated what-if: the tree under `ROOT_NAME`, what runs, what waits, the nodes' free."""

    root: Queue
    capacity: Resources
    min_runtime_s: float
    running: tuple[RunningWorkload, ...]
    pending: tuple[PendingWorkload, ...]
    #: each node's free resources; empty: the one-node check is skipped
    node_free: tuple[Resources, ...]
    #: each queue's limit as the file writes it (None: none), for showing it back
    written_limits: Mapping[str, Resources | None]


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One queue as `gpuplex queues` shows it; `depth` 1 is an organisation."""

    name: str
    parent: str
    depth: int
    is_tenant: bool
    guarantee: Resources
    limit: Resources | None
    weight: float
    holds: Resources
    fair_share: Resources


@dataclass(frozen=True, slots=True)
class PendingRow:
    workload: PendingWorkload
    answer: PendingAnswer


@dataclass(frozen=True, slots=True)
class QueueReport:
    capacity: Resources
    min_runtime_s: float
    queues: tuple[QueueRow, ...]
    pending: tuple[PendingRow, ...]


# --- validation -------------------------------------------------------------------------------


def parse_queue_file(data: object) -> QueueScenario | list[SpecProblem]:
    """Shape first, then the rules across fields. Returns the scenario, or every problem found."""
    if data is None:
        return [SpecProblem((), "the file is empty: expected capacity, queues, running, pending")]
    if not isinstance(data, dict):
        kind = type(data).__name__
        return [
            SpecProblem((), f"expected a mapping (capacity:, queues:, ...) at the top, got {kind}")
        ]
    try:
        spec = QueueFileSpec.model_validate(data)
    except ValidationError as error:
        return [_problem(detail) for detail in error.errors(include_url=False)]
    problems = check_queue_file(spec)
    if problems:
        return problems
    scenario = _scenario(spec)
    try:
        check_tree(scenario.root, scenario.capacity)
    except ValueError as error:  # the rules above should have caught it; say where anyway
        return [SpecProblem(_queue_path(spec, str(error)), str(error))]
    return scenario


def check_queue_file(spec: QueueFileSpec) -> list[SpecProblem]:
    """Resource names the capacity knows, unique names, guarantees that can all be honoured, and
    workloads that name a tenant."""
    problems = list(_unknown_resources(spec))
    if problems:
        return problems  # the sums below would count a misspelt resource as a new one
    problems += _capacity_amounts(spec)
    problems += _duplicate_names(spec)
    for path, queue in _queues_with_paths(spec.queues, ("queues",)):
        problems += _guarantee_within_limit(queue, path, spec.capacity)
        problems += _children_within_guarantee(
            queue.guarantee, queue.children, (*path, "children"), f"{queue.name}'s guarantee"
        )
    problems += _children_within_guarantee(spec.capacity, spec.queues, ("queues",), "the capacity")
    problems += _workload_tenants(spec)
    return problems


def _unknown_resources(spec: QueueFileSpec) -> Iterator[SpecProblem]:
    known = list(spec.capacity)
    amounts: list[tuple[FieldPath, ResourcesSpec]] = []
    for path, queue in _queues_with_paths(spec.queues, ("queues",)):
        amounts.append(((*path, "guarantee"), queue.guarantee))
        if queue.limit is not None:
            amounts.append(((*path, "limit"), queue.limit))
    amounts += [(("running", i, "resources"), w.resources) for i, w in enumerate(spec.running)]
    amounts += [(("pending", i, "resources"), w.resources) for i, w in enumerate(spec.pending)]
    amounts += [(("nodes", i, "free"), node.free) for i, node in enumerate(spec.nodes)]
    for path, resources in amounts:
        for resource in resources:
            if resource not in spec.capacity:
                yield SpecProblem(
                    (*path, resource),
                    f"unknown resource {resource!r}{did_you_mean(resource, known)}; the capacity "
                    f"names {', '.join(known)}: add it there or use one of those",
                )


def _capacity_amounts(spec: QueueFileSpec) -> Iterator[SpecProblem]:
    """A capacity of 0 or at least `MIN_CAPACITY`, and what runs fits in it."""
    for resource, amount in spec.capacity.items():
        if 0 < amount < MIN_CAPACITY:
            yield SpecProblem(
                ("capacity", resource),
                f"a capacity of {amount:g} {resource} is too small to share out: write 0 or at "
                f"least {MIN_CAPACITY:g} (or count the resource in a smaller unit)",
            )
    held = add(*(w.resources for w in spec.running))
    for resource, amount in held.items():
        bound = spec.capacity.get(resource, 0.0)
        if amount > bound * (1 + 1e-9) + EPSILON:
            yield SpecProblem(
                ("running",),
                f"the running workloads hold {_number(amount)} {resource}, more than the "
                f"capacity of {_number(bound)}: raise the capacity or list less running work",
            )


def _duplicate_names(spec: QueueFileSpec) -> Iterator[SpecProblem]:
    first: dict[str, FieldPath] = {}
    for path, queue in _queues_with_paths(spec.queues, ("queues",)):
        if queue.name == ROOT_NAME:
            yield SpecProblem(
                (*path, "name"), f"{ROOT_NAME!r} is the name of the tree's root: rename the queue"
            )
        elif queue.name in first:
            where = _dotted(first[queue.name])
            yield SpecProblem(
                (*path, "name"), f"queue {queue.name!r} is already at {where}: names must be unique"
            )
        else:
            first[queue.name] = path
    for section, workloads in _workload_sections(spec):
        seen: set[str] = set()
        for i, workload in enumerate(workloads):
            if workload.name in seen:
                yield SpecProblem(
                    (section, i, "name"),
                    f"{section} workload {workload.name!r} is listed twice: names must be unique",
                )
            seen.add(workload.name)


def _guarantee_within_limit(
    queue: QueueSpec, path: FieldPath, capacity: ResourcesSpec
) -> Iterator[SpecProblem]:
    if queue.limit is None:
        return
    for resource, amount in queue.guarantee.items():
        bound = queue.limit.get(resource, capacity[resource])
        if amount > bound + EPSILON:
            yield SpecProblem(
                (*path, "guarantee", resource),
                f"{queue.name}'s {resource} guarantee of {_number(amount)} is past its own limit "
                f"of {_number(bound)}: lower the guarantee or raise the limit",
            )


def _children_within_guarantee(
    bound: ResourcesSpec, children: Sequence[QueueSpec], path: FieldPath, what: str
) -> Iterator[SpecProblem]:
    """Children's guarantees add up to at most their parent's (the top level's: the capacity)."""
    for resource in dict.fromkeys(r for child in children for r in child.guarantee):
        total = sum(child.guarantee.get(resource, 0.0) for child in children)
        if total > bound.get(resource, 0.0) + EPSILON:
            parts = ", ".join(
                f"{c.name} {_number(c.guarantee[resource])}"
                for c in children
                if resource in c.guarantee
            )
            yield SpecProblem(
                path,
                f"the {resource} guarantees here add up to {_number(total)} ({parts}), past "
                f"{what} of {_number(bound.get(resource, 0.0))}: they could not all be honoured "
                "at once; lower them or raise the one above",
            )


def _workload_tenants(spec: QueueFileSpec) -> Iterator[SpecProblem]:
    queues = {queue.name: queue for _, queue in _queues_with_paths(spec.queues, ("queues",))}
    tenants = [name for name, queue in queues.items() if not queue.children]
    for section, workloads in _workload_sections(spec):
        for i, workload in enumerate(workloads):
            queue = queues.get(workload.tenant)
            if queue is None:
                message = (
                    f"no queue named {workload.tenant!r}{did_you_mean(workload.tenant, tenants)}; "
                    f"tenants: {', '.join(tenants)}"
                )
            elif queue.children:
                message = (
                    f"{workload.tenant!r} has children, so it is not a tenant: only queues "
                    f"without children run workloads (tenants: {', '.join(tenants)})"
                )
            else:
                continue
            yield SpecProblem((section, i, "tenant"), message)


def _workload_sections(
    spec: QueueFileSpec,
) -> list[tuple[str, Sequence[RunningWorkloadSpec | PendingWorkloadSpec]]]:
    return [("running", spec.running), ("pending", spec.pending)]


def _queues_with_paths(
    queues: Sequence[QueueSpec], path: FieldPath
) -> Iterator[tuple[FieldPath, QueueSpec]]:
    """Every queue with its field path, parents before children."""
    for i, queue in enumerate(queues):
        yield (*path, i), queue
        yield from _queues_with_paths(queue.children, (*path, i, "children"))


def _queue_path(spec: QueueFileSpec, message: str) -> FieldPath:
    """The field path of the queue a `check_tree` message names, else the queues list."""
    match = re.match(r"queue (\S+):", message)
    for path, queue in _queues_with_paths(spec.queues, ("queues",)):
        if match is not None and queue.name == match.group(1):
            return path
    return ("queues",)


def _problem(detail: ErrorDetails) -> SpecProblem:
    loc = tuple(detail["loc"])
    message = detail["msg"].removeprefix("Value error, ")
    if detail["type"] == "extra_forbidden" and loc:
        key = str(loc[-1])
        known = _field_names(loc[:-1])
        message = f"unknown key {key!r}{did_you_mean(key, known)}"
        if known:
            message += f"; allowed here: {', '.join(sorted(known))}"
    elif detail["type"] == "missing":
        message = "required field is missing"
    return SpecProblem(loc, message)


def _field_names(loc: tuple[int | str, ...]) -> list[str]:
    """The fields of the model that validates the data at `loc`, if a model does."""
    current: Any = QueueFileSpec
    for part in loc:
        if isinstance(current, type) and issubclass(current, BaseModel) and isinstance(part, str):
            field = current.model_fields.get(part)
            current = field.annotation if field is not None else None
        elif typing.get_origin(current) is list and isinstance(part, int):
            current = typing.get_args(current)[0]
        else:
            return []
        if typing.get_origin(current) is Annotated:
            current = typing.get_args(current)[0]
        if typing.get_origin(current) in (typing.Union, types.UnionType):
            current = next(a for a in typing.get_args(current) if a is not type(None))
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


# --- conversion -------------------------------------------------------------------------------


def _scenario(spec: QueueFileSpec) -> QueueScenario:
    capacity = dict(spec.capacity)
    limits: dict[str, Resources | None] = {}

    def queue(entry: QueueSpec) -> Queue:
        limits[entry.name] = None if entry.limit is None else dict(entry.limit)
        limit = None if entry.limit is None else {**capacity, **entry.limit}
        children = tuple(queue(child) for child in entry.children)
        return Queue(entry.name, dict(entry.guarantee), limit, entry.weight, children)

    root = Queue(ROOT_NAME, children=tuple(queue(entry) for entry in spec.queues))
    running = tuple(
        RunningWorkload(w.name, w.tenant, dict(w.resources), w.priority, w.running_s)
        for w in spec.running
    )
    pending = tuple(
        PendingWorkload(w.name, w.tenant, dict(w.resources), w.priority) for w in spec.pending
    )
    node_free = tuple(dict(node.free) for node in spec.nodes)
    return QueueScenario(root, capacity, spec.min_runtime_s, running, pending, node_free, limits)


# --- the answers ------------------------------------------------------------------------------


def evaluate(scenario: QueueScenario) -> QueueReport:
    """Each queue's numbers, with fair shares for demands = holdings + pending asks per tenant,
    and why each pending workload waits (or that it starts), each on its own against what runs."""
    usage = usage_by_tenant(scenario.running)
    demands = dict(usage)
    for workload in scenario.pending:
        demands[workload.tenant] = add(demands.get(workload.tenant, {}), workload.resources)
    shares = fair_shares(scenario.root, scenario.capacity, demands)
    rows: list[QueueRow] = []

    def visit(queue: Queue, parent: Queue, depth: int) -> None:
        holds = add(*(usage.get(t.name, {}) for t in queue.tenants()))
        rows.append(
            QueueRow(
                queue.name,
                parent.name,
                depth,
                not queue.children,
                queue.guarantee,
                scenario.written_limits.get(queue.name),
                queue.weight,
                _tidy(holds, scenario.capacity),
                _tidy(shares[queue.name], scenario.capacity),
            )
        )
        for child in queue.children:
            visit(child, queue, depth + 1)

    for top in scenario.root.children:
        visit(top, scenario.root, 1)
    answers = tuple(
        PendingRow(
            workload,
            why_pending(
                scenario.root,
                scenario.capacity,
                scenario.running,
                workload,
                min_runtime_s=scenario.min_runtime_s,
                node_free=scenario.node_free or None,
            ),
        )
        for workload in scenario.pending
    )
    return QueueReport(scenario.capacity, scenario.min_runtime_s, tuple(rows), answers)


def _tidy(amount: Resources, capacity: Resources) -> dict[str, float]:
    """Every resource of the capacity, in its order, float dust rounded away."""
    return {r: round(amount.get(r, 0.0), 6) + 0.0 for r in capacity}


def _number(value: float) -> str:
    return str(round(value)) if abs(value - round(value)) < 1e-6 else f"{value:g}"


def _dotted(path: FieldPath) -> str:
    return SpecProblem(path, "").dotted_path
