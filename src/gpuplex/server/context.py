"""The composition root: every part of the control plane (the store's repositories, the clock,
the metering, the caches), built once when the server starts (`ServerContext.open`) and kept on
the app (`app.state.context`). The threads started with the server (the job runner, the
reconciler, the scrapers) take it whole; a route never does: it asks for the parts it uses
(server/dependencies.py), and the groups of parts a helper needs together are built from it
here (`budget_books`, `spec_history`, `oidc_identities`) or beside their user
(`job_runner.job_step_inputs`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from fastapi import Request

from gpuplex.clock import SYSTEM_CLOCK, Clock
from gpuplex.oidc.keys import IssuerKeysCache
from gpuplex.revision import AppliedRevisions
from gpuplex.server.budget_books import BudgetBooks
from gpuplex.server.failure_throttle import FailureThrottle
from gpuplex.server.metering import Metering
from gpuplex.server.oidc_principal import OidcIdentities
from gpuplex.server.spec_apply import SpecHistory
from gpuplex.store import AuditLog, Engine, KeyRepository, UsageRepository
from gpuplex.store.budget_enforcement import EnforcementRepository
from gpuplex.store.budgets import BudgetRepository
from gpuplex.store.credential_grants import OidcPeople
from gpuplex.store.host_events import HostEvents
from gpuplex.store.job_logs import JobLogs
from gpuplex.store.jobs import JobRepository
from gpuplex.store.key_usage import KeyUsageRepository
from gpuplex.store.rollups import RollupRepository
from gpuplex.store.samples import SampleRepository
from gpuplex.store.spec_revisions import SpecRevisions
from gpuplex.store.tokens import TokenRepository
from gpuplex.store.web_sessions import WebSessions


@dataclass(slots=True)
class JobRunnerLead:
    """Since when this process's job runner leads (None: it does not): a host's report counts
    once it is newer than that (server/job_runner.py)."""

    since: datetime | None = None


@dataclass(frozen=True, slots=True)
class ServerContext:
    engine: Engine
    #: the control plane's time: what it stamps, and what expiry and windows are measured on
    clock: Clock
    tokens: TokenRepository
    keys: KeyRepository
    revisions: SpecRevisions
    current: AppliedRevisions
    usage: UsageRepository
    samples: SampleRepository
    rollups: RollupRepository
    budgets: BudgetRepository
    audit: AuditLog
    metering: Metering
    #: the tail of each job's output and the host runtimes' events, as the hosts reported them
    #: (the control plane never reads a host's state folder: the two may be on different machines)
    job_logs: JobLogs
    host_events: HostEvents
    key_usage: KeyUsageRepository
    enforcement: EnforcementRepository
    jobs: JobRepository
    #: the identity provider's keys, per issuer, on the system clock whatever `clock` is: the
    #: provider's tokens expire in real time
    issuer_keys: IssuerKeysCache
    #: people signed in to the dashboard with the identity provider (server/sign_in.py)
    web_sessions: WebSessions
    #: people of the identity provider as last seen, for the credentials they made
    people: OidcPeople
    #: since when this process runs the jobs (server/job_runner.py), for why a job waits
    job_runner_lead: JobRunnerLead = field(default_factory=JobRunnerLead)
    #: failed credentials and sign-ins per client address (server/failure_throttle.py)
    failure_throttle: FailureThrottle = field(default_factory=FailureThrottle)

    def now(self) -> datetime:
        """Now on the control plane's clock, timezone-aware UTC."""
        return self.clock.utc_now()

    @property
    def budget_books(self) -> BudgetBooks:
        """What the budgets are read and decided from."""
        return BudgetBooks(
            budgets=self.budgets,
            enforcement=self.enforcement,
            keys=self.keys,
            key_usage=self.key_usage,
            rollups=self.rollups,
            metering=self.metering,
        )

    @property
    def spec_history(self) -> SpecHistory:
        """What a spec is planned against and stored in."""
        return SpecHistory(revisions=self.revisions, current=self.current, clock=self.clock)

    @property
    def oidc_identities(self) -> OidcIdentities:
        """What makes a principal of an identity provider's person."""
        return OidcIdentities(
            current=self.current, issuer_keys=self.issuer_keys, people=self.people, clock=self.clock
        )

    @classmethod
    def open(
        cls,
        engine: Engine,
        clock: Clock,
        rollup_window_s: int = 60,
    ) -> ServerContext:
        revisions = SpecRevisions(engine)
        current = AppliedRevisions(revisions)
        samples = SampleRepository(engine)
        usage = UsageRepository(engine)
        rollups = RollupRepository(engine)
        key_usage = KeyUsageRepository(engine)
        jobs = JobRepository(engine)
        return cls(
            engine=engine,
            clock=clock,
            tokens=TokenRepository(engine),
            keys=KeyRepository(engine),
            revisions=revisions,
            current=current,
            usage=usage,
            samples=samples,
            rollups=rollups,
            budgets=BudgetRepository(engine),
            audit=AuditLog(engine),
            metering=Metering(
                revisions, current, samples, usage, rollups, rollup_window_s, key_usage, jobs
            ),
            job_logs=JobLogs(engine),
            host_events=HostEvents(engine),
            key_usage=key_usage,
            enforcement=EnforcementRepository(engine),
            jobs=jobs,
            issuer_keys=IssuerKeysCache(SYSTEM_CLOCK),
            web_sessions=WebSessions(engine),
            people=OidcPeople(engine),
        )


def server_context(request: Request) -> ServerContext:
    context: ServerContext = request.app.state.context
    return context
