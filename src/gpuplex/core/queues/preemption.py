"""Which running work an admission round preempts, and the proof that it preempts no more than the
claims it serves need. Pure.

Per claim (`choose_victims`), against the room the claim has once the work already leaving is
gone (`RoundLedger.room_soon`: what earlier victims of the round free beyond their own claimants'
asks counts as room): reclaimed work is borrowed work of other tenants, taken lowest priority
first, then the youngest, from a tenant only while it is still above its own guarantee; with
`within_queue: lower_priority` the claim's own tenant's lower-priority work, until its queues
are under their limits and it fits. Either way only work that frees a kind the claim asks is
taken, and the set is then pruned: a victim the others make unnecessary is spared.

Over the round (`spare_unneeded`), the victims are pruned once more against every claim the round
serves together (the jobs waiting for work preempted for them or for room leaving work frees, and
the first guaranteed job short of capacity, each with what the round set aside for it): a victim
is spared when, with it kept running, every one of those claims still fits the capacity and its
queues' limits. That makes the round's victim set minimal in this sense: with any of its victims
(or any subset of them) kept running, some claim the round serves would not fit (fitting is
monotone: keeping more work running never makes a claim fit). It is not always the set with the
fewest victims: two low-priority one-GPU jobs go before one high-priority two-GPU job.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplex.core.queues.drf import EPSILON, Resources, add, fits
from gpuplex.core.queues.ledger import RoundLedger
from gpuplex.core.queues.work import Holding, QueuedJob
from gpuplex.core.spec.queues import WithinQueue


@dataclass(frozen=True, slots=True)
class Victim:
    """Work a round preempts: as it ran (`was`), as it now stands, for which job and why."""

    was: Holding
    now: Holding
    for_job: str
    why: str


def choose_victims(
    ledger: RoundLedger, job: QueuedJob, *, quota_blocked: bool
) -> list[tuple[Holding, str]]:
    """The work to preempt for `job`, with why; empty when the rules allow none that would make
    it fit. When the tenant's own queues (a limit, or a queue that does not borrow) stop it,
    only its own lower-priority work can help."""
    own = ledger.path(job.tenant)[-1]
    room = ledger.room_soon(job.tenant)
    if not quota_blocked and own.preemption.reclaim and ledger.inside_guarantee(job):
        lenders = [t for t in ledger.holdings if t != job.tenant and ledger.borrowing(t, {})]
        chosen = _pick(ledger, job, room, ledger.preemptible(lenders), reclaim=True)
        if chosen:
            why = f"reclaimed for {job.id}: {job.tenant} is inside its guarantee"
            return [(h, why) for h in chosen]
    if own.preemption.within_queue is WithinQueue.LOWER_PRIORITY:
        mine = [h for h in ledger.preemptible([job.tenant]) if h.priority < job.priority]
        chosen = _pick(ledger, job, room, mine, reclaim=False)
        if chosen:
            why = f"preempted by {job.id}, a higher-priority job of {job.tenant}"
            return [(h, why) for h in chosen]
    return []


def _pick(
    ledger: RoundLedger,
    job: QueuedJob,
    room: Resources,
    candidates: list[Holding],
    *,
    reclaim: bool,
) -> list[Holding]:
    """Lowest priority first, then the youngest, taking only work that helps; then pruned to
    a minimal set. Empty when even all of them would not do. Reclaimed work is taken from a
    tenant only while it is above its own guarantee; the tenant's own work, once gone, also
    lowers what its queues' limits count."""

    def enough(chosen: list[Holding]) -> bool:
        freed = add(*(h.resources for h in chosen))
        if not fits(job.ask, add(room, freed)):
            return False
        return reclaim or ledger.quota_refusal(job, less=freed) is None

    ordered = sorted(candidates, key=lambda h: (h.priority, -h.started_s, h.id))
    chosen: list[Holding] = []
    for holding in ordered:
        if enough(chosen):
            break
        helps = any(
            job.ask.get(k, 0.0) > EPSILON and v > EPSILON for k, v in holding.resources.items()
        )
        taken = add(*(h.resources for h in chosen if h.tenant == holding.tenant))
        if helps and (not reclaim or ledger.borrowing(holding.tenant, taken)):
            chosen.append(holding)
    if not chosen or not enough(chosen):
        return []
    for holding in reversed(list(chosen)):
        rest = [h for h in chosen if h is not holding]
        if enough(rest):
            chosen = rest
    return chosen


def spare_unneeded(
    ledger: RoundLedger, claims: list[tuple[QueuedJob, Resources]], victims: list[Victim]
) -> list[Victim]:
    """The round's victims less those every claim it serves fits without (the module
    docstring); the spared ones keep running in `ledger`. Latest victims are tried first."""
    if not victims or not _all_fit(ledger, claims):
        return victims  # a state that was over some bound already: nothing to prove against
    kept = list(victims)
    for victim in reversed(victims):
        ledger.spare(victim.now, victim.was)
        if _all_fit(ledger, claims):
            kept.remove(victim)
        else:
            ledger.evict(victim.was, victim.for_job)
    return kept


def _all_fit(ledger: RoundLedger, claims: list[tuple[QueuedJob, Resources]]) -> bool:
    """Whether every claim's set-aside amount fits, in the kinds it asks: the room once leaving
    work is gone is not below zero, and no queue above it passes a bound."""
    for job, _ in claims:
        room = ledger.room_soon(job.tenant)
        if any(room.get(k, 0.0) < -EPSILON for k, v in job.ask.items() if v > EPSILON):
            return False
        if not ledger.within_quotas_soon(job):
            return False
    return True
