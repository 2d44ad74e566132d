"""The what-if of `gpuplex queues`: the spec's own `queues:` section, the capacity, what runs, what
waits and what was used before, answered by the admission rules the job runner decides by. Pure.

    capacity: {gpus: 64}                  # amounts as in a tenant quota
    queues:                               # gpuplex.yaml's `queues:` section, as it is
      preemption: {min_runtime_s: 300}
      fair_sharing: {half_life_s: 86400}
      organisations: [...]                # organisations -> teams -> tenants
    running:                              # what holds capacity now
      - {name: train-1, tenant: vision, holds: {gpus: 8}, running_s: 1200}
      - {name: serve-a, tenant: inference, holds: {gpus: 8}, replica: true}   # never preempted
    pending:                              # what waits, each with how long it has waited
      - {name: eval-2, tenant: nlp, asks: {gpus: 4}, priority: 0, waiting_s: 60}
    past:                                 # usage that ended, for fair share over time
      - {tenant: robotics, held: {gpus: 16}, from_s_ago: 90000, until_s_ago: 3600}

`parse_what_if` validates the data read from YAML (the spec's own models and tree rules, then the
file's) into a `WhatIf` of the one queue model (`QueueTree`, `Holding`, `QueuedJob` and the
tenants' decayed usage, now being time 0), or returns every problem with its field path (the
caller adds file positions). `evaluate` runs one admission round (`admission.admit`) over it: each
pending workload's answer is that decision's own for it (it starts, it preempts these, or it waits
for this reason), exactly what the job runner would decide on the same state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import Field, StrictFloat, StrictInt, ValidationError

from gpuplex.core.queues.admission import AdmissionDecision, Holding, QueuedJob, admit
from gpuplex.core.queues.drf import EPSILON, Resources, add
from gpuplex.core.queues.fair_share import fair_shares
from gpuplex.core.queues.standing import QueueStanding, standings
from gpuplex.core.queues.tree import QueueTree, amounts, tree_of
from gpuplex.core.queues.usage import UsageInterval, decayed_usage, usage_level
from gpuplex.core.spec.fields import DnsLabel, SpecModel
from gpuplex.core.spec.parse import did_you_mean, validation_problems
from gpuplex.core.spec.queue_rules import check_queue_tree, tenant_queues
from gpuplex.core.spec.queues import QueuesSpec
from gpuplex.core.spec.quota_kinds import amount_words
from gpuplex.core.spec.tenants import QuotaSpec
from gpuplex.errors import FieldPath, SpecProblem

#: the moment the file describes, on the admission rules' clock
NOW_S = 0.0

Seconds = StrictFloat | StrictInt
#: a job's priority, as a job file's
PRIORITY_BOUND = 1000


class RunningSpec(SpecModel):
    name: str = Field(min_length=1, max_length=253, description="Unique in the file.")
    tenant: DnsLabel
    holds: QuotaSpec
    priority: StrictInt = Field(default=0, ge=-PRIORITY_BOUND, le=PRIORITY_BOUND)
    running_s: Seconds = Field(default=0, ge=0, description="How long it has run.")
    replica: bool = Field(default=False, description="A long-running replica: never preempted.")
    stopping_for: str | None = Field(
        default=None, description="Preempted: stopping for this pending workload."
    )


class PendingSpec(SpecModel):
    name: str = Field(min_length=1, max_length=253, description="Unique in the file.")
    tenant: DnsLabel
    asks: QuotaSpec
    priority: StrictInt = Field(
        default=0, ge=-PRIORITY_BOUND, le=PRIORITY_BOUND, description="Higher goes first."
    )
    waiting_s: Seconds = Field(default=0, ge=0, description="How long it has waited.")


class PastUseSpec(SpecModel):
    tenant: DnsLabel
    held: QuotaSpec
    from_s_ago: Seconds = Field(ge=0, description="It started holding this long ago.")
    until_s_ago: Seconds = Field(default=0, ge=0, description="It stopped this long ago.")


class WhatIfSpec(SpecModel):
    capacity: QuotaSpec
    queues: QueuesSpec
    running: list[RunningSpec] = Field(default_factory=list)
    pending: list[PendingSpec] = Field(default_factory=list)
    past: list[PastUseSpec] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class WhatIf:
    """A validated what-if, in the admission rules' own terms, at time `NOW_S`."""

    tree: QueueTree
    holdings: tuple[Holding, ...]
    queued: tuple[QueuedJob, ...]
    #: per tenant: its decayed usage (kind-seconds) of the running jobs and the past entries
    usage: Mapping[str, Resources]


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One queue as `gpuplex queues` shows it."""

    standing: QueueStanding
    #: a tenant's decayed past usage as an amount held on average (empty for other queues)
    past_use: Resources
    fair_share: Resources


@dataclass(frozen=True, slots=True)
class Answer:
    """The admission decision for one pending workload: `outcome` is `starts` (admitted now),
    `preempts` (`victims` are stopped for it; it starts when they have) or `waits` (`reason`)."""

    job: QueuedJob
    outcome: str
    reason: str
    #: (name, tenant) of each workload preempted for it in this round
    victims: tuple[tuple[str, str], ...]
    #: what the round set aside for it (it waits for that capacity), per kind
    reserved: Resources

    @property
    def starts(self) -> bool:
        return self.outcome == "starts"


@dataclass(frozen=True, slots=True)
class WhatIfReport:
    capacity: Resources
    half_life_s: float
    queues: tuple[QueueRow, ...]
    pending: tuple[Answer, ...]


# --- validation -------------------------------------------------------------------------------


def parse_what_if(data: object) -> WhatIf | list[SpecProblem]:
    """Shape first (the spec's own models), then the tree's rules and the file's. Returns the
    what-if, or every problem found."""
    if data is None:
        return [SpecProblem((), "the file is empty: expected capacity, queues, running, pending")]
    if not isinstance(data, dict):
        kind = type(data).__name__
        return [
            SpecProblem((), f"expected a mapping (capacity:, queues:, ...) at the top, got {kind}")
        ]
    try:
        spec = WhatIfSpec.model_validate(data)
    except ValidationError as error:
        return validation_problems(error, WhatIfSpec)
    problems = list(check_queue_tree(spec.queues))
    problems += check_what_if(spec)
    return problems if problems else _what_if(spec)


def check_what_if(spec: WhatIfSpec) -> list[SpecProblem]:
    """The rules across the file: a tree with tenants, workloads of its tenants with unique
    names and something to hold or ask, running work that fits the capacity, a `stopping_for`
    that names a pending workload, past usage that ended after it began. Guarantees that add up
    to more than the capacity are allowed, as gpuplex.yaml allows them: they cannot all be
    honoured at once, and the answers say so."""
    tenants = [leaf.name for _, leaf in tenant_queues(spec.queues)]
    if not tenants:
        return [
            SpecProblem(
                ("queues", "organisations"),
                "no tenant's queue: add an organisation with a team and a tenant",
            )
        ]
    capacity = amounts(spec.capacity)
    problems: list[SpecProblem] = []
    teams = {q.name for org in spec.queues.organisations for q in [org, *org.teams]}
    named: dict[str, FieldPath] = {}
    entries: list[tuple[FieldPath, str, str | None, QuotaSpec]] = [
        (("running", i), w.tenant, w.name, w.holds) for i, w in enumerate(spec.running)
    ]
    entries += [(("pending", i), w.tenant, w.name, w.asks) for i, w in enumerate(spec.pending)]
    entries += [(("past", i), u.tenant, None, u.held) for i, u in enumerate(spec.past)]
    for path, tenant, name, amount in entries:
        if tenant not in tenants:
            what = "a team or an organisation, not a tenant" if tenant in teams else "no tenant"
            problems.append(
                SpecProblem(
                    (*path, "tenant"),
                    f"{tenant!r} is {what} of queues:{did_you_mean(tenant, tenants)}; "
                    f"tenants: {', '.join(tenants)}",
                )
            )
        if not any(v > EPSILON for v in amounts(amount).values()):
            field = {"running": "holds", "pending": "asks", "past": "held"}[str(path[0])]
            problems.append(SpecProblem((*path, field), "it holds or asks nothing: give an amount"))
        if name is not None:
            if name in named:
                where = SpecProblem(named[name], "").dotted_path
                problems.append(
                    SpecProblem(
                        (*path, "name"), f"{name!r} is already at {where}: names are unique"
                    )
                )
            named.setdefault(name, path)
    problems += _running_fits(spec, capacity)
    pending = {w.name for w in spec.pending}
    for i, work in enumerate(spec.running):
        if work.stopping_for is not None and work.stopping_for not in pending:
            problems.append(
                SpecProblem(
                    ("running", i, "stopping_for"),
                    f"no pending workload is named {work.stopping_for!r}"
                    f"{did_you_mean(work.stopping_for, pending)}",
                )
            )
    for i, use in enumerate(spec.past):
        if use.until_s_ago > use.from_s_ago:
            problems.append(
                SpecProblem(
                    ("past", i, "until_s_ago"),
                    f"it ends ({use.until_s_ago:g} s ago) before it starts "
                    f"({use.from_s_ago:g} s ago)",
                )
            )
    return problems


def _running_fits(spec: WhatIfSpec, capacity: Resources) -> list[SpecProblem]:
    held = add(*(amounts(w.holds) for w in spec.running))
    return [
        SpecProblem(
            ("running",),
            f"the running workloads hold {amount_words(value, kind)}, more than the capacity of "
            f"{capacity.get(kind, 0.0):g}: raise the capacity or list less running work",
        )
        for kind, value in held.items()
        if value > capacity.get(kind, 0.0) + EPSILON
    ]


def _what_if(spec: WhatIfSpec) -> WhatIf:
    tree = tree_of(spec.queues, amounts(spec.capacity))
    holdings = tuple(
        Holding(
            w.name,
            w.tenant,
            amounts(w.holds),
            w.priority,
            NOW_S - w.running_s,
            preemptible=not w.replica,
            stopping_for=w.stopping_for,
        )
        for w in spec.running
    )
    queued = tuple(
        QueuedJob(w.name, w.tenant, amounts(w.asks), w.priority, NOW_S - w.waiting_s)
        for w in spec.pending
    )
    intervals = [
        UsageInterval(h.tenant, h.resources, h.started_s) for h in holdings if h.preemptible
    ]
    intervals += [
        UsageInterval(u.tenant, amounts(u.held), NOW_S - u.from_s_ago, NOW_S - u.until_s_ago)
        for u in spec.past
    ]
    usage = decayed_usage(intervals, NOW_S, tree.half_life_s)
    return WhatIf(tree, holdings, queued, usage)


# --- the answers ------------------------------------------------------------------------------


def evaluate(what_if: WhatIf) -> WhatIfReport:
    """One admission round over the what-if, each pending workload's answer taken from it, and
    each queue's standing, past use and fair share (each tenant demanding what it holds plus
    its pending asks)."""
    tree = what_if.tree
    decision = admit(tree, what_if.holdings, what_if.queued, NOW_S, usage=what_if.usage)
    demands: dict[str, Resources] = {}
    for holding in what_if.holdings:
        demands[holding.tenant] = add(demands.get(holding.tenant, {}), holding.resources)
    for job in what_if.queued:
        demands[job.tenant] = add(demands.get(job.tenant, {}), job.ask)
    shares = fair_shares(tree, demands)
    rows = tuple(
        QueueRow(
            standing,
            {
                kind: usage_level(value, tree.half_life_s)
                for kind, value in what_if.usage.get(standing.name, {}).items()
            }
            if standing.level == "tenant"
            else {},
            shares[standing.name],
        )
        for standing in standings(tree, what_if.holdings)
    )
    answers = tuple(answer(decision, job, what_if.holdings) for job in what_if.queued)
    return WhatIfReport(tree.capacity, tree.half_life_s, rows, answers)


def answer(decision: AdmissionDecision, job: QueuedJob, holdings: Sequence[Holding]) -> Answer:
    """What `decision` says of `job`."""
    tenant_of = {h.id: h.tenant for h in holdings}
    victims = tuple(
        (e.victim, tenant_of[e.victim]) for e in decision.evictions if e.for_job == job.id
    )
    reserved = dict(decision.reserved.get(job.id, {}))
    if job.id in decision.admitted:
        reason = "it starts now: it fits the free capacity and every limit on its way"
        return Answer(job, "starts", reason, (), reserved)
    outcome = "preempts" if victims else "waits"
    return Answer(job, outcome, decision.waiting[job.id], victims, reserved)
