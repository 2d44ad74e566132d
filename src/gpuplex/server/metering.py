"""Metering and chargeback against the store: roll usage up window by window (idempotently: a
window's rows are replaced, never added to), build statements from the roll-ups, and fire budget
alerts once per threshold and period. The arithmetic is gpuplex.core.meter and core.report.

Jobs are billed like replicas: their runs (store `job_runs`) add to their tenants' `allocation`
lines of each window; the fleet's capacity stays that of the applied plans. A statement lists each
job's part of it, over the windows rolled up so far."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal

from gpuplex.core.meter import (
    DEFAULT_MAX_GAP_S,
    JobRunInterval,
    MeterLine,
    MeterWindow,
    PlanInterval,
    SharedServer,
    Source,
    allocation_lines,
    fleet_gpu_seconds,
    gateway_lines,
    job_allocation_lines,
    job_usage,
    server_usage,
    shared_measured_lines,
    shared_servers,
    summed_lines,
)
from gpuplex.core.plan import Plan
from gpuplex.core.report.job_charges import job_charges, with_job_charges
from gpuplex.core.report.prices import PriceBook
from gpuplex.core.report.statement import FleetStatement, build_fleet_statement
from gpuplex.errors import StoreError
from gpuplex.revision import AppliedRevision, AppliedRevisions
from gpuplex.specfile import load_spec_text
from gpuplex.store.jobs import JobRepository
from gpuplex.store.key_usage import KeyUsageRepository, key_usage_of
from gpuplex.store.rollups import RollupRepository
from gpuplex.store.samples import SampleRepository
from gpuplex.store.spec_revisions import SpecRevisions
from gpuplex.store.usage import UsageRepository

SOURCES: tuple[Source, ...] = ("allocation", "measured", "gateway")
log = logging.getLogger("gpuplex.server.metering")
#: At most this many windows per catch-up pass, so a long outage is caught up over several passes.
MAX_WINDOWS_PER_PASS = 500
#: Windows that ended less than this before now are rolled up again at every pass, so inputs that
#: reach the store late still count: the gateway writes a request's usage record when the request
#: ends (a model server may take upstream_timeout_s, 300 s by default) and its mover moves it a few
#: seconds later. Anything later than this needs `POST /meter/rollup` over its range.
LATE_S = 900


@dataclass(frozen=True, slots=True)
class RollupResult:
    windows: int
    rows: int
    rolled_up_to: datetime | None


class Metering:
    def __init__(
        self,
        revisions: SpecRevisions,
        current: AppliedRevisions,
        samples: SampleRepository,
        usage: UsageRepository,
        rollups: RollupRepository,
        window_s: int,
        key_usage: KeyUsageRepository | None = None,
        jobs: JobRepository | None = None,
    ) -> None:
        self._revisions = revisions
        self._current = current
        self._samples = samples
        self._usage = usage
        self._rollups = rollups
        self._key_usage = key_usage
        self._jobs = jobs
        self.window_s = window_s
        # revision -> its plan, validated once: revisions never change, and validating every
        # revision's plan at every pass grew with the history (half a millisecond each)
        self._plans: dict[int, Plan] = {}
        # revision -> the model servers other tenants' adapters ride on, from its spec, found once
        self._shared: dict[int, tuple[SharedServer, ...]] = {}
        # the newest statements and what they were computed from: the dashboard asks each
        # tenant's budget every 10 s, and a month's statement sums some 100,000 roll-up rows; a
        # budget needs two (the month, and the last day for the run rate)
        self._statements: dict[tuple[object, ...], FleetStatement] = {}
        self._first_spend: tuple[tuple[object, ...], dict[str, datetime]] | None = None

    def window_start(self, at: datetime) -> datetime:
        """The start of the roll-up window `at` falls in."""
        return _floor(at, self.window_s)

    def plan_intervals(self, start: datetime, end: datetime) -> list[PlanInterval]:
        """The plans in force during [start, end), each with the time it was in force."""
        revisions = self._revisions.in_force(start, end)
        if not revisions:  # an empty range before the first revision (its first window)
            return []
        intervals = []
        for this, following in zip(revisions, [*revisions[1:], None], strict=True):
            plan = self._plans.get(this.revision)
            if plan is None:
                plan = self._plans[this.revision] = Plan.model_validate(this.plan)
            shared = self._shared.get(this.revision)
            if shared is None:
                spec = load_spec_text(this.spec_yaml, source=f"revision {this.revision}")
                shared = self._shared[this.revision] = shared_servers(spec)
            intervals.append(
                PlanInterval(
                    plan=plan,
                    active_from=this.created_at,
                    # the last one here may have been replaced after `end`: clipping ends it there
                    active_until=following.created_at if following is not None else None,
                    shared_servers=shared,
                )
            )
        return intervals

    def job_runs(self, start: datetime, end: datetime) -> list[JobRunInterval]:
        """The job runs that held capacity at some moment of [start, end)."""
        if self._jobs is None:
            return []
        return [run.interval() for run in self._jobs.runs(start, end)]

    def roll_up_window(
        self,
        window: MeterWindow,
        intervals: list[PlanInterval],
        samples_pruned_before: datetime | None = None,
        job_runs: list[JobRunInterval] | None = None,
    ) -> int:
        """Recompute one window from its inputs and replace what the store had for it. A window
        that starts before `samples_pruned_before` keeps its measured roll-ups: the samples they
        were computed from are gone (server/sample_retention.py). `job_runs` None: read from the
        store."""
        if job_runs is None:
            job_runs = self.job_runs(window.start, window.end)
        records = self._usage.records(since=window.start, until=window.end)
        if self._key_usage is not None:  # each key's tokens, for its share of the spend
            self._key_usage.replace_window(window.start, window.end, key_usage_of(records))
        # a shared model server is billed to the tenants that sent it tokens in this window
        servers = {
            server.key: server
            for interval in intervals
            if window.overlap_seconds(interval.active_from, interval.active_until) > 0
            for server in interval.shared_servers
        }
        usage = server_usage(records, window, list(servers.values()))
        by_source: dict[str, list[MeterLine]] = {
            "allocation": summed_lines(
                allocation_lines(intervals, window, usage) + job_allocation_lines(job_runs, window)
            )
            + fleet_gpu_seconds(intervals, window),
            "gateway": gateway_lines(records, window),
        }
        if samples_pruned_before is None or window.start >= samples_pruned_before:
            gpu_models = _gpu_models(intervals)
            samples = [
                replace(s, gpu_model=gpu_models.get((s.node, s.gpu_index)))
                for s in self._samples.window(
                    window.start - timedelta(seconds=DEFAULT_MAX_GAP_S), window.end
                )
            ]
            by_source["measured"] = shared_measured_lines(samples, window, usage)
        return sum(
            self._rollups.replace_window(window.start, window.end, source, lines)
            for source, lines in by_source.items()
        )

    def catch_up(self, now: datetime) -> RollupResult:
        """Roll up every whole window since the last one rolled up (or the first revision), and
        again those that ended within LATE_S of `now` (their late inputs count; rows are replaced)."""
        first = self._revisions.first_applied_at()
        if first is None:
            return RollupResult(0, 0, None)
        resume = self._rollups.last_window_end("allocation") or first
        recent = max(first, now - timedelta(seconds=LATE_S))
        start = _floor(min(resume, recent), self.window_s)
        end_of_whole = _floor(now, self.window_s)
        last = min(end_of_whole, start + timedelta(seconds=self.window_s * MAX_WINDOWS_PER_PASS))
        result = self.roll_up_range(start, last)
        return result if result.windows else RollupResult(0, 0, resume)

    def roll_up_range(self, start: datetime, end: datetime) -> RollupResult:
        """Recompute the whole windows that [start, end) touches (idempotent: rerun at will)."""
        cursor = _floor(start, self.window_s)
        intervals = self.plan_intervals(cursor, max(end, cursor))
        pruned_before = self._samples.pruned_before() if cursor < end else None
        runs = self.job_runs(cursor, max(end, cursor)) if cursor < end else []
        windows = rows = 0
        while cursor < end:
            window = MeterWindow(cursor, cursor + timedelta(seconds=self.window_s))
            rows += self.roll_up_window(window, intervals, pruned_before, runs)
            windows += 1
            cursor = window.end
        return RollupResult(windows, rows, cursor)

    def lines(self, period: MeterWindow) -> list[MeterLine]:
        """The rolled-up quantities of every window inside `period`, summed per tenant, source,
        metric and dimension (the fleet's capacity lines too)."""
        return [
            MeterLine(tenant, _source(source), metric, dimension, quantity)
            for (tenant, source, metric, dimension), quantity in sorted(
                self._rollups.totals(period.start, period.end).items()
            )
        ]

    def fleet_statement(self, period: MeterWindow, applied: AppliedRevision) -> FleetStatement:
        """The period's statement from the roll-ups; computed again only once a roll-up wrote
        or another spec (prices, tenants) was applied."""
        fingerprint = self._rollups.fingerprint()
        key = (period, applied.revision, fingerprint)
        cached = self._statements.get(key)
        if cached is not None:
            return cached
        book = PriceBook.from_pricing(applied.spec.pricing)
        fleet = build_fleet_statement(
            self.lines(period), book, period, tenants=applied.tenant_names
        )
        # keep only those still current: older roll-ups or revisions are never asked again
        self._statements = {
            k: v for k, v in self._statements.items() if k[1:] == (applied.revision, fingerprint)
        }
        self._statements[key] = fleet
        return fleet

    def statement_with_jobs(
        self, period: MeterWindow, applied: AppliedRevision, tenant: str | None = None
    ) -> FleetStatement:
        """The period's statement with each tenant's jobs (of `tenant` only, if given): what
        their runs held in the windows rolled up so far, priced as the statement prices them."""
        fleet = self.fleet_statement(period, applied)
        rolled_up_to = self._rollups.last_window_end("allocation")
        if self._jobs is None or rolled_up_to is None or rolled_up_to <= period.start:
            return fleet
        billed = MeterWindow(period.start, min(period.end, rolled_up_to))
        runs = self._jobs.runs(billed.start, billed.end, tenant)
        usages = job_usage([run.interval() for run in runs], billed)
        names = {run.job_id: run.name for run in runs}
        book = PriceBook.from_pricing(applied.spec.pricing)
        return with_job_charges(fleet, job_charges(usages, names, book))

    def first_spend(self, period: MeterWindow) -> dict[str, datetime]:
        """Each tenant's first rolled-up window in the period (where its run rate may start);
        read again only once a roll-up wrote."""
        key = (period, self._rollups.fingerprint())
        cached = self._first_spend
        if cached is not None and cached[0] == key:
            return cached[1]
        first = self._rollups.first_window_starts(period.start, period.end)
        self._first_spend = (key, first)
        return first

    def spend(self, period: MeterWindow, applied: AppliedRevision) -> dict[str, Decimal]:
        """Each tenant's statement total for the period so far."""
        fleet = self.fleet_statement(period, applied)
        return {s.tenant: s.total for s in fleet.tenants}


def _source(text: str) -> Source:
    for known in SOURCES:
        if text == known:
            return known
    raise StoreError(f"usage roll-up row with unknown source {text!r}; was the store edited?")


def _floor(at: datetime, window_s: int) -> datetime:
    epoch = datetime(1970, 1, 1, tzinfo=at.tzinfo)
    seconds = int((at - epoch).total_seconds()) // window_s * window_s
    return epoch + timedelta(seconds=seconds)


def _gpu_models(intervals: list[PlanInterval]) -> dict[tuple[str, int], str]:
    return {(g.node, g.index): g.model for i in intervals for g in i.plan.gpus}
