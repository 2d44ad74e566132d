"""The parts of the control plane a route may ask for, one FastAPI dependency each.

The composition root stays: `ServerContext.open` (server/context.py) builds every part once, when
the server starts, and the app keeps it (`app.state.context`). Routes and the helpers they call
never take it whole: each asks for the parts it uses (`jobs: Jobs`, `clock: TheClock`,
`current: Current`...), so a route's signature says what it touches, and a test of a helper
hands it those parts only. Where a helper needs several parts together, it takes their named
group (`BudgetBooks`, `SpecHistory`, `OidcIdentities`, `JobStepInputs`), which the composition
root builds from the same parts.

A route that read `ctx.now()` reads `clock.utc_now()` at the same point: times are read when they
were before.

Each dependency is `async def`: it only reads an attribute, and FastAPI runs a plain `def`
dependency in a worker thread, one hop per part a route asks for.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from gpuplex.clock import Clock
from gpuplex.revision import AppliedRevisions
from gpuplex.server.budget_books import BudgetBooks
from gpuplex.server.context import server_context
from gpuplex.server.failure_throttle import FailureThrottle
from gpuplex.server.job_runner import JobStepInputs, job_step_inputs
from gpuplex.server.metering import Metering
from gpuplex.server.oidc_principal import OidcIdentities
from gpuplex.server.spec_apply import SpecHistory
from gpuplex.store import AuditLog, KeyRepository, UsageRepository
from gpuplex.store.budgets import BudgetRepository
from gpuplex.store.credential_grants import OidcPeople
from gpuplex.store.host_events import HostEvents
from gpuplex.store.job_logs import JobLogs
from gpuplex.store.jobs import JobRepository
from gpuplex.store.rollups import RollupRepository
from gpuplex.store.samples import SampleRepository
from gpuplex.store.tokens import TokenRepository
from gpuplex.store.web_sessions import WebSessions


async def clock_of(request: Request) -> Clock:
    return server_context(request).clock


async def current_of(request: Request) -> AppliedRevisions:
    return server_context(request).current


async def tokens_of(request: Request) -> TokenRepository:
    return server_context(request).tokens


async def keys_of(request: Request) -> KeyRepository:
    return server_context(request).keys


async def jobs_of(request: Request) -> JobRepository:
    return server_context(request).jobs


async def job_logs_of(request: Request) -> JobLogs:
    return server_context(request).job_logs


async def host_events_of(request: Request) -> HostEvents:
    return server_context(request).host_events


async def usage_of(request: Request) -> UsageRepository:
    return server_context(request).usage


async def samples_of(request: Request) -> SampleRepository:
    return server_context(request).samples


async def rollups_of(request: Request) -> RollupRepository:
    return server_context(request).rollups


async def budgets_of(request: Request) -> BudgetRepository:
    return server_context(request).budgets


async def audit_of(request: Request) -> AuditLog:
    return server_context(request).audit


async def metering_of(request: Request) -> Metering:
    return server_context(request).metering


async def web_sessions_of(request: Request) -> WebSessions:
    return server_context(request).web_sessions


async def people_of(request: Request) -> OidcPeople:
    return server_context(request).people


async def failure_throttle_of(request: Request) -> FailureThrottle:
    return server_context(request).failure_throttle


async def budget_books_of(request: Request) -> BudgetBooks:
    return server_context(request).budget_books


async def spec_history_of(request: Request) -> SpecHistory:
    return server_context(request).spec_history


async def oidc_identities_of(request: Request) -> OidcIdentities:
    return server_context(request).oidc_identities


async def job_step_inputs_of(request: Request) -> JobStepInputs:
    return job_step_inputs(server_context(request))


#: the control plane's time: what it stamps, and what expiry and windows are measured on
TheClock = Annotated[Clock, Depends(clock_of)]
#: the revision applied now (`current.get()` reads it when called)
Current = Annotated[AppliedRevisions, Depends(current_of)]
Tokens = Annotated[TokenRepository, Depends(tokens_of)]
Keys = Annotated[KeyRepository, Depends(keys_of)]
Jobs = Annotated[JobRepository, Depends(jobs_of)]
#: the tail of each job's output, as its host reported it
JobOutput = Annotated[JobLogs, Depends(job_logs_of)]
#: the host runtimes' events, as they reported them
RuntimeEvents = Annotated[HostEvents, Depends(host_events_of)]
Usage = Annotated[UsageRepository, Depends(usage_of)]
Samples = Annotated[SampleRepository, Depends(samples_of)]
Rollups = Annotated[RollupRepository, Depends(rollups_of)]
Budgets = Annotated[BudgetRepository, Depends(budgets_of)]
Audit = Annotated[AuditLog, Depends(audit_of)]
TheMetering = Annotated[Metering, Depends(metering_of)]
#: people signed in to the dashboard (server/sign_in.py)
Sessions = Annotated[WebSessions, Depends(web_sessions_of)]
#: people of the identity provider as last seen, for the credentials they made
People = Annotated[OidcPeople, Depends(people_of)]
#: failed credentials and sign-ins per client address (server/failure_throttle.py)
Throttle = Annotated[FailureThrottle, Depends(failure_throttle_of)]
Books = Annotated[BudgetBooks, Depends(budget_books_of)]
History = Annotated[SpecHistory, Depends(spec_history_of)]
Identities = Annotated[OidcIdentities, Depends(oidc_identities_of)]
#: the jobs, the applied revision, and what the job runner's next step reads (why a job waits)
JobSteps = Annotated[JobStepInputs, Depends(job_step_inputs_of)]
